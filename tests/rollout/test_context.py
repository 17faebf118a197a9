"""Context management for long episodes: the history rewritten under a token budget becomes token-exact segments."""

from typing import Any

import pytest
import torch

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs.core import TextEnv
from turnrl.rl.core.batch import collate
from turnrl.rollout.context import DROPPED_NOTE, SUMMARY_NOTE, SUMMARY_REQUEST, ContextBudget
from turnrl.rollout.engine import Rollout
from turnrl.types import Message

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=8)


class Research(TextEnv):
    """Every turn answered by a ~40-token tool result; the last turn is rewarded."""

    def __init__(self, max_turns: int = 6) -> None:
        super().__init__(max_turns=max_turns)

    def _reset(self, options: dict[str, Any]) -> tuple[tuple[Message, ...], dict[str, Any]]:
        return (
            Message(role="system", content="Search, then answer."),
            Message(role="user", content="Report what you find."),
        ), {"task_id": "research"}

    def _step(self, action: str) -> Any:
        last = self.turn + 1 >= self.max_turns
        result = Message(role="tool", name="search", content=f"Result {self.turn}: " + "facts and figures " * 6)
        return (() if last else (result,)), (1.0 if last else 0.0), last, False, {"correct": True} if last else {}


@pytest.fixture(scope="module")
def agent():
    tok = tiny_tokenizer("chatml")
    torch.manual_seed(0)
    return HFAgent(tiny_model(tok), tok, batch_size=4, kv_cache_mb=64)


def play(agent, context, n=2, turns=6, max_context=4096):
    rollout = Rollout(agent, PARAMS, keep_prompts=True, context=context, max_context=max_context)
    return rollout.run([Research(turns) for _ in range(n)], sample_seeds=list(range(n)))


def test_without_a_budget_the_episode_is_one_growing_context(agent):
    for traj in play(agent, None):
        assert traj.segments is None and traj.num_turns == 6 and traj.error is None
        assert max(len(p) for p in traj.metadata["prompts"]) > 300


def test_dropping_the_oldest_turns_keeps_every_context_under_the_budget(agent):
    budget = ContextBudget(400)
    tok = agent.tokenizer
    for traj in play(agent, budget):
        assert traj.error is None and traj.num_turns == 6 and traj.terminated and traj.correct
        assert len(traj.segments) >= 2
        bounds = traj.segment_bounds()
        assert all(end - start <= budget.budget for start, end in bounds)
        # what the model was prompted with each turn is its own context's tokens so far, never the whole episode
        for turn, prompt in zip(traj.turns, traj.metadata["prompts"]):
            start = max(s for s in traj.segments if s <= turn.token_span[0])
            assert prompt == traj.token_ids[start : turn.token_span[0]]
        assert len(traj.metadata["segment_reasons"]) == len(traj.segments) - 1
        assert all("oldest turn(s) dropped" in r for r in traj.metadata["segment_reasons"])
        second = tok.decode(traj.token_ids[bounds[1][0] : bounds[1][1]], skip_special_tokens=False)
        assert second.startswith("<|im_start|>system\nSearch, then answer.") and DROPPED_NOTE.split("{")[0] in second
        assert sum(t.info.get("context") is not None for t in traj.turns) == len(traj.segments) - 1
    batch = collate(play(agent, budget), pad_id=0)  # trainable as they are: one row per episode, segments marked
    assert int(batch.segment_ids.max()) >= 1 and len(batch) == 2


def test_a_summary_written_by_the_policy_replaces_the_history(agent):
    budget = ContextBudget(400, mode="summarize", summary_tokens=12)
    tok = agent.tokenizer
    for traj in play(agent, budget):
        assert traj.error is None and traj.terminated and len(traj.segments) >= 2
        summaries = [t for t in traj.turns if t.info.get("summary")]
        assert len(summaries) == len(traj.segments) - 1
        assert sum(not t.info.get("summary") for t in traj.turns) == 6  # the env's turn limit counts its own turns
        for s in summaries:  # a policy turn, trained like the others, asked for after the latest reply
            a, b = s.token_span
            assert all(traj.loss_mask[a:b]) and 0 < b - a <= 12
            before = traj.turns[s.index - 1]
            assert before.observation[-1].content == SUMMARY_REQUEST and before.info["context"].startswith("history su")
        start = traj.segments[1]
        text = tok.decode(traj.token_ids[start : traj.turns[summaries[0].index + 1].token_span[0]])
        assert SUMMARY_NOTE in text and summaries[0].action.content.strip()[:5] in text


