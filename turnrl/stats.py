"""Figures a reviewer accepts: means over distinct items with their uncertainty, and paired comparisons of two runs.

Small pure functions over plain numbers (the standard library and numpy only):

* :func:`collapse` — repeats of one item (several samples of one task, two presentations of one problem) made one
  value per distinct item: their mean.
* :func:`mean_interval` — a mean with its standard error and confidence interval: the Wilson score interval for
  0/1 values (successes), the normal interval otherwise.
* :func:`paired_bootstrap` — the difference of two runs scored on the same items, with a paired bootstrap interval.
* :func:`mcnemar_exact` — McNemar's exact test on two runs' 0/1 outcomes per item.
* :func:`pooled_paired` — several seeds' paired differences pooled: their mean and a Student-t interval over seeds.
* :func:`z_value`, :func:`t_value` — the two-sided critical values these intervals use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

NAN = float("nan")


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values with its standard error and a confidence interval ``[low, high]``."""

    mean: float
    se: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class Paired:
    """Two runs on the same ``n`` items: their means, ``diff = mean_b - mean_a``, the bootstrap standard error of the
    difference and its percentile interval ``[low, high]``."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    se: float
    low: float
    high: float


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test: ``only_a`` items run A got right and B wrong, ``only_b`` the reverse, and the two-sided
    exact binomial p-value of so uneven a split of the discordant items (1.0 when there are none)."""

    only_a: int
    only_b: int
    p_value: float


@dataclass(frozen=True)
class Pooled:
    """Paired differences over ``seeds`` seeds: their mean ``diff``, its standard error and interval, and ``method``
    (how the interval was made)."""

    seeds: int
    diff: float
    se: float
    low: float
    high: float
    method: str


def collapse(keys: Iterable[str], values: Iterable[float]) -> dict[str, float]:
    """The mean value per distinct key: repeats of one item collapse to their mean, keys in the order they first
    appear.

    Raises:
        ValueError: ``keys`` and ``values`` differ in length.
    """
    keys, values = list(keys), [float(v) for v in values]
    if len(keys) != len(values):
        raise ValueError(f"collapse needs one value per key, got {len(keys)} keys and {len(values)} values")
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for key, value in zip(keys, values):
        sums[key] = sums.get(key, 0.0) + value
        counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


def is_binary(values: Iterable[float]) -> bool:
    """Whether every value is 0 or 1 (outcomes: right or wrong). True for no values."""
    return all(v in (0, 1) for v in values)


def z_value(confidence: float = 0.95) -> float:
    """The two-sided normal critical value of ``confidence``: 1.959964… for 0.95."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def _t_central(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with an integer ``df`` (Abramowitz & Stegun 26.7.3–4, exact finite sums)."""
    theta = math.atan(t / math.sqrt(df))
    c, s = math.cos(theta), math.sin(theta)
    if df % 2 == 1:
        term, total = c, 0.0 if df == 1 else c
        for k in range(3, df - 1, 2):  # c, (2/3)c^3, (2·4)/(3·5)c^5, ... up to c^(df-2)
            term *= (k - 1) / k * c * c
            total += term
        return 2.0 / math.pi * (theta + s * total)
    term = total = 1.0
    for k in range(2, df - 1, 2):  # 1, (1/2)c^2, (1·3)/(2·4)c^4, ... up to c^(df-2)
        term *= (k - 1) / k * c * c
        total += term
    return s * total


