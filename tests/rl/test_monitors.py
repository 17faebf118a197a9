"""The training-health monitors on made-up histories: each fires on its failure and stays quiet on a healthy run."""

import pytest

from turnrl.rl.run.monitors import (
    check_health,
    entropy_collapse,
    held_out_divergence,
    length_explosion,
    length_limit,
    no_signal,
    reward_without_correctness,
)


def steps(**series):
    """Training-step records from equal-length series, after a step-0 evaluation record."""
    n = len(next(iter(series.values())))
    return [{"step": 0.0, "eval_success": series.pop("eval0", 0.2)}] + [
        {"step": float(i + 1), **{k: v[i] for k, v in series.items()}} for i in range(n)
    ]


def test_entropy_and_signal_and_length_limit():
    assert entropy_collapse({"entropy": 0.01}) and not entropy_collapse({"entropy": 0.5}) and not entropy_collapse({})
    assert no_signal({"zero_variance_groups": 1.0}) and not no_signal({"zero_variance_groups": 0.75})
    assert "harder tasks" in no_signal({"zero_variance_groups": 1.0, "success": 1.0})
    assert "easier tasks" in no_signal({"zero_variance_groups": 1.0, "success": 0.0})
    assert "48 of 48" in length_limit({"response_length": 48}, 48) and not length_limit({"response_length": 30}, 48)


def test_length_explosion_compares_with_the_first_steps():
    history = steps(response_length=[20, 22, 21, 30, 50])
    assert length_explosion(history, {"response_length": 70}) is not None
    assert length_explosion(history, {"response_length": 60}) is None  # under 3x the start (21)
    assert length_explosion(history[:3], {"response_length": 500}) is None  # fewer than 3 steps to compare with


def test_reward_without_correctness_fires_on_a_rising_bonus_not_on_partial_credit_by_design():
    farming = steps(rewarded_incorrect=[0.1, 0.1, 0.2, 0.4])
    assert "farmed" in reward_without_correctness(farming, {"rewarded_incorrect": 0.6})
    steady = steps(rewarded_incorrect=[0.6, 0.7, 0.65, 0.6])  # e.g. QA with F1 partial credit
    assert reward_without_correctness(steady, {"rewarded_incorrect": 0.7}) is None
    assert reward_without_correctness(farming, {"rewarded_incorrect": 0.45}) is None  # under half the episodes


def test_held_out_divergence_needs_both_a_drop_and_a_rising_reward():
    # best held-out 0.5 at step 2 with training reward ~0.3 then; reward now ~0.8, held-out 0.3
    history = steps(reward_mean=[0.2, 0.3, 0.5, 0.8], eval0=0.2)
    history[2]["eval_success"] = 0.5
    msg = held_out_divergence(history, {"reward_mean": 0.9, "eval_success": 0.3})
    assert msg is not None and "30.0%" in msg and "50.0%" in msg
    assert held_out_divergence(history, {"reward_mean": 0.9, "eval_success": 0.45}) is None  # drop < 10 points
    falling = steps(reward_mean=[0.5, 0.6, 0.3, 0.2], eval0=0.2)
    falling[2]["eval_success"] = 0.5
    assert held_out_divergence(falling, {"reward_mean": 0.1, "eval_success": 0.3}) is None  # reward fell too
    assert held_out_divergence(history, {"reward_mean": 0.9}) is None  # no evaluation this step


def test_held_out_divergence_against_the_evaluation_before_training():
    history = steps(reward_mean=[0.1, 0.1, 0.2, 0.5, 0.7], eval0=0.4)
    assert held_out_divergence(history, {"reward_mean": 0.8, "eval_success": 0.1}) is not None


def test_check_health_on_a_healthy_and_a_hacked_run():
    healthy = steps(
        reward_mean=[0.2, 0.3, 0.4],
        entropy=[0.9, 0.8, 0.8],
        zero_variance_groups=[0.25, 0.25, 0.5],
        response_length=[20, 18, 17],
        rewarded_incorrect=[0.0, 0.0, 0.0],
    )
    info = {
        "reward_mean": 0.5,
        "entropy": 0.7,
        "zero_variance_groups": 0.25,
        "response_length": 16,
        "rewarded_incorrect": 0.0,
        "eval_success": 0.5,
    }
    assert check_health(healthy, info, max_new_tokens=48) == []
    hacked = {
        **info,
        "entropy": 0.01,
        "zero_variance_groups": 1.0,
        "response_length": 63,
        "rewarded_incorrect": 1.0,
        "eval_success": 0.0,
    }
    assert len(check_health(healthy, hacked, max_new_tokens=64)) == 6  # 63 tokens: the limit, and 3.4x the start


def test_the_methods_checks_are_registered_and_a_taken_name_is_refused():
    from turnrl.rl.run.monitors import register_monitor, registered_monitors

    checks = registered_monitors()
    assert checks["pag-verdict-collapse"].__module__ == "turnrl.methods.pag.monitors"  # an entry point, as a plug-in's
    with pytest.raises(ValueError, match="'pag-verdict-collapse' is already registered"):
        register_monitor("pag-verdict-collapse", lambda history, info: None)
