"""report, compare and demo: the committed demo's real runs (and, extended, a fresh quick demo), perturbed by hand where a
regression is needed."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest

from layerprobe.report.findings import findings, spans
from layerprobe.runs.read import Run

from .helpers import DEMO_REFERENCE, assert_error, invoke


# The committed demo's runs in the order the demo writes them (reports/demo: real runs of the current code,
# regenerated with it; tests/unit/test_docs_truth.py reads their numbers)
COMMITTED_DEMO = Path(__file__).resolve().parents[1] / "reports" / "demo"
DEMO_RUNS = ("angular", "prune-drift", "smollm2-angular", "smollm2-prune-kl", "smollm2-prune-ppl", "smollm2-curve-kl",
             "gemma3-angular", "gemma3-prune-kl", "gradnorm")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The committed demo's runs copied, and a report of them written now by this code (seconds, where a fresh quick
    demo takes minutes: that one is `quick_demo`, in the extended tier)."""
    out = tmp_path_factory.mktemp("demo") / "committed"
    for name in DEMO_RUNS:
        shutil.copytree(COMMITTED_DEMO / name, out / name)
    result = invoke("report", *[out / name for name in DEMO_RUNS], "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "quick"
    result = invoke("demo", "--quick", "--out", out)
    assert result.exit_code == 0, result.output
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow  # the quick demo fixture: minutes
@pytest.mark.extended  # the default tier: test_demo_resume.py (the demo's real commands on tiny models)
def test_demo_writes_three_runs_and_a_report(quick_demo):
    demo = quick_demo
    for name, files in {"angular": ["angular.csv", "layers.csv", "heatmap.png"], "prune-drift": ["prune.csv", "prune.png"],
                        "smollm2-angular": ["angular.csv", "layers.csv", "heatmap.png"],
                        "smollm2-prune-kl": ["prune.csv", "prune.png"], "smollm2-prune-ppl": ["prune.csv", "prune.png"],
                        "gradnorm": ["gradnorm.csv", "variance.csv", "gradnorm.png"]}.items():
        for file in files + ["summary.json", "manifest.json"]:
            assert (demo / name / file).is_file(), (name, file)
    assert (demo / "report.html").is_file() and (demo / "report.md").is_file()


@pytest.mark.slow  # the quick demo fixture: minutes
@pytest.mark.extended  # the committed demo's numbers: tests/unit/test_docs_truth.py
def test_fresh_quick_demo_matches_the_committed_reference(quick_demo):
    """The committed demo (its tables: tests/data/demo) is the baseline; a smaller fresh run must agree within loose
    tolerances."""
    assert (DEMO_REFERENCE / "angular" / "summary.json").is_file(), "tests/data/demo holds the reference's tables"
    from layerprobe.cli.demo import QUICK_TOLERANCES

    assert QUICK_TOLERANCES == {"angular": 0.03, "prune": 0.25, "gradnorm": 0.5, "variance": 0.5}  # the README's
    result = invoke("compare", DEMO_REFERENCE, quick_demo, *[f"--tolerance={k}={v}" for k, v in QUICK_TOLERANCES.items()])
    assert result.exit_code == 0, result.output
    assert "OK: all" in result.output


class Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def test_html_report_is_self_contained_and_every_image_loads(demo):
    page = (demo / "report.html").read_text(encoding="utf-8")
    parser = Images()
    parser.feed(page)
    assert len(parser.sources) == 11  # 2 overlays (angular, prune), 3 heatmaps, 4 prune bars, the curve, gradnorm
    for src in parser.sources:
        assert src.startswith("data:image/png;base64,")  # opens offline: nothing fetched
        pixels = mpimg.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert pixels.shape[0] > 200 and pixels.shape[1] > 300 and pixels.std() > 0.01  # a real picture, not blank
    assert "Post-LN signature" in page  # MiniLM is BERT: early layers change least (finding from the numbers)
    markdown = (demo / "report.md").read_text(encoding="utf-8")
    for link in [line.split("](")[1].rstrip(")") for line in markdown.splitlines() if line.startswith("![")]:
        assert (demo / link).is_file(), link


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_report_renders_in_headless_chromium(demo, tmp_path):
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1280,2400", (demo / "report.html").as_uri()], check=True, capture_output=True, timeout=120)
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2400, 1280)
    colors = {tuple(p) for p in (pixels[::8, ::8, :3] * 255).astype(int).reshape(-1, 3)}
    assert len(colors) > 200  # text and plots drawn, not an empty page