def test_a_budget_that_cannot_hold_the_latest_turn_ends_the_episode_truncated(agent):
    for traj in play(agent, ContextBudget(60)):
        assert traj.truncated and traj.metadata["truncated_by"] == "context" and traj.error is None


def test_context_settings_are_checked():
    from pydantic import ValidationError

    from turnrl.rl.config import TrainConfig

    base = {"env": {"id": "turnrl/Arithmetic-v0"}, "rollout": {"context": {"budget": 512, "mode": "summarize"}}}
    assert TrainConfig(**base).rollout.context.mode == "summarize"
    for extra, words in (
        ({"algorithm": {"name": "tppo"}}, "on-policy source"),
        ({"program": {"function": "a:b"}}, "manages its own history"),
    ):
        with pytest.raises(ValidationError, match=words):
            TrainConfig(**{**base, **extra})
    with pytest.raises(ValidationError):
        TrainConfig(env={"id": "turnrl/Arithmetic-v0"}, rollout={"context": {"budget": 512, "mode": "forget"}})
    with pytest.raises(ValueError, match="'drop' or 'summarize'"):
        ContextBudget(100, mode="forget")


class Notebook(Research):
    """Rewrites the conversation itself every other turn (``info["history"]``): the opening and a note only."""

    def _step(self, action: str) -> Any:
        obs, reward, terminated, truncated, info = super()._step(action)
        if self.turn % 2 == 1 and not terminated:
            opening = (
                Message(role="system", content="Search, then answer."),
                Message(role="user", content=f"Your notes after turn {self.turn}: {action[:20]!r}"),
            )
            return opening, reward, terminated, truncated, {**info, "history": True}
        return obs, reward, terminated, truncated, info


def test_an_environment_that_rewrites_the_conversation_starts_a_token_exact_segment(agent):
    """info["history"]: the observation is the whole new conversation; the rollout renders it from the start as a new
    segment, and each later prompt is that segment's tokens alone (what the text-level play sees too)."""
    from turnrl.episode import play_episode

    rollout = Rollout(agent, PARAMS, keep_prompts=True, max_context=4096)
    for traj in rollout.run([Notebook(6) for _ in range(2)], sample_seeds=[0, 1]):
        assert traj.error is None and traj.num_turns == 6 and traj.terminated
        assert len(traj.segments) == 3 and traj.metadata["segment_reasons"][0].startswith(
            "history rewritten by the env"
        )
        for turn, prompt in zip(traj.turns, traj.metadata["prompts"]):
            start = max(s for s in traj.segments if s <= turn.token_span[0])
            assert prompt == traj.token_ids[start : turn.token_span[0]]
        second = agent.tokenizer.decode(traj.token_ids[traj.segments[1] : traj.turns[2].token_span[0]])
        assert second.startswith("<|im_start|>system\nSearch, then answer.") and "Your notes after turn 1" in second
    seen = []
    play_episode(Notebook(4), lambda conversation, env: seen.append(conversation) or "go on")
    assert [m.content for m in seen[2]][1].startswith("Your notes after turn 1") and len(seen[2]) == 2


def test_a_budget_and_an_environment_that_rewrites_the_conversation_are_refused_together(agent):
    rollout = Rollout(agent, PARAMS, context=ContextBudget(4000), max_context=4096)
    for traj in rollout.run([Notebook(6)], sample_seeds=[0]):
        assert traj.num_turns == 2 and "rollout.context cannot manage its history too" in traj.error
