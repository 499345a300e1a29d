"""Outputs of a pruning sweep: dP bar plot, Spearman with angular distance, summary and manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from layerprobe.errors import RunError


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when undefined."""
    import pandas as pd

    if len(x) < 3:
        return None
    rx = pd.Series(x).rank().to_numpy()
    ry = pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def find_angular(folder: Path, explicit: str | None) -> Path | None:
    """--angular DIR, else an `angular` run beside this one (reports/<model>/angular)."""
    if explicit:
        path = Path(explicit)
        if not (path / "angular.csv").is_file():
            raise RunError(f"--angular '{explicit}' has no angular.csv: pass a `layerprobe angular` run folder.")
        return path
    sibling = folder.parent / "angular"
    return sibling if (sibling / "angular.csv").is_file() else None


def write_prune_outputs(folder: Path, rows: list[dict], config: Any, facts: dict, higher: bool, started: str,
                        seconds: float, warnings: list[str], manifest_extra: dict | None = None):
    import matplotlib.pyplot as plt
    import pandas as pd

    from layerprobe.plots.bars import prune_bars
    from layerprobe.prune import COLUMNS, PruneRun, check_metric
    from layerprobe.runs.folder import save_figure, write_csv, write_json
    from layerprobe.runs.manifest import build_manifest

    table = pd.DataFrame(rows, columns=COLUMNS).sort_values(["layer", "metric"]).reset_index(drop=True)
    write_csv(folder / "prune.csv", table)
    metric = check_metric(config.metric, list(dict.fromkeys(table["metric"])))
    main = table[table["metric"] == metric].sort_values("layer")
    harm = -main["delta"] if higher else main["delta"]  # how much worse the model gets without the layer(s)
    order = main.assign(harm=harm.to_numpy()).sort_values("harm")
    correlation = None
    angular_dir = find_angular(folder, config.angular)
    distance = None
    if angular_dir is not None:
        angular = pd.read_csv(angular_dir / "angular.csv")
        lookup = {(int(r.layer), int(r.n)): r.distance for r in angular.itertuples()}
        distance = np.array([lookup.get((int(layer), config.block), np.nan) for layer in main["layer"]])
        if np.isfinite(distance).all():
            correlation = spearman(distance, main["delta"].to_numpy())
        else:
            warnings.append(f"The angular run {angular_dir} does not match this model's layers: no correlation.")
            distance = None
    summary = {
        "command": "prune",
        **facts,
        "metric": metric,
        "higher_is_better": higher,
        "baseline": float(main["baseline"].iloc[0]) if len(main) else None,
        "block": config.block,
        "variants": len(main),
        "least_important": [str(x) for x in order["removed"].head(3)],
        "most_important": [str(x) for x in order["removed"].tail(3)[::-1]],
        "angular_run": str(angular_dir) if angular_dir else None,
        "spearman_angular_delta": correlation,
        "seconds": round(seconds, 3),
        "warnings": warnings,
    }
    figure = prune_bars(main["removed"].astype(str).tolist(), main["delta"].to_numpy(), metric,
                        f"{facts['model']}: {config.task}, baseline {metric} = {summary['baseline']:.4g}",
                        distance, correlation)
    save_figure(folder / "prune", figure, config.formats)
    plt.close(figure)
    write_json(folder / "summary.json", summary)
    write_json(folder / "manifest.json", build_manifest("prune", config.to_dict(), started, seconds, **facts,
                                                                  **(manifest_extra or {})))
    return PruneRun(folder, table, summary, warnings)
