"""Issue 79: training on tree rollouts (rollout.tree) with turn-level credit (algorithm.advantage: tree) — real steps
of a tiny model, the consistency guard watching — and what trees cannot be combined with, refused before a model
loads."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.rl.algorithms.grpo import GRPO, GRPOConfig
from turnrl.rl.core.batch import collate
from turnrl.rl.formulas.advantages import group_normalize
from turnrl.rl.formulas.tree import tree_advantages
from turnrl.types import Message, Trajectory, Turn

ENV = {"id": "turnrl/Arithmetic-v0", "kwargs": {"retry": True, "max_turns": 3}}
TREE = {"branches": [{"turn": 1, "children": 2}]}


def _config(tmp_path, **extra):
    from turnrl.rl.run.trainer import TrainConfig

    rollout = {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6, "tree": TREE,
               **extra.pop("rollout", {})}
    return TrainConfig(model="tiny", env=ENV, algorithm=extra.pop("algorithm", {"name": "grpo", "advantage": "tree"}),
                       rollout=rollout, optim={"lr": 1e-2, "minibatch_size": 4}, steps=2, eval_every=0, eval_tasks=2,
                       out_dir=str(tmp_path), **extra)


def _train(cfg):
    from turnrl.agents.tiny import tiny_model, tiny_tokenizer
    from turnrl.rl.run.trainer import Trainer

    tok = tiny_tokenizer("chatml")
    trainer = Trainer(cfg, model=tiny_model(tok), tokenizer=tok)
    try:
        return trainer.train(), trainer
    finally:
        trainer.close()


@pytest.mark.parametrize("algorithm", [{"name": "grpo", "advantage": "tree"}, {"name": "rloo", "advantage": "tree"},
                                       {"name": "grpo"}])
def test_a_run_trains_on_the_leaves_of_trees_with_the_guard_silent(tmp_path, algorithm):
    history, _ = _train(_config(tmp_path, algorithm=algorithm))
    history = [h for h in history if "trained_episodes" in h]
    assert len(history) == 2
    for h in history:
        assert h["trained_episodes"] == 8 and h["rollout_episodes"] == 8  # 2 tasks x 2 trees x 2 leaves
        assert h["guard_violations"] == 0 and h["logp_diff"] < 1e-4
        assert h["cached_tokens"] > 0
    from turnrl.storage import read_jsonl

    for step in (1, 2):  # what was trained: the leaves of 4 trees of 2, siblings sharing their first turn
        leaves = read_jsonl(tmp_path / "train" / f"step-{step}" / "trajectories.jsonl")
        assert len(leaves) == 8 and len({t.metadata["tree"]["root"] for t in leaves}) == 4
        for a, b in zip(leaves[::2], leaves[1::2]):
            assert a.metadata["tree"]["root"] == b.metadata["tree"]["root"]
            assert [a.metadata["tree"]["path"][-1][-2:], b.metadata["tree"]["path"][-1][-2:]] == [".0", ".1"]
            shared = a.turns[1].token_span[0]
            assert a.token_ids[:shared] == b.token_ids[:shared] and a.logprobs[:shared] == b.logprobs[:shared]
            assert a.metadata["kv_events"].get("new") == b.metadata["kv_events"].get("new") == 1  # one prefill


def _leaf(group: str, path: list[str], rewards: list[float], branch_turns: list[int]) -> Trajectory:
    """A finished leaf of hand-written tokens: two tokens a turn, each turn's reward on its last token."""
    tokens, mask, turns = [1, 2], [0, 0], []
    for i, r in enumerate(rewards):
        start = len(tokens)
        tokens += [3, 4, 5]
        mask += [1, 1, 0]
        turns.append(Turn(index=i, role="policy", action=Message(role="assistant", content="x"), reward=r,
                          token_span=(start, start + 2)))
    return Trajectory(env_id="t", group_id=group, turns=turns, token_ids=tokens, loss_mask=mask,
                      logprobs=[0.0] * len(tokens), terminated=True,
                      metadata={"tree": {"root": path[0], "path": path, "branch_turns": branch_turns}})


def test_the_tree_estimator_gives_each_turn_its_nodes_advantage():
    leaves = [_leaf("g", ["r", "r.0"], [0.0, 1.0], [1]), _leaf("g", ["r", "r.1"], [0.0, 0.0], [1])]
    batch = collate(leaves, pad_id=0)
    adv, _ = GRPO(GRPOConfig(advantage="tree")).advantages(batch, 16)
    expected = tree_advantages([1.0, 0.0], [["r", "r.0"], ["r", "r.1"]], ["g", "g"], normalize=True)
    for b in range(2):
        turn0, turn1 = batch.turn_ids[b] == 0, batch.turn_ids[b] == 1
        assert torch.allclose(adv[b][turn0], torch.tensor(expected[b][0]))  # the trunk: 0
        assert torch.allclose(adv[b][turn1], torch.tensor(expected[b][1]))
        assert adv[b][batch.loss_mask[b] == 0].abs().sum() == 0
    assert adv[0][batch.turn_ids[0] == 1].min() > 0 > adv[1][batch.turn_ids[1] == 1].max()


def test_on_chains_the_tree_estimator_is_grpo():
    chains = [_leaf("g", [f"c{i}"], [float(r)], []) for i, r in enumerate([1, 0, 0, 1, 1])]
    for t in chains:
        t.metadata.pop("tree")
    batch = collate(chains, pad_id=0)
    tree, _ = GRPO(GRPOConfig(advantage="tree")).advantages(batch, 16)
    group = group_normalize(batch.scores, batch.group_ids)[:, None] * batch.loss_mask
    assert torch.allclose(tree, group.float(), atol=1e-6)


@pytest.mark.parametrize("override, message", [
    ("algorithm.name=tppo", "T-PPO's windows"),
    ("rollout.group_size=3", "not a multiple of the tree's 2 leaves"),
    ("env.id=turnrl/Arithmetic-PAG-v0 algorithm.name=pag", "rollout hook"),
])
def test_what_trees_cannot_be_combined_with_is_refused_before_a_model_loads(tmp_path, override, message):
    config = tmp_path / "c.yaml"
    config.write_text("model: no-such-model\nenv: {id: turnrl/Arithmetic-v0, kwargs: {retry: true, max_turns: 3}}\n"
                      "rollout: {group_size: 4, tree: {branches: [{turn: 1, children: 2}]}}\n"
                      f"out_dir: {tmp_path / 'run'}\n")
    result = CliRunner().invoke(app, ["train", str(config), *override.split()])
    assert result.exit_code != 0 and message in " ".join(result.output.split()), result.output


def test_an_environment_that_cannot_fork_is_refused_before_a_model_loads(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("model: no-such-model\nenv: {id: fork_envs:tests/NoFork-v0}\n"
                      "rollout: {group_size: 4, tree: {branches: [{turn: 1, children: 2}]}}\n"
                      f"out_dir: {tmp_path / 'run'}\n")
    (tmp_path / "fork_envs.py").write_text(
        "import turnrl\nfrom turnrl.envs.arithmetic import ArithmeticEnv\n\n"
        "class NoFork(ArithmeticEnv):\n    fork_mode = None\n    fork_refusal = 'it talks to a robot arm'\n\n"
        "turnrl.register('tests/NoFork-v0', NoFork)\n")
    result = CliRunner().invoke(app, ["train", str(config)])
    out = " ".join(result.output.split())
    assert result.exit_code != 0 and "rollout.tree forks episodes mid-way, and NoFork" in out
    assert "it talks to a robot arm" in out
