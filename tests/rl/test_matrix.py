"""Features in combination (issue 66): placement × algorithm × KV reuse × continuous batching × LoRA × staleness,
every pair of values in at least one run (a pairwise design, not the full product).

Each combination either stops with a config error before any model loads, or trains two steps of the tiny model,
after which: every generated token carries a version that could have sampled it, the consistency guard saw no
violation (the tokens trained are the tokens sampled, the lag-0 rollout–learner gap under the tolerance, no turn
past its stop, no group trained in part), and every episode collected was trained or counted as dropped with its
reason — counted from the step's saved episodes, not from the driver's own arithmetic: an episode the learner
trained carries its first look (``learner_logprobs``), one it left out does not and has a reason. ``python tests/rl/test_matrix.py`` prints the covering table.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import toy_envs  # noqa: F401 — registers tests/Upper-v0
from tiny_trainer import train_tiny

from turnrl.rl.config import TrainConfig

FACTORS: dict[str, list] = {
    "placement": ["local", "ray"],
    "algorithm": ["grpo", "ppo", "tppo-window", "tppo-finished"],
    "kv": [True, False],
    "continuous": [True, False],
    "lora": [True, False],
    "max_staleness": [0, 1],
}

ALGORITHMS = {
    "grpo": {"name": "grpo"},
    "ppo": {"name": "ppo"},
    "tppo-window": {"name": "tppo", "window": 2, "value_warmup_steps": 0},
    # windows of 4 tokens: some episodes finish within the two steps (with 2 none did, and none trained)
    "tppo-finished": {"name": "tppo", "window": 4, "value_warmup_steps": 0, "train_on": "finished"},
}


def settings(combo: dict, out_dir: str = "runs/matrix") -> dict:
    """The run config of one combination: two steps of 2 tasks × 4 samples, up to two tries per episode (so that
    episodes have several turns, and KV caches something to reuse)."""
    data = {
        "model": "tiny",
        "env": {"id": "tests/Upper-v0", "kwargs": {"retry": True, "max_turns": 2}},
        "algorithm": ALGORITHMS[combo["algorithm"]],
        "placement": combo["placement"],
        "rollout": {
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 4,
            "seed_per_episode": True,
            "kv_cache_mb": 64 if combo["kv"] else 0,
            "continuous_batching": combo["continuous"],
            "max_staleness": combo["max_staleness"],
        },
        "optim": {"lr": 1e-2, "minibatch_size": 8},
        "steps": 2,
        "eval_tasks": 2,
        "out_dir": out_dir,
    }
    if combo["lora"]:
        data["learner"] = {"lora": {"r": 4}}
    if combo["placement"] == "ray":
        # two workers where weights are pushed while they play (k ≥ 1); a synchronous row's checks hold for one
        data["ray"] = {"rollout_workers": 2 if combo["max_staleness"] else 1, "start_timeout": 60}
    return data


def refusal(combo: dict) -> str | None:
    """The config error of a combination that cannot run (None: it runs)."""
    try:
        TrainConfig.model_validate(settings(combo))
    except ValidationError as e:
        return str(e.errors()[0]["msg"])
    return None


def pairs_of(combo: dict) -> set[tuple]:
    return {((a, combo[a]), (b, combo[b])) for a, b in itertools.combinations(FACTORS, 2)}


def covering() -> list[dict]:
    """A pairwise design: greedily the combination that covers the most pairs not yet covered, runnable ones first;
    then, for pairs no runnable combination holds, the refused ones that hold them."""
    names = list(FACTORS)
    product = [dict(zip(names, values)) for values in itertools.product(*FACTORS.values())]
    runnable = [c for c in product if refusal(c) is None]
    todo = set().union(*(pairs_of(c) for c in product))
    chosen = []
    for pool in (runnable, product):
        while True:
            best = max(pool, key=lambda c: len(pairs_of(c) & todo))
            if not pairs_of(best) & todo:
                break
            chosen.append(best)
            todo -= pairs_of(best)
    assert not todo
    return chosen


DESIGN = covering()


def label(combo: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in combo.items())


def table() -> str:
    """The covering table: one line per combination, with what it does."""
    lines = [f"{len(DESIGN)} combinations cover all {len(set().union(*(pairs_of(c) for c in DESIGN)))} pairs"]
    for c in DESIGN:
        why = refusal(c)
        lines.append(f"  {label(c):<95} {'refused: ' + why[:60] if why else 'runs 2 steps'}")
    return "\n".join(lines)


def test_the_design_covers_every_pair_and_runs_most_combinations():
    every = {((a, x), (b, y)) for a, b in itertools.combinations(FACTORS, 2) for x in FACTORS[a] for y in FACTORS[b]}
    assert set().union(*(pairs_of(c) for c in DESIGN)) == every
    print("\n" + table())
    assert len(DESIGN) < 20  # pairwise, not the 128 of the full product
    # a pair only refused combinations hold is a pair the config refuses wherever it appears
    refused = [c for c in DESIGN if refusal(c)]
    runs = [c for c in DESIGN if not refusal(c)]
    for c in refused:
        assert any(not any(p in pairs_of(r) for r in runs) for p in pairs_of(c))


@pytest.mark.parametrize("combo", DESIGN, ids=[label(c).replace(" ", ",") for c in DESIGN])
def test_each_combination_runs_consistently_or_is_refused_before_a_model_loads(combo, tmp_path, request):
    why = refusal(combo)
    if why is not None:  # refused while the config validates: no model was loaded; one line says what to change
        assert "\n" not in why and len(why) < 400
        return
    if combo["placement"] == "ray":
        request.getfixturevalue("ray_cluster")
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.core.batch import untrainable
    from turnrl.rl.run.guard import TOLERANCES
    from turnrl.storage import read_jsonl

    cfg = TrainConfig.model_validate(settings(combo, str(tmp_path)))
    tok = tiny_tokenizer("chatml")
    history = train_tiny(cfg, tok)
    steps = history[1:]
    assert len(steps) == 2
    trained_in_run = 0
    for h in steps:
        step = int(h["step"])
        assert h["guard_violations"] == 0, {k: v for k, v in h.items() if k.startswith("guard")}
        assert h.get("guard_logp_gap", 0.0) <= TOLERANCES["hf"][0]
        if combo["max_staleness"] == 0:
            assert h["stale_episodes"] == 0
        path = tmp_path / "train" / f"step-{step}" / "trajectories.jsonl"
        saved = list(read_jsonl(path))
        # each episode collected trained (the learner's first look is on it), or left out with its reason
        trained = [t for t in saved if "learner_logprobs" in t.metadata]
        left_out = [t for t in saved if "learner_logprobs" not in t.metadata]
        assert len(saved) == h["collected_episodes"] and len(trained) == h["trained_episodes"]
        trained_in_run += len(trained)
        assert len(left_out) == h["stale_episodes"] + h["stale_group_episodes"] + h.get("dropped_episodes", 0.0)
        assert sum(untrainable(t) is not None for t in left_out) == h.get("dropped_episodes", 0.0)
        assert all(untrainable(t) is None for t in trained)
        for t in saved:
            versions = [v for v, m in zip(t.token_versions, t.loss_mask) if m]
            assert versions and all(0 <= v <= step - 1 for v in versions)  # sampled by a version that existed
            start = int(t.metadata.get("window_start", 0))
            newest = [v for v, m in zip(t.token_versions[start:], t.loss_mask[start:]) if m]
            if combo["max_staleness"] == 0 and newest and combo["algorithm"] != "tppo-finished":
                assert set(newest) == {step - 1}  # synchronous: this step's tokens, the weights being updated
            assert (
                step - 1 - min(newest or versions) <= max(combo["max_staleness"], 0)
                or combo["algorithm"] == "tppo-finished"
            )
    assert trained_in_run > 0  # the checks above ran on episodes the learner trained


if __name__ == "__main__":
    print(table())