def test_compare_names_the_offending_layer(demo, tmp_path):
    new = copy(demo / "angular", tmp_path / "new")
    table = pd.read_csv(new / "angular.csv")
    row = (table.layer == 2) & (table.n == 1)
    old_value = float(table.loc[row, "distance"].iloc[0])
    table.loc[row, "distance"] += 0.05
    table.to_csv(new / "angular.csv", index=False)
    result = invoke("compare", demo / "angular", new, "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and len(data["failed"]) == 1
    failed = data["failed"][0]
    assert failed["where"] == "l=2 n=1" and failed["old"] == pytest.approx(old_value)
    assert failed["delta"] == pytest.approx(0.05)
    assert invoke("compare", demo / "angular", new, "--tolerance", "angular=0.06").exit_code == 0
    text = invoke("compare", demo / "angular", new).output
    assert "FAIL angular d(l,n) l=2 n=1" in text and f"REGRESSION: 1 of {data['checks']} " in text
    assert data["checks"] > 21  # the 21 d(l, n), and every other number angular.csv and layers.csv declare


def test_compare_prune_direction_and_formats(demo, tmp_path):
    new = copy(demo / "prune-drift", tmp_path / "new")
    table = pd.read_csv(new / "prune.csv")
    biggest = float(table["delta"].abs().max())
    table.loc[table.layer == 4, ["delta", "pruned"]] += 0.2 * biggest  # over the default 5% of the largest |dP|
    table.to_csv(new / "prune.csv", index=False)
    junit = invoke("compare", demo / "prune-drift", new, "--format", "junit")
    assert junit.exit_code == 1
    suite = ET.fromstring(junit.output).find("testsuite")
    # baseline + 6 layers' dP, and each row's layer, block, pruned, delta_stderr, delta_lo, delta_hi, p_value, family
    assert suite.get("tests") == "55" and suite.get("failures") == "1"
    failing = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failing[0].get("name") == "layer 4"
    markdown = invoke("compare", demo / "prune-drift", new, "--format", "markdown", "--output", tmp_path / "s.md")
    assert markdown.exit_code == 1 and "| metric | checks | failed |" in markdown.output
    assert (tmp_path / "s.md").read_text().startswith("### layerprobe compare :x:")


def test_compare_gradnorm_relative_tolerance(demo, tmp_path):
    new = copy(demo / "gradnorm", tmp_path / "new")
    table = pd.read_csv(new / "gradnorm.csv")
    pick = (table.norm == "post") & (table.layer == 7) & (table.kind == "input") & (table.module == "block")
    table.loc[pick, "grad_norm"] *= 1.3  # +30% against a 25% default
    table.to_csv(new / "gradnorm.csv", index=False)
    result = invoke("compare", demo / "gradnorm", new)
    assert result.exit_code == 1 and "grad input post step 0 layer 7" in result.output
    assert invoke("compare", demo / "gradnorm", new, "--tolerance", "gradnorm=0.35").exit_code == 0


def test_compare_and_report_unusable_input(demo, tmp_path):
    cases = []
    cases.append((["compare", demo / "angular", demo / "gradnorm"], "cannot compare an angular run with a gradnorm"))
    fewer = copy(demo / "angular", tmp_path / "fewer")
    summary = json.loads((fewer / "summary.json").read_text())
    summary["num_layers"] = 5
    (fewer / "summary.json").write_text(json.dumps(summary))
    for name, keep in (("angular.csv", lambda t: t["layer"] + t["n"] <= 5), ("layers.csv", lambda t: t["layer"] <= 5)):
        table = pd.read_csv(fewer / name)  # a whole 5-block grid: a summary edited alone is a damaged run (refused)
        table[keep(table)].to_csv(fewer / name, index=False)
    cases.append((["compare", demo / "angular", fewer], "different layer counts (6 vs 5)"))
    broken = copy(demo / "angular", tmp_path / "broken")
    (broken / "manifest.json").write_text("{not json")
    cases.append((["compare", demo / "angular", broken], "not valid JSON"))
    cases.append((["report", broken], "not valid JSON"))
    missing = copy(demo / "prune-drift", tmp_path / "missing")
    (missing / "prune.csv").unlink()
    cases.append((["compare", demo / "prune-drift", missing], "prune.csv is missing"))
    cases.append((["report", tmp_path / "nothing"], "does not exist"))
    (tmp_path / "empty").mkdir()
    cases.append((["report", tmp_path / "empty"], "holds no layerprobe runs"))
    cases.append((["compare", demo / "angular", demo / "angular", "--tolerance", "angle=0.1"], "Unknown tolerance 'angle'"))
    cases.append((["compare", demo / "angular", demo / "angular", "--format", "xml"], "Unknown --format 'xml'"))
    cases.append((["compare", demo, demo / "angular"], "different runs"))
    for args, needle in cases:
        result = invoke(*args)
        assert_error(result, needle)


def test_spans_and_findings_by_hand(tmp_path):
    assert spans([3, 4, 5, 9]) == "3-5, 9" and spans([0]) == "0" and spans([]) == ""
    # A Pre-LN-like profile written by hand: deep layers change little.
    d1 = [0.40, 0.30, 0.25, 0.10, 0.08, 0.05, 0.06, 0.04]
    angular = pd.DataFrame({"layer": range(8), "n": 1, "distance": d1})
    run = Run(tmp_path, "angular", {"model": "m", "num_layers": 8,
                                    "prune_first": [{"n": 2, "layers": "5-6", "distance": 0.09}]}, {}, {"angular": angular})
    lines = findings(run)
    # 5 of 8 layers under the line: the threshold names no candidates (the ranking does)
    assert lines[0].startswith("5 of 8 layers change the representation by less than 0.2")
    assert "layer 7 (0.040)" in lines[1] and "layer 0 (0.400)" in lines[1]
    assert "relative depth 1.00, 0.71, 0.86" in lines[2] and "the last third of the stack" in lines[2]  # 7, 5, 6 of 0..7
    assert "Pre-LN signature" in lines[3]
    assert "layers 5-6" in lines[4]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_compare_refuses_non_finite_numbers_as_unusable_in_every_format(value, tmp_path):
    """NaN compares false with everything, so a check that only asks `abs(delta) > limit` would pass it; and a
    verdict on it (REGRESSION) would say what report refuses to say: a non-finite always-measured number makes the
    run unusable, on either side, in every format: exit 2, naming the file."""
    import shutil

    import pandas as pd

    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(DEMO_REFERENCE / "angular", old)
    shutil.copytree(old, new)
    table = pd.read_csv(new / "angular.csv")
    table.loc[(table["layer"] == 2) & (table["n"] == 1), "distance"] = float(value)
    table.to_csv(new / "angular.csv", index=False)
    for fmt in ("text", "markdown", "json", "junit"):
        for pair in ((old, new), (new, old), (new, new)):
            result = invoke("compare", *pair, "--format", fmt, "--tolerance", "angular=1")
            assert_error(result, f"'{new / 'angular.csv'}' has an empty, infinite or NaN distance: the run is unusable")
    assert_error(invoke("report", new, "--out", tmp_path / "page"), "infinite or NaN distance")


def test_damaged_tables_are_refused_by_every_reader(tmp_path):
    """A CSV cut inside its last row, a duplicated row, a header-only file or a NaN distance: compare, report and
    --from-curve refuse the run in one line instead of judging or using it."""
    import shutil

    reference = DEMO_REFERENCE / "angular"
    cases = {
        "cut": lambda text: text[: len(text) - 7],
        "twice": lambda text: text + text.splitlines()[-1] + "\n",
        "empty": lambda text: text.splitlines()[0] + "\n",
        "nan": lambda text: text.replace(text.splitlines()[1], ",".join(
            v if i != 2 else "" for i, v in enumerate(text.splitlines()[1].split(","))), 1),
    }
    needles = {"cut": "ends inside a row", "twice": "twice", "empty": "holds no rows", "nan": "NaN distance"}
    for name, damage in cases.items():
        folder = tmp_path / name
        shutil.copytree(reference, folder)
        (folder / "angular.csv").write_text(damage((reference / "angular.csv").read_text()))
        assert_error(invoke("compare", reference, folder), needles[name])
        assert_error(invoke("report", folder, "--out", tmp_path / f"page-{name}"), needles[name])
    curve = DEMO_REFERENCE / "smollm2-curve-kl"
    shutil.copytree(curve, tmp_path / "curve")
    text = (curve / "curve.csv").read_text()
    (tmp_path / "curve" / "curve.csv").write_text(text[: len(text) - 3])
    assert_error(invoke("export", "--from-curve", tmp_path / "curve", "--out", tmp_path / "e"), "ends inside a row")


def test_compare_says_when_the_settings_differ(model_dirs, tmp_path):
    """Two runs measured with other settings: the verdict still comes, with a note naming each difference."""
    common = ["angular", model_dirs["llama"], "--dataset", "builtin", "--seq-len", "32", "--batch-size", "2"]
    for name, tokens in (("a", 128), ("b", 128), ("c", 256)):
        assert invoke(*common, "--tokens", tokens, "--out", tmp_path / name).exit_code == 0
    same = invoke("compare", tmp_path / "a", tmp_path / "b")
    assert same.exit_code == 0 and "settings" not in same.output
    other = invoke("compare", tmp_path / "a", tmp_path / "c", "--tolerance", "angular=1")
    assert "settings that change the numbers differ (data.tokens 128 -> 256)" in " ".join(other.output.split())
    assert "OK: all" in other.output
    # report of two runs of one model: told apart by their folders; a second report keeps the first one's page
    assert invoke("report", tmp_path / "a", tmp_path / "c").exit_code == 0
    page = (tmp_path / "report.md").read_text()
    assert "### llama [a]" in page and "### llama [c]" in page
    first = (tmp_path / "report.html").read_bytes()
    again = invoke("report", tmp_path / "b")
    assert again.exit_code == 0 and (tmp_path / "report-2" / "report.html").is_file()
    assert (tmp_path / "report.html").read_bytes() == first
    assert "report-2" in "".join(again.output.split())  # the path as printed, wrapped at the terminal's width


def records_run(folder, changes: dict[str, tuple[int, int]], n: int = 200):
    """A prune run folder written by hand with its records: 200 questions, the unpruned model right on the first
    120; removing layer l breaks `lost` of the right answers (from the first) and fixes `gained` wrong ones (from
    the last)."""
    from layerprobe.evaluation import records

    folder.mkdir(parents=True)
    before = [1.0] * 120 + [0.0] * (n - 120)
    rows = [{"removed": "unpruned", "task": "t", "doc_id": i, "acc": v} for i, v in enumerate(before)]
    table = []
    for layer in range(3):
        lost, gained = changes.get(str(layer), (0, 0))
        after = [0.0 if i < lost else 1.0 if i >= n - gained else v for i, v in enumerate(before)]
        rows += [{"removed": str(layer), "task": "t", "doc_id": i, "acc": v} for i, v in enumerate(after)]
        table.append({"layer": layer, "block": 1, "removed": str(layer), "metric": "acc", "baseline": sum(before) / n,
                      "pruned": sum(after) / n, "delta": sum(after) / n - sum(before) / n})
    records.write(folder, rows)
    pd.DataFrame(table).to_csv(folder / "prune.csv", index=False)
    (folder / "summary.json").write_text(json.dumps({"command": "prune", "task": "t", "metric": "acc", "model": "m",
                                                     "higher_is_better": True, "num_layers": 3}))
    (folder / "manifest.json").write_text("{}")
    return folder


def test_compare_with_records_uses_the_paired_interval(tmp_path):
    old = records_run(tmp_path / "old", {"0": (40, 0), "1": (10, 2)})
    same = records_run(tmp_path / "same", {"0": (40, 0), "1": (10, 2)})
    result = invoke("compare", old, same, "--format", "json")
    assert result.exit_code == 0 and json.loads(result.output)["ok"]
    assert "by tolerance and paired 95% interval" in invoke("compare", old, same).output
    # layer 1 now breaks 40 answers: dP -0.04 -> -0.19, beyond the tolerance (0.05 x 0.6 = 0.03) and its interval
    shifted = records_run(tmp_path / "shifted", {"0": (40, 0), "1": (40, 2)})
    result = invoke("compare", old, shifted, "--format", "json")
    assert result.exit_code == 1
    failed = json.loads(result.output)["failed"]
    assert [f["where"] for f in failed] == ["layer 1"] and failed[0]["rule"] == "tolerance and paired interval"
    assert failed[0]["interval"][1] < 0 and failed[0]["delta"] == pytest.approx(-0.15)
    # 30 lost and 14 gained instead of 10 and 2: dP moves by -0.04, beyond the tolerance, yet the changes run both
    # ways (McNemar-like noise): within the paired interval, not a regression
    noisy = records_run(tmp_path / "noisy", {"0": (40, 0), "1": (30, 14)})
    result = invoke("compare", old, noisy, "--format", "json")
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["ok"], data
    text = invoke("compare", old, noisy).output
    # 4 scores by tolerance and interval, and each row's layer, block and pruned columns by their rules
    assert "OK: all 13 checks within tolerance (4 of 13 checks by tolerance and paired 95% interval" in text
    # without records in both runs: the tolerance alone decides, and the same change fails
    (noisy / "samples.csv.gz").unlink()
    text = invoke("compare", old, noisy).output
    assert "REGRESSION: 1 of 13" in text and "tolerance only" in text


def test_report_into_its_run_leaves_the_record_alone_and_never_into_one_of_several(tmp_path):
    """report --out RUN (one run) writes its page beside the run but never into the run's manifest.json: the record
    stays what the run wrote, a later --overwrite of the run neither refuses the page nor removes it; with several
    runs --out may be none of them (that run's folder would hold another run's figures)."""
    from layerprobe.runs.folder import _replaced, check_owned
    runs = {}
    for name in ("prune-drift", "angular"):
        runs[name] = tmp_path / name
        shutil.copytree(DEMO_REFERENCE / name, runs[name])
        manifest = json.loads((runs[name] / "manifest.json").read_text())  # a current run's record: its files listed
        listed = sorted(p.relative_to(runs[name]).as_posix() for p in runs[name].rglob("*") if p.is_file())
        (runs[name] / "manifest.json").write_text(json.dumps({**manifest, "files": listed}))
    own = runs["prune-drift"]
    record = (own / "manifest.json").read_bytes()
    result = invoke("report", own, "--out", own)
    assert result.exit_code == 0, result.output
    assert (own / "report.html").is_file() and (own / "report.md").is_file()
    assert (own / "manifest.json").read_bytes() == record
    check_owned(own, "prune", "--overwrite")  # the page is layerprobe's: no refusal
    assert set(_replaced(own, "prune")) == {"manifest.json", "prune.csv", "summary.json"}  # and not removed
    assert invoke("report", own, "--out", own).exit_code == 0  # its own page again: replaced
    other = runs["angular"]
    before = sorted(p.relative_to(other).as_posix() for p in other.rglob("*"))
    assert_error(invoke("report", own, other, "--out", other), "one of the 2 runs this report reads")
    assert sorted(p.relative_to(other).as_posix() for p in other.rglob("*")) == before
    assert (own / "manifest.json").read_bytes() == record
