"""Issue 79: tree rollouts (turnrl/rollout/tree.py) — episodes forked at turn boundaries share their history token
for token, continue in forked environments exactly, sample their own continuations, and with KV sessions reuse the
parent's cache (the same tokens and log-probabilities as re-prefilling everything)."""

from __future__ import annotations

import pytest
import torch

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.formulas.tree import tree_advantages
from turnrl.rollout.engine import Rollout
from turnrl.rollout.tree import Branch, TreeSpec, play_tree
from turnrl.utils import run_with_daemon_threads

SAMPLE = SamplingParams(temperature=1.0, max_new_tokens=8)
SPEC = TreeSpec((Branch(1, 2), Branch(2, 2)))  # 2 children after turn 1 and after turn 2: 4 leaves a root
ROOTS = 2


def make_env():
    return turnrl.make("turnrl/Arithmetic-v0", calculator=True, retry=True, max_turns=4)


def grow(kv_cache_mb=64, spec=SPEC, sample_seeds=(11, 12)):
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok, batch_size=8, kv_cache_mb=kv_cache_mb)
    rollout = Rollout(agent, SAMPLE)
    roots = rollout.start(
        [make_env() for _ in range(ROOTS)],
        seeds=[0, 1],
        options=[{"index": 0}, {"index": 1}],
        group_ids=["g0", "g1"],
        sample_seeds=list(sample_seeds),
        metadata=[{}, {}],
    )
    leaves = run_with_daemon_threads(play_tree(rollout, roots, spec))
    return [ep.traj for ep in leaves], rollout, agent


@pytest.fixture(scope="module")
def cached():
    return grow()


def test_each_root_grows_the_specs_leaves_with_their_place_in_the_tree(cached):
    leaves, _, agent = cached
    assert SPEC.leaves == 4 and len(leaves) == ROOTS * 4 and all(t.error is None for t in leaves)
    assert all(t.num_turns == 4 for t in leaves)  # (a random model never answers right: every episode plays 4 turns)
    paths = [t.metadata["tree"]["path"] for t in leaves]
    assert paths[:4] == [
        ["g0/0", "g0/0.0", "g0/0.0.0"],
        ["g0/0", "g0/0.0", "g0/0.0.1"],
        ["g0/0", "g0/0.1", "g0/0.1.0"],
        ["g0/0", "g0/0.1", "g0/0.1.1"],
    ]
    assert all(t.metadata["tree"]["branch_turns"] == [1, 2] for t in leaves)
    assert len(agent.sessions) == 0  # every leaf released its session


def _history_end(traj, turn):
    """Where turn ``turn``'s tokens begin (the history before it, observation included)."""
    return traj.turns[turn].token_span[0]


def test_siblings_share_their_history_token_for_token_and_then_sample_their_own(cached):
    leaves, _, _ = cached
    for root in range(ROOTS):
        tree = leaves[4 * root : 4 * root + 4]
        trunk = _history_end(tree[0], 1)
        assert all(t.token_ids[:trunk] == tree[0].token_ids[:trunk] for t in tree)  # turn 0 and its reply, once
        assert all(t.logprobs[:trunk] == tree[0].logprobs[:trunk] for t in tree)
        for a, b in ((0, 1), (2, 3)):  # children of one node share turn 1 too
            node = _history_end(tree[a], 2)
            assert tree[a].token_ids[:node] == tree[b].token_ids[:node]
            assert tree[a].token_ids[node:] != tree[b].token_ids[node:]  # and then sample apart
        assert (
            tree[0].token_ids[trunk : _history_end(tree[0], 2)] != tree[2].token_ids[trunk : _history_end(tree[2], 2)]
        )
    assert leaves[0].token_ids[:20] != leaves[4].token_ids[:20] or leaves[0].task_id != leaves[4].task_id


def test_every_leaf_is_what_a_fresh_environment_answers_to_its_actions(cached):
    leaves, _, _ = cached
    for i, t in enumerate(leaves):
        env = make_env()
        obs, _ = env.reset(seed=t.seed, options={"index": i // 4})
        assert list(obs) == t.prompt
        for turn in t.turns:
            o, r, term, trunc, _ = env.step(turn.action.content)
            assert (
                list(o) == turn.observation and r == turn.reward and (term, trunc) == (turn.terminated, turn.truncated)
            )


def test_forked_kv_sessions_give_the_tokens_and_logprobs_of_re_prefilling(cached):
    leaves, rollout, _ = cached
    plain, plain_rollout, _ = grow(kv_cache_mb=0)
    assert [t.token_ids for t in plain] == [t.token_ids for t in leaves]
    for a, b in zip(plain, leaves):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
    with_cache, without = rollout.stats.kv_metrics(), plain_rollout.stats.kv_metrics()
    assert with_cache["prefill_tokens"] < 0.5 * without["prefill_tokens"]  # the shared history is not fed again
    # a forked child starts from its parent's cache: no leaf's session was ever new but the root's, at turn 0
    assert all(t.metadata["kv_events"].get("new") == 1 for t in leaves), [t.metadata["kv_events"] for t in leaves]


def test_the_leaves_give_turn_level_advantages():
    leaves, _, _ = grow(kv_cache_mb=0, spec=TreeSpec((Branch(1, 2),)))
    returns = [1.0 if i % 2 == 0 else 0.0 for i in range(len(leaves))]  # scripted: the first child always wins
    rows = tree_advantages(returns, [t.metadata["tree"]["path"] for t in leaves])
    assert [r[0] for r in rows] == [0.0] * len(leaves)  # the trunk: no signal in a lone tree
    assert all((r[1] > 0) == (ret == 1.0) for r, ret in zip(rows, returns))


def test_a_tree_spec_says_what_it_cannot_be():
    with pytest.raises(ValueError, match="turn >= 0 and children >= 2"):
        Branch(1, 1)
    with pytest.raises(ValueError, match="must increase"):
        TreeSpec((Branch(2, 2), Branch(1, 2)))
    assert TreeSpec((Branch(0, 4),)).leaves == 4 and TreeSpec().leaves == 1


def test_episodes_that_end_before_a_branch_are_leaves_there():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok, batch_size=8, kv_cache_mb=0)
    rollout = Rollout(agent, SAMPLE)
    env = turnrl.make("turnrl/Arithmetic-v0")  # one turn: it ends before turn 1
    roots = rollout.start([env], seeds=[0], options=[{"index": 0}], group_ids=["g"], sample_seeds=[1], metadata=[{}])
    (leaf,) = run_with_daemon_threads(play_tree(rollout, roots, SPEC))
    assert leaf.traj.metadata["tree"]["path"] == ["g/0"] and leaf.done and leaf.traj.num_turns == 1
