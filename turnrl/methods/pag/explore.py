"""Verdict exploration for PAG (ours; docs/algorithms.md §7 names the collapse it answers).

PAG's verifier is rewarded only for the verdicts it samples. A policy that (almost) never writes one of the two
verdicts — SmolLM2-135M on Arithmetic writes "The answer is wrong" in almost none of its verifications under the
default prompt, "The answer is correct" in ~3 % under one naming both — never learns when that verdict is right, and
collapses onto the other (``verifier_balance`` weighs the truths, but cannot make the policy sample a verdict).

With ``algorithm.verdict_explore: p`` a share p of the verify turns of each rollout is *rewritten*: the sampled
reply is replaced by the environment's short reply for the other verdict (``SelfVerify.verdict_texts``; for an
unparseable reply, a verdict drawn at random), whose tokens are scored by the current policy at the sampling
temperature (so the stored log-probabilities are π_old's own and the clipped ratio starts at 1). The environment
then plays the forced verdict out — a forced "wrong" leads to a revision — and rewards it like any other. So in
every group the verifier sees the reward of both verdicts; its advantage for the forced one is positive exactly
when that verdict was the true one. As with SWiRL's ``data_action`` (LUFFY-style guidance), the forced tokens are
off-policy; no importance correction beyond PPO's ratio is made. Held-out evaluations never explore.

With ``verify_tools`` only the verdict turn is rewritten: a verify-phase reply the environment takes as a tool call
(a check, while calls remain) is played as sampled, so a forced verdict still comes after the check it could read.

The rewritten turns carry ``info["rewritten"] = True``; the training-step verdict shares include them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from turnrl.agents.base import Completion, capabilities_of
from turnrl.envs.core import TextEnv


class VerdictExplorer:
    """A :data:`turnrl.rollout.engine.Rewrite` hook that flips a share of verify turns (see the module docstring).

    Args:
        agent: the policy (its ``model`` scores the forced replies, its ``tokenizer`` encodes them).
        share: the probability that a verify turn is rewritten.
        temperature: the sampling temperature (the forced tokens' log-probabilities are taken at it).
        seed: seeds which turns are rewritten.
    """

    def __init__(self, agent: Any, share: float, temperature: float, seed: int = 0) -> None:
        if not 0 < share < 1:
            raise ValueError(f"verdict_explore must be in (0, 1), got {share}")
        if not capabilities_of(agent).local_model:
            raise ValueError(
                "verdict_explore scores the forced verdicts with the policy's model; the agent "
                f"{type(agent).__name__} has none (use the local HF policy)"
            )
        self.agent, self.share = agent, float(share)
        self.temperature = float(temperature) if temperature > 0 else 1.0  # greedy: log-probabilities at T = 1
        self.rng = random.Random(seed)
        eos = getattr(agent.tokenizer, "eos_token_id", None)
        self.eos = [int(eos)] if eos is not None else []

    def __call__(
        self,
        envs: Sequence[TextEnv],
        roles: Sequence[str],
        prompts: Sequence[list[int]],
        completions: Sequence[Completion],
    ) -> list[Completion | None]:
        """A replacement for the chosen verify turns, None for every other turn."""
        from turnrl.rl.core.forward import sequence_logprobs

        chosen: list[tuple[int, list[int], str]] = []
        for i, (env, role, c) in enumerate(zip(envs, roles, completions)):
            if role != "verifier" or self.rng.random() >= self.share:
                continue
            inner: Any = env.unwrapped  # a SelfVerify environment, read by duck typing
            calls = getattr(inner, "verify_tool_calls", None)
            if calls is not None and calls(c.text) is not None:  # a check (verify_tools), not a verdict: played as is
                continue
            texts = getattr(inner, "verdict_texts", None)
            if not texts:
                raise ValueError(
                    f"verdict_explore needs the environment's verdict_texts; {type(inner).__name__} has "
                    "none (a SelfVerify env with a verdict_parser of its own: pass verdict_texts)"
                )
            sampled = inner.verdict_parser(c.text)
            other = {"correct": "wrong", "wrong": "correct"}.get(sampled or "", self.rng.choice(["correct", "wrong"]))
            ids = list(self.agent.tokenizer.encode(texts[other], add_special_tokens=False)) + self.eos
            chosen.append((i, ids, texts[other]))
        out: list[Completion | None] = [None] * len(completions)
        if not chosen:
            return out
        scored = sequence_logprobs(self.agent.model, [prompts[i] + ids for i, ids, _ in chosen], self.temperature)
        for (i, ids, text), logp in zip(chosen, scored):
            out[i] = Completion(
                text=text,
                token_ids=ids,
                logprobs=[float(x) for x in logp[len(prompts[i]) :]],
                finish_reason="stop",
                prompt_index=completions[i].prompt_index,
            )
        return out


def verdict_explorer(share: float, agent: Any, temperature: float, seed: int = 0) -> VerdictExplorer | None:
    """The explorer of one rollout batch (``algorithm.verdict_explore`` = ``share`` > 0), or None."""
    return VerdictExplorer(agent, share, temperature, seed) if share > 0 else None
