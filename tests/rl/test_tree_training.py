"""Issue 79: training on tree rollouts (rollout.tree) with turn-level credit (algorithm.advantage: tree) — real steps
of a tiny model, the consistency guard watching — and what trees cannot be combined with, refused before a model
loads."""

from __future__ import annotations

import pytest
import torch
from tiny_trainer import opened, tiny_trainer
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.rl.algorithms.grpo import GRPO, GRPOConfig
from turnrl.rl.algorithms.rloo import RLOO, RLOOConfig
from turnrl.rl.core.batch import collate
from turnrl.rl.formulas.advantages import group_normalize
from turnrl.rl.formulas.tree import tree_advantages
from turnrl.types import Message, Trajectory, Turn

ENV = {"id": "turnrl/Arithmetic-v0", "kwargs": {"retry": True, "max_turns": 3}}
TREE = {"branches": [{"turn": 1, "children": 2}]}


def _config(tmp_path, **extra):
    from turnrl.rl.run.trainer import TrainConfig

    rollout = {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6, "tree": TREE, **extra.pop("rollout", {})}
    steps = extra.pop("steps", 2)
    return TrainConfig(
        model="tiny",
        env=extra.pop("env", ENV),
        algorithm=extra.pop("algorithm", {"name": "grpo", "advantage": "tree"}),
        rollout=rollout,
        optim=extra.pop("optim", {"lr": 1e-2, "minibatch_size": 4}),
        steps=steps,
        eval_every=0,
        eval_tasks=2,
        out_dir=str(tmp_path),
        **extra,
    )


def _train(cfg):
    from turnrl.agents.tiny import tiny_tokenizer

    tok = tiny_tokenizer("chatml")
    with opened(tiny_trainer(cfg, tok)) as trainer:
        return trainer.train(), trainer


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "grpo", "advantage": "tree"},
        {"name": "rloo", "advantage": "tree"},
        {"name": "grpo"},
        {"name": "ppo", "kl_coef": 0.05},  # a critic (and a reference) over the leaves
        {"name": "vapo"},
    ],
)
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
        turns.append(
            Turn(
                index=i,
                role="policy",
                action=Message(role="assistant", content="x"),
                reward=r,
                token_span=(start, start + 2),
            )
        )
    return Trajectory(
        env_id="t",
        group_id=group,
        turns=turns,
        token_ids=tokens,
        loss_mask=mask,
        logprobs=[0.0] * len(tokens),
        terminated=True,
        metadata={"tree": {"root": path[0], "path": path, "branch_turns": branch_turns}},
    )


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


def test_a_batch_maps_each_token_to_its_node_on_a_tree_of_two_branch_points():
    """collate's tree fields: one number per distinct node id (shared ones the same in every row), −1 padding, and
    each token's depth on its row's path — 0 before the first branch turn, 1 from it, 2 from the second."""
    leaves = [
        _leaf("g", ["r", "r.0", "r.0.1"], [0.0, 0.0, 1.0], [1, 2]),
        _leaf("g", ["r", "r.1", "r.1.0"], [0.0, 0.0, 0.0], [1, 2]),
        _leaf("g", ["r", "r.1"], [0.0, 0.0], [1]),  # ended before the second branch turn: a leaf there
    ]
    chain = _leaf("h", ["c"], [1.0], [])
    chain.metadata.pop("tree")
    batch = collate([*leaves, chain], pad_id=0)
    paths = batch.tree_paths.tolist()
    assert paths[0][0] == paths[1][0] == paths[2][0]  # the root: one node
    assert paths[1][1] == paths[2][1] != paths[0][1]  # r.1 shared by two rows, r.0 another node
    assert paths[2][2] == -1 and paths[3][1:] == [-1, -1]  # padding
    assert len({n for p in paths for n in p if n >= 0}) == 6  # r, r.0, r.1, r.0.1, r.1.0 and the chain's row
    for b, turns in ((0, 3), (1, 3), (2, 2)):
        for turn in range(turns):
            tokens = batch.turn_ids[b] == turn
            assert (batch.tree_depth[b][tokens] == min(turn, 2 if turns == 3 else 1)).all(), (b, turn)
    assert (batch.tree_depth[3] == 0).all()


