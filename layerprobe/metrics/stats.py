"""Statistics over layers: effective rank, rank correlation, power-law fits, depth ratios."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def effective_rank(h: torch.Tensor) -> float:
    """exp(entropy) of the normalized singular values of the centered point cloud h: (samples, width)."""
    import torch  # here: the readers (compare, report) import this module for its statistics and load no torch

    centered = h.double() - h.double().mean(0, keepdim=True)
    if centered.shape[0] > 4 * centered.shape[1]:  # many samples: the (width x width) Gram's eigenvalues are faster
        eig = torch.linalg.eigvalsh(centered.T @ centered)
        eig = torch.where(eig > 1e-12 * eig.max(), eig, torch.zeros_like(eig))  # rounding noise of zero directions
        s = eig.sqrt()
    else:
        s = torch.linalg.svdvals(centered)
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def spearman_interval(rho: float, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% interval of a Spearman correlation over n points: Fisher's z with the variance 1.06 / (n - 3) of
    Fieller, Hartley and Pearson (1957); None under 5 points, where it says nothing."""
    import math

    if n < 5:
        return None
    r = max(min(rho, 0.999999), -0.999999)
    half = z * math.sqrt(1.06 / (n - 3))
    return math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half)


def spearman(x, y) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when undefined (under 3 points or a constant)."""
    import numpy as np
    import pandas as pd

    if len(x) < 3:
        return None
    rx = pd.Series(x).rank().to_numpy()
    ry = pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def power_law(x, y) -> dict[str, float] | None:
    """Least-squares slope of log y on log x with a 95% interval (normal approximation); None if undefined."""
    import math

    import numpy as np

    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = (x > 0) & (y > 0) & np.isfinite(y)
    x, y = np.log(x[keep]), np.log(y[keep])
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    se = math.sqrt(float(residual @ residual) / (len(x) - 2) / float(((x - x.mean()) ** 2).sum()))
    return {"slope": float(slope), "ci_low": float(slope - 1.96 * se), "ci_high": float(slope + 1.96 * se),
            "points": int(len(x))}


def depth_ratio(values: list[float]) -> float | None:
    """Median of the last third of layers over the median of the first third: < 1 means the quantity shrinks with
    depth. Medians, so one outlying layer (a Post-LN model's layer 0 input gradient, 50x every other) does not
    speak for its whole third."""
    import statistics

    third = max(1, len(values) // 3)
    early, late = statistics.median(values[:third]), statistics.median(values[-third:])
    return late / early if early > 0 else None