def t_value(confidence: float, df: int) -> float:
    """The two-sided Student-t critical value of ``confidence`` with ``df`` degrees of freedom (12.706… for 0.95 and
    one degree, 2.776… for four), found by bisection on the exact t distribution.

    Raises:
        ValueError: ``df`` < 1 or ``confidence`` outside (0, 1).
    """
    if df < 1:
        raise ValueError(f"a t value needs at least one degree of freedom, got {df}")
    low, high = 0.0, z_value(confidence)
    while _t_central(high, df) < confidence:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if _t_central(mid, df) < confidence:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def wilson(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / n``: centre ``(p + z²/2n) / (1 + z²/n)``, half-width
    ``z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²)``; stays inside [0, 1] and is not empty at p = 0 or 1. No trials
    (n = 0): (0, 1), nothing known."""
    if n == 0:
        return 0.0, 1.0
    z = z_value(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact ends where rounding would leave 1e-17
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return low, high


def mean_interval(values: Iterable[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` with its standard error and ``confidence`` interval.

    Values all 0 or 1 (successes per item): ``se = sqrt(p(1-p)/n)`` and the Wilson score interval (:func:`wilson`).
    Otherwise: ``se = std(ddof=1) / sqrt(n)`` and the normal interval ``mean ± z·se`` (nan with a single value).
    No values: every field nan, ``n = 0``.
    """
    data = np.asarray([float(v) for v in values], dtype=float)
    n = int(data.size)
    if n == 0:
        return Interval(NAN, NAN, NAN, NAN, 0)
    mean = float(data.mean())
    if is_binary(data.tolist()):
        low, high = wilson(float(data.sum()), n, confidence)
        return Interval(mean, math.sqrt(mean * (1 - mean) / n), low, high, n)
    se = float(data.std(ddof=1)) / math.sqrt(n) if n > 1 else NAN
    z = z_value(confidence)
    return Interval(mean, se, mean - z * se, mean + z * se, n)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 10000, seed: int = 0, confidence: float = 0.95
) -> Paired:
    """Run B against run A on the same items (``a[i]`` and ``b[i]`` score one item): ``diff = mean(b) - mean(a)``;
    items are resampled with replacement ``resamples`` times (numpy ``default_rng(seed)``, so one seed gives one
    answer), ``se`` is the standard deviation of the resampled differences and ``[low, high]`` their percentile
    interval. No items: nan figures.

    Raises:
        ValueError: ``a`` and ``b`` differ in length (they must be aligned per item), or ``resamples`` < 2.
    """
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1:
        raise ValueError(f"paired runs need one score per item in each, got {a_arr.size} and {b_arr.size} scores")
    if resamples < 2:
        raise ValueError(f"a bootstrap needs at least 2 resamples, got {resamples}")
    n = int(a_arr.size)
    if n == 0:
        return Paired(0, NAN, NAN, NAN, NAN, NAN, NAN)
    d = b_arr - a_arr
    rng = np.random.default_rng(seed)
    rows = max(1, 2_000_000 // n)  # resample in blocks so a large evaluation stays within memory
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        means[start:stop] = d[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Paired(
        n, float(a_arr.mean()), float(b_arr.mean()), float(d.mean()), float(means.std(ddof=1)), float(low), float(high)
    )


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> McNemar:
    """McNemar's exact test on two runs' 0/1 outcomes on the same items: of the ``m`` discordant items, ``only_a``
    went to A and ``only_b`` to B; the two-sided p-value is ``min(1, 2·P(X <= min(only_a, only_b)))`` for
    ``X ~ Binomial(m, 1/2)``, computed exactly with integer binomial coefficients; 1.0 when ``m = 0``.

    Raises:
        ValueError: different lengths, or a value other than 0 and 1.
    """
    if len(a) != len(b):
        raise ValueError(f"paired runs need one outcome per item in each, got {len(a)} and {len(b)} outcomes")
    if not (is_binary(a) and is_binary(b)):
        raise ValueError("McNemar's test needs 0/1 outcomes per item")
    only_a = sum(1 for x, y in zip(a, b) if x == 1 and y == 0)
    only_b = sum(1 for x, y in zip(a, b) if x == 0 and y == 1)
    m = only_a + only_b
    if m == 0:
        return McNemar(0, 0, 1.0)
    tail = sum(math.comb(m, i) for i in range(min(only_a, only_b) + 1))
    return McNemar(only_a, only_b, min(1.0, 2 * tail / 2**m))


def pooled_paired(per_seed: Sequence[Paired], confidence: float = 0.95) -> Pooled:
    """Several seeds' paired differences (one :class:`Paired` per seed) as one figure: ``diff`` is the mean of the
    seeds' differences.

    With two or more seeds the interval is ``diff ± t(df)·se`` with ``se = sqrt(a + b)``: ``a = s²/k`` the seeds'
    spread (``s`` their standard deviation, ``k`` seeds) and ``b = mean(se_i²)`` the items' own noise (``se_i`` each
    seed's bootstrap standard error). The seeds are evaluated on the *same* items, so which items were drawn is noise
    common to all of them that does not shrink with ``k``: ``b`` keeps it (seeds that agree exactly, whose own
    intervals include zero, must not give an interval that excludes it). ``b`` also holds the seed-by-item part that
    ``a`` counts, so the figure is conservative. The degrees of freedom are Welch–Satterthwaite's,
    ``df = (a + b)² / (a²/(k - 1) + b²/(n - 1))`` with ``n`` the fewest items of a seed: few seeds weigh only as much as
    their share of the variance. With one seed it is that seed's own bootstrap interval. No seeds: nan figures.
    """
    k = len(per_seed)
    if k == 0:
        return Pooled(0, NAN, NAN, NAN, NAN, "none")
    if k == 1:
        only = per_seed[0]
        return Pooled(1, only.diff, only.se, only.low, only.high, "paired bootstrap (one seed)")
    diffs = np.asarray([p.diff for p in per_seed], dtype=float)
    mean = float(diffs.mean())
    a = float(diffs.var(ddof=1)) / k
    b = float(np.mean([p.se**2 for p in per_seed]))
    n = min(p.n for p in per_seed)
    se = math.sqrt(a + b)
    if se == 0.0:
        return Pooled(k, mean, 0.0, mean, mean, f"t over {k} seeds, with the items' own noise")
    df = (a + b) ** 2 / (a**2 / (k - 1) + (b**2 / (n - 1) if n > 1 else 0.0))
    half = t_value(confidence, max(1, int(df))) * se  # df rounded down: the wider interval
    return Pooled(k, mean, se, mean - half, mean + half, f"t over {k} seeds, with the items' own noise (df {df:.1f})")
