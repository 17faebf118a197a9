"""turnrl.stats: the formulas behind held-out figures and paired comparisons, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from turnrl.stats import (
    Interval,
    Paired,
    collapse,
    is_binary,
    mcnemar_exact,
    mean_interval,
    paired_bootstrap,
    pooled_paired,
    t_value,
    wilson,
    z_value,
)


def test_collapse_takes_the_mean_per_distinct_key_in_first_seen_order():
    out = collapse(["b", "a", "b", "c", "b"], [1, 0, 0, 1, 1])
    assert list(out) == ["b", "a", "c"]
    assert out == {"b": pytest.approx(2 / 3), "a": 0.0, "c": 1.0}


def test_collapse_refuses_keys_and_values_of_different_lengths():
    with pytest.raises(ValueError, match="2 keys and 3 values"):
        collapse(["a", "b"], [1, 0, 1])


def test_is_binary():
    assert is_binary([0, 1, 1.0, 0.0]) and is_binary([])
    assert not is_binary([0, 0.5])


def test_critical_values_match_the_tables():
    assert z_value(0.95) == pytest.approx(1.959963985, abs=1e-9)
    assert z_value(0.90) == pytest.approx(1.644853627, abs=1e-9)
    # two-sided 95% Student-t values from the tables, odd and even degrees of freedom
    for df, t in [
        (1, 12.706204736),
        (2, 4.302652730),
        (3, 3.182446305),
        (4, 2.776445105),
        (9, 2.262157163),
        (30, 2.042272456),
    ]:
        assert t_value(0.95, df) == pytest.approx(t, abs=1e-8)
    assert t_value(0.99, 5) == pytest.approx(4.032142984, abs=1e-8)
    with pytest.raises(ValueError, match="degree of freedom"):
        t_value(0.95, 0)


def test_wilson_interval_matches_hand_computed_values():
    # 3 of 4: centre (0.75 + z²/8) / (1 + z²/4), half z/(1 + z²/4) * sqrt(0.75*0.25/4 + z²/64)
    z = 1.959963985
    centre = (0.75 + z * z / 8) / (1 + z * z / 4)
    half = z / (1 + z * z / 4) * math.sqrt(0.75 * 0.25 / 4 + z * z / 64)
    assert wilson(3, 4) == pytest.approx((centre - half, centre + half), abs=1e-9)
    assert wilson(3, 4) == pytest.approx((0.300642, 0.954413), abs=1e-6)
    # none of 10: not the empty interval [0, 0] a normal interval gives
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.277533, abs=1e-6)


def test_mean_interval_on_outcomes_uses_wilson_and_the_binomial_se():
    got = mean_interval([1, 0, 1, 1])
    assert got.n == 4 and got.mean == 0.75
    assert got.se == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert (got.low, got.high) == pytest.approx((0.300642, 0.954413), abs=1e-6)


def test_mean_interval_on_fractions_uses_the_normal_interval():
    got = mean_interval([0.5, 1.0, 0.0])
    se = 0.5 / math.sqrt(3)  # sample std (ddof=1) 0.5 over sqrt(3)
    assert got == Interval(
        0.5, pytest.approx(se), pytest.approx(0.5 - 1.959963985 * se), pytest.approx(0.5 + 1.959963985 * se), 3
    )


def test_mean_interval_of_nothing_is_nan_and_of_one_fraction_has_no_width():
    empty = mean_interval([])
    assert empty.n == 0 and all(math.isnan(x) for x in (empty.mean, empty.se, empty.low, empty.high))
    one = mean_interval([0.5])
    assert one.n == 1 and one.mean == 0.5 and math.isnan(one.se) and math.isnan(one.low)


def test_paired_bootstrap_difference_is_b_minus_a():
    got = paired_bootstrap([0, 0, 1, 0], [1, 1, 1, 0], resamples=200)
    assert (got.n, got.mean_a, got.mean_b, got.diff) == (4, 0.25, 0.75, 0.5)
    assert got.low <= got.diff <= got.high


def test_paired_bootstrap_constant_difference_has_no_spread():
    got = paired_bootstrap([0.2, 0.5, 0.1], [0.4, 0.7, 0.3], resamples=100)
    assert got.diff == pytest.approx(0.2)
    assert got.se == pytest.approx(0.0, abs=1e-12)
    assert (got.low, got.high) == pytest.approx((0.2, 0.2))


def test_paired_bootstrap_se_and_interval_approach_the_normal_ones():
    # differences 0 and 1 in equal numbers: sd 0.5 (ddof=0), so the bootstrap se is near 0.5 / sqrt(100) = 0.05
    a = [0.0] * 100
    b = [0.0, 1.0] * 50
    got = paired_bootstrap(a, b, resamples=10000, seed=3)
    assert got.se == pytest.approx(0.05, rel=0.05)
    assert got.low == pytest.approx(0.5 - 1.96 * 0.05, abs=0.02)
    assert got.high == pytest.approx(0.5 + 1.96 * 0.05, abs=0.02)


def test_paired_bootstrap_is_paired_not_independent():
    # B is A plus a small constant on every item: paired, the difference is certain; unpaired, it would be lost in
    # the items' own spread
    a = [i / 10 for i in range(10)]
    b = [x + 0.05 for x in a]
    got = paired_bootstrap(a, b, resamples=500)
    assert got.low == pytest.approx(0.05) and got.high == pytest.approx(0.05)


def test_paired_bootstrap_is_deterministic_for_a_seed():
    a, b = [0, 1, 0, 1, 1, 0, 0, 1], [1, 1, 0, 1, 0, 1, 1, 1]
    assert paired_bootstrap(a, b, seed=7, resamples=500) == paired_bootstrap(a, b, seed=7, resamples=500)
    assert paired_bootstrap(a, b, seed=7, resamples=500) != paired_bootstrap(a, b, seed=8, resamples=500)


def test_paired_bootstrap_refuses_unaligned_runs():
    with pytest.raises(ValueError, match="3 and 2 scores"):
        paired_bootstrap([1, 0, 1], [1, 0])


def test_paired_bootstrap_of_no_items_is_nan():
    got = paired_bootstrap([], [])
    assert got.n == 0 and math.isnan(got.diff) and math.isnan(got.low)


def test_mcnemar_exact_matches_the_binomial_tail():
    # 6 discordant all to A: 2 * 0.5**6
    six = mcnemar_exact([1] * 6 + [1, 0], [0] * 6 + [1, 0])
    assert (six.only_a, six.only_b, six.p_value) == (6, 0, 0.03125)
    # 1 vs 9: 2 * (C(10,0) + C(10,1)) / 2**10
    got = mcnemar_exact([1] + [0] * 9, [0] + [1] * 9)
    assert (got.only_a, got.only_b) == (1, 9)
    assert got.p_value == 0.021484375
    # 2 vs 3: the tail passes one half, so the p-value is capped at 1
    assert mcnemar_exact([1, 1, 0, 0, 0], [0, 0, 1, 1, 1]).p_value == 1.0
    # 3 vs 7: 2 * (1 + 10 + 45 + 120) / 1024
    assert mcnemar_exact([1] * 3 + [0] * 7, [0] * 3 + [1] * 7).p_value == pytest.approx(352 / 1024)


def test_mcnemar_exact_with_no_discordant_items_is_one():
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]) == mcnemar_exact([], []) == type(mcnemar_exact([], []))(0, 0, 1.0)


def test_mcnemar_exact_handles_many_items_without_overflow():
    got = mcnemar_exact([1] * 600 + [0] * 700, [0] * 600 + [1] * 700)
    assert 0.0 < got.p_value < 0.01


def test_mcnemar_exact_refuses_non_binary_and_unaligned_outcomes():
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact([0.5, 1], [1, 1])
    with pytest.raises(ValueError, match="2 and 1"):
        mcnemar_exact([0, 1], [1])


def _paired(diff: float, low: float = -1.0, high: float = 1.0) -> Paired:
    return Paired(10, 0.5, 0.5 + diff, diff, 0.1, low, high)


def test_pooled_paired_uses_a_t_interval_over_seeds_with_the_items_noise():
    got = pooled_paired([_paired(0.1), _paired(0.2), _paired(0.3)])  # n = 10 items each, se 0.1 each
    a, b = 0.1**2 / 3, 0.1**2  # the seeds' sd (ddof=1) is 0.1 over 3 seeds; each seed's own se 0.1
    df = (a + b) ** 2 / (a**2 / 2 + b**2 / 9)  # Welch–Satterthwaite: 10.7, rounded down to 10
    assert int(df) == 10
    se = math.sqrt(a + b)
    assert got.seeds == 3 and got.diff == pytest.approx(0.2) and got.se == pytest.approx(se)
    assert (got.low, got.high) == pytest.approx((0.2 - 2.228138852 * se, 0.2 + 2.228138852 * se))  # t(10), 95 %
    assert "t over 3 seeds" in got.method and "df 10.7" in got.method


def test_few_seeds_that_disagree_widen_the_interval_towards_their_own_t():
    """When the seeds' spread dominates, the degrees of freedom fall towards k - 1 = 2."""
    got = pooled_paired([Paired(1000, 0.5, 0.5, d, 0.001, d - 0.002, d + 0.002) for d in (0.0, 0.3, 0.6)])
    assert got.high - got.diff == pytest.approx(4.302652730 * got.se, rel=1e-3)


def test_seeds_that_agree_do_not_make_an_interval_of_zero_width():
    """The review's case: three seeds, each one item better of 102 (each seed's own interval includes 0); their
    spread is 0, but the items' noise is common to all three and must keep the pooled interval around 0."""
    one = paired_bootstrap([0.0] * 102, [1.0] + [0.0] * 101)
    got = pooled_paired([one, one, one])
    assert one.low <= 0.0 and got.low < 0.0 < got.high


def test_pooled_paired_with_one_seed_keeps_its_bootstrap_interval_and_with_none_is_nan():
    got = pooled_paired([_paired(0.2, 0.05, 0.35)])
    assert (got.seeds, got.diff, got.low, got.high) == (1, 0.2, 0.05, 0.35)
    assert "bootstrap" in got.method
    assert math.isnan(pooled_paired([]).diff)