def test_rloo_with_the_tree_estimator_takes_the_trees_mean_baselines_not_leave_one_out():
    """RLOO's ``advantage: tree`` is §14's estimator unnormalized: on a tree each turn gets its node's advantage; on
    chains it is R − mean R, (k − 1)/k of RLOO's leave-one-out advantage (docs/training.md says so)."""
    leaves = [_leaf("g", ["r", "r.0"], [0.0, 1.0], [1]), _leaf("g", ["r", "r.1"], [0.0, 0.0], [1])]
    batch = collate(leaves, pad_id=0)
    adv, _ = RLOO(RLOOConfig(advantage="tree")).advantages(batch, 16)
    expected = tree_advantages([1.0, 0.0], [["r", "r.0"], ["r", "r.1"]], ["g", "g"])
    for b in range(2):
        for turn in (0, 1):
            assert torch.allclose(adv[b][batch.turn_ids[b] == turn], torch.tensor(expected[b][turn]))
    chains = [_leaf("g", [f"c{i}"], [float(r)], []) for i, r in enumerate([1, 0, 0, 1])]
    for t in chains:
        t.metadata.pop("tree")
    batch = collate(chains, pad_id=0)
    tree, _ = RLOO(RLOOConfig(advantage="tree")).advantages(batch, 16)
    loo, _ = RLOO(RLOOConfig()).advantages(batch, 16)
    firsts = torch.stack([row[mask == 1][0] for row, mask in zip(tree, batch.loss_mask)])  # a generated token each
    assert torch.allclose(firsts, torch.tensor([0.5, -0.5, -0.5, 0.5]))
    assert torch.allclose(tree, loo * 3 / 4, atol=1e-6)


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.name=tppo", "T-PPO's windows"),
        ("rollout.group_size=3", "not a multiple of the tree's 2 leaves"),
        ("env.id=turnrl/Arithmetic-PAG-v0 algorithm.name=pag", "rollout hook"),
        ("algorithm.name=dpo data.path=rows.parquet", "offline and step-wise algorithms read stored data"),
        ("program.command=agent.py", "a `program` runs its own episode through the gateway"),
        ("env.id=turnrl/TicTacToe-v0 env.kwargs={} multi_agent.opponent=self", "games with several agents"),
    ],
)
def test_what_trees_cannot_be_combined_with_is_refused_before_a_model_loads(tmp_path, override, message):
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: no-such-model\nenv: {id: turnrl/Arithmetic-v0, kwargs: {retry: true, max_turns: 3}}\n"
        "rollout: {group_size: 4, tree: {branches: [{turn: 1, children: 2}]}}\n"
        f"out_dir: {tmp_path / 'run'}\n"
    )
    result = CliRunner().invoke(app, ["train", str(config), *override.split()])
    assert result.exit_code != 0 and message in " ".join(result.output.split()), result.output


def test_an_environment_that_cannot_fork_is_refused_before_a_model_loads(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: no-such-model\nenv: {id: fork_envs:tests/NoFork-v0}\n"
        "rollout: {group_size: 4, tree: {branches: [{turn: 1, children: 2}]}}\n"
        f"out_dir: {tmp_path / 'run'}\n"
    )
    (tmp_path / "fork_envs.py").write_text(
        "import turnrl\nfrom turnrl.envs.builtin.arithmetic import ArithmeticEnv\n\n"
        "class NoFork(ArithmeticEnv):\n    fork_mode = None\n    fork_refusal = 'it talks to a robot arm'\n\n"
        "turnrl.register('tests/NoFork-v0', NoFork)\n"
    )
    result = CliRunner().invoke(app, ["train", str(config)])
    out = " ".join(result.output.split())
    assert result.exit_code != 0 and "rollout.tree forks episodes mid-way, and NoFork" in out
    assert "it talks to a robot arm" in out


def test_a_tree_run_on_lora_killed_and_resumed_continues_bit_exactly(tmp_path):
    """Trees (2 branch points, 4 leaves) with LoRA adapters and prefix-tree passes: a run killed after step 2 and
    resumed from its checkpoint ends with the uninterrupted run's adapters and history (each tree played once per
    step: the resumed run's leaves of step 3 are the full run's)."""
    from turnrl.storage import read_jsonl

    tree = {"branches": [{"turn": 1, "children": 2}, {"turn": 2, "children": 2}]}
    import toy_envs  # noqa: F401 — tests/Upper-v0: a reply that starts with a capital letter is rewarded

    extra = {
        "rollout": {"tree": tree, "seed_per_episode": True},
        "learner": {"lora": {"r": 4}},
        "algorithm": {"name": "dapo", "advantage": "tree"},
        "env": {"id": "tests/Upper-v0", "kwargs": {"retry": True, "max_turns": 3}},
    }
    full, _ = _train(_config(tmp_path / "a", steps=3, **_copy(extra)))
    with opened(tiny_trainer(_config(tmp_path / "b", steps=3, checkpoint_every=2, **_copy(extra)))) as part:
        part.train(stop_after=2)
    with opened(tiny_trainer(_config(tmp_path / "b", steps=3, checkpoint_every=2, **_copy(extra)))) as resumed:
        resumed.load(tmp_path / "b" / "checkpoint.pt")
        assert resumed.step == 2
        history = resumed.train()
        drop = ("seconds", "tokens_per_s", "train_tokens_per_s", "generate_s")
        kept = [[{k: v for k, v in h.items() if k not in drop} for h in run] for run in (full, history)]
        assert kept[0] == kept[1], [(i, k) for i, (a, b) in enumerate(zip(*kept)) for k in a if a[k] != b.get(k)]
        trained = [h for h in history if h.get("trained_episodes", 0) > 0]  # dapo drops groups without variance
        assert trained and all(h["pass_tokens"] > 0 and h["guard_violations"] == 0 for h in trained)
        a, b = (read_jsonl(tmp_path / run / "train" / "step-3" / "trajectories.jsonl") for run in ("a", "b"))
        assert [t.token_ids for t in a] == [t.token_ids for t in b] and len(a) >= 4
        assert len({t.metadata["tree"]["root"] for t in b}) == 2


