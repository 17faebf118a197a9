"""Issue 79, "history trained once": a learner step on the leaves of trees with ``optim.prefix_tree`` (each shared
segment forward and backward once) has the loss and the gradients of the same leaves trained as separate rows —
every parameter, relative difference ≤ 1e-5 in float32 — in one micro-batch, over micro-batches with gradient
accumulation (whole trees, and trees cut between micro-batches), and on LoRA adapters."""

from __future__ import annotations

import random

import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.run.trainer import learner_of
from turnrl.types import Message, Trajectory, Turn

ENV = {"id": "turnrl/Arithmetic-v0", "kwargs": {"retry": True, "max_turns": 3}}
TREE = {"branches": [{"turn": 1, "children": 2}, {"turn": 2, "children": 2}]}


def tree_leaves(task: int, rng: random.Random) -> list[Trajectory]:
    """A tree of 4 leaves of one task (2 children at turns 1 and 2): a 40-token prompt, three turns of 24, 60–69 and 12–29
    generated tokens, the first two followed by a 10-token observation; siblings share their tokens up to their branch turn."""

    def toks(n: int) -> list[int]:
        return [rng.randrange(5, 400) for _ in range(n)]

    prompt = toks(40)
    turn0 = (toks(24), toks(10))
    leaves = []
    for a in range(2):
        turn1 = (toks(rng.randrange(60, 70)), toks(10))
        for b in range(2):
            turn2 = (toks(rng.randrange(12, 30)), [])
            tokens, mask, logps, turns = list(prompt), [0] * len(prompt), [0.0] * len(prompt), []
            for i, (said, seen) in enumerate([turn0, turn1, turn2]):
                start = len(tokens)
                tokens += said + seen
                mask += [1] * len(said) + [0] * len(seen)
                logps += [-1.0] * len(said) + [0.0] * len(seen)
                turns.append(
                    Turn(
                        index=i,
                        role="policy",
                        action=Message(role="assistant", content="x"),
                        reward=float(rng.random() < 0.5) if i == 2 else 0.0,
                        token_span=(start, start + len(said)),
                    )
                )
            root = f"task{task}"
            path = [root, f"{root}.{a}", f"{root}.{a}.{b}"]
            leaves.append(
                Trajectory(
                    env_id="t",
                    group_id=root,
                    turns=turns,
                    token_ids=tokens,
                    loss_mask=mask,
                    logprobs=logps,
                    terminated=True,
                    metadata={"tree": {"root": root, "path": path, "branch_turns": [1, 2]}},
                )
            )
    return leaves


def _grads(trajectories, prefix_tree: bool, minibatch: int, accum: int, lora: bool):
    """The gradients at the first optimizer step of a tiny learner (and its metrics)."""
    from turnrl.rl.run.trainer import TrainConfig

    cfg = TrainConfig(
        model="tiny",
        env=ENV,
        algorithm={"name": "grpo", "advantage": "tree"},
        rollout={"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 20, "tree": TREE},
        optim={
            "lr": 1e-3,
            "minibatch_size": minibatch,
            "grad_accum": accum,
            "prefix_tree": prefix_tree,
            "recompute_logprobs": True,
        },
    )
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=1)
    if lora:
        from turnrl.lora import apply_lora

        torch.manual_seed(0)  # the adapters' initial weights
        model = apply_lora(model, {"r": 4, "alpha": 8.0})
    learner = learner_of(cfg, model, tok)
    seen: list[dict[str, torch.Tensor]] = []
    step = learner.optimizer_step

    def capture():
        if not seen:
            seen.append({n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None})
        return step()

    learner.optimizer_step = capture
    metrics = learner.update(trajectories)
    return seen[0], metrics, metrics["pass_tokens"]


@pytest.mark.parametrize("minibatch, accum, lora", [(8, 1, False), (4, 2, False), (2, 4, False), (4, 2, True)])
def test_prefix_tree_step_has_the_separate_rows_gradients(minibatch, accum, lora):
    rng = random.Random(0)
    trajectories = tree_leaves(0, rng) + tree_leaves(1, rng)
    rows, rows_metrics, rows_tokens = _grads(trajectories, False, minibatch, accum, lora)
    tree, tree_metrics, tree_tokens = _grads(trajectories, True, minibatch, accum, lora)
    assert rows.keys() == tree.keys() and len(rows) > 0
    moved = 0
    for name, g in rows.items():
        scale = g.abs().max()
        if scale > 0:
            moved += 1
            assert float((tree[name] - g).abs().max() / scale) <= 1e-5, name
        else:
            assert float(tree[name].abs().max()) == 0.0, name
    assert moved > 0
    for key in ("loss", "grad_norm", "entropy", "rollout_logp_diff", "clip_frac"):
        assert tree_metrics[key] == pytest.approx(rows_metrics[key], rel=1e-5, abs=1e-7), key
    # the trunk and the inner nodes ran once: far fewer tokens than the leaves' rows (whole trees per micro-batch)
    # two passes (the recomputed log-probabilities, the update): the tree's ran each distinct prefix about once
    # with whole trees in a micro-batch, and shared at least the inner nodes' pairs with trees cut in two
    least = 2 * _distinct(trajectories)
    assert tree_tokens <= (1.1 if minibatch >= 4 else 1.3) * least < 0.75 * rows_tokens


def _distinct(trajectories) -> int:
    """The tokens a pass over the leaves must run at least: their distinct prefixes."""
    return len({tuple(t.token_ids[: i + 1]) for t in trajectories for i in range(len(t.token_ids))})


def test_the_learner_benchmark_runs_on_a_tiny_model_with_the_same_loss_in_both_arms():
    """bench/tree_learner.py (docs/results/speed.md#trees-speed) with a tiny random model: both arms run in their own
    processes, the prefix tree runs fewer tokens, and the loss and gradient norm are the separate rows'."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "tree_learner.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--model", "tiny", "--tasks", "2"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    arms = {}
    for line in out.stdout.splitlines():
        if m := re.match(r"(rows|tree) .*pass_tokens\s+(\d+).* loss ([\d.]+)\s+grad_norm ([\d.]+)", line):
            arms[m[1]] = (int(m[2]), m[3], m[4])
    assert set(arms) == {"rows", "tree"}, out.stdout
    assert arms["tree"][0] < 0.8 * arms["rows"][0]
    assert arms["tree"][1:] == arms["rows"][1:]