def test_trees_under_continuous_batching_are_the_trees_of_rounds(tmp_path):
    """rollout.continuous_batching: each episode plays its own turn loop up to its branch turn; with each episode's
    own sampling stream, the leaves are those of the round-by-round rollout, token for token, and train alike."""
    from turnrl.storage import read_jsonl

    runs = {}
    for continuous in (False, True):
        out = tmp_path / str(continuous)
        runs[continuous], _ = _train(
            _config(out, steps=1, rollout={"seed_per_episode": True, "continuous_batching": continuous})
        )
        runs[continuous] = next(h for h in runs[continuous] if "trained_episodes" in h)
    leaves = {c: read_jsonl(tmp_path / str(c) / "train" / "step-1" / "trajectories.jsonl") for c in runs}
    assert [t.token_ids for t in leaves[True]] == [t.token_ids for t in leaves[False]] and len(leaves[True]) >= 4
    assert [t.metadata["tree"]["path"] for t in leaves[True]] == [t.metadata["tree"]["path"] for t in leaves[False]]
    assert runs[True]["loss"] == pytest.approx(runs[False]["loss"], rel=1e-5, abs=1e-7)
    assert runs[True]["guard_violations"] == 0


def _copy(extra):
    import copy

    return copy.deepcopy(extra)


def test_trees_under_a_context_budget_share_the_rewritten_history_and_train_like_separate_rows(tmp_path):
    """rollout.context (mode drop) with rollout.tree: the history is trimmed after the second turn, just before the
    fork (and again after each child's first turn), so siblings share the first segment whole and the opening of the
    rewritten one; the learner's prefix tree runs each segment as a row of its own, shared where the rows share it, and
    the update's loss and gradient norm are those of the same leaves trained as separate rows."""
    import toy_envs  # noqa: F401 — registers tests/Research-v0 (a long search result a turn)

    from turnrl.storage import read_jsonl

    runs = {}
    for shared in (True, False):
        out = tmp_path / str(shared)
        history, _ = _train(
            _config(
                out,
                steps=1,
                env={"id": "tests/Research-v0", "kwargs": {"max_turns": 4}},
                rollout={"context": {"budget": 250}, "tree": {"branches": [{"turn": 2, "children": 2}]}},
                optim={"lr": 1e-2, "minibatch_size": 4, "prefix_tree": shared},
            )
        )
        runs[shared] = next(h for h in history if "trained_episodes" in h)
        assert runs[shared]["guard_violations"] == 0 and runs[shared]["logp_diff"] < 1e-4
    leaves = read_jsonl(tmp_path / "True" / "train" / "step-1" / "trajectories.jsonl")
    assert len(leaves) == 8 == runs[True]["trained_episodes"]
    openings = 0  # the rewritten segment's tokens the siblings share: from its start to the fork
    for a, b in zip(leaves[::2], leaves[1::2]):
        assert a.metadata["tree"]["root"] == b.metadata["tree"]["root"] and a.metadata["tree"]["branch_turns"] == [2]
        assert a.metadata["segment_reasons"] == b.metadata["segment_reasons"] and len(a.segments or []) == 3
        for leaf in (a, b):  # trimmed after the second turn (the fork's) and again after each child's own first
            assert "context" not in leaf.turns[0].info and "context" in leaf.turns[1].info
            assert leaf.segments[1:] == [leaf.turns[1].token_span[1], leaf.turns[2].token_span[1]]
        fork = a.turns[2].token_span[0]  # the siblings' own tokens start with turn 2's action
        assert a.segments[1] < fork and a.token_ids[:fork] == b.token_ids[:fork] and a.token_ids != b.token_ids
        openings += fork - a.segments[1]
    # the first segment and the rewritten one's opening each ran once for both siblings (the first alone saves less)
    assert runs[False]["pass_tokens"] - runs[True]["pass_tokens"] >= openings
    assert runs[False]["grad_norm"] > 0  # the update is not zero by construction
    for key in ("loss", "grad_norm"):
        assert runs[True][key] == pytest.approx(runs[False][key], rel=1e-4, abs=1e-6)
