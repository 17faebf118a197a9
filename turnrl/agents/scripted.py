"""Scripted agents for tests and demos: fixed replies, a function of the prompt text, or random tokens.

They speak through a real tokenizer, so rollouts with them are token-exact like with a model: the reply text is
encoded, an end-of-sequence token appended, and every logprob is 0 (a deterministic policy). A reply that contains
one of the request's stop strings ends where a model's would: on the token that completes the first one, with no
end-of-sequence token after it (a model stopped by a stop string samples nothing more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnrl.agents.base import Capabilities, Completion, FinishReason, SamplingParams


class ScriptedAgent:
    """Replies with ``policy(prompt_text)``; the prompt is the decoded token prompt (chat template included).

    Args:
        tokenizer: encodes replies and decodes prompts.
        policy: ``prompt_text -> reply_text``.
        end_with_eos: append the tokenizer's end-of-sequence token to each reply that no stop string ends (as a
            model would).
    """

    def __init__(self, tokenizer: Any, policy: Callable[[str], str], *, end_with_eos: bool = True) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.end_with_eos = end_with_eos
        self.calls: list[list[list[int]]] = []  # every batch of prompts received (for tests)

    def _complete(self, text: str, index: int, params: SamplingParams) -> Completion:
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        eos = self.tokenizer.eos_token_id
        finish: FinishReason = "stop"
        cut = _stop_end(self.tokenizer, ids, params.stop)
        if cut is not None:
            ids = ids[:cut]
        elif self.end_with_eos and eos is not None:
            ids.append(eos)
        if len(ids) > params.max_new_tokens:
            ids, finish = ids[: params.max_new_tokens], "length"
        return Completion(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            finish_reason=finish,
            prompt_index=index,
        )

    #: Tokens reported as sampled (``on_token``), nothing else.
    capabilities = Capabilities(on_token=True)

    def generate(self, prompts: list[list[int]], params: SamplingParams, *, on_token: Any = None) -> list[Completion]:
        """One reply per prompt and sample; ``on_token(index, token_id, logprob, None)`` hears each reply's tokens
        in order (as a streaming model would report them)."""
        self.calls.append([list(p) for p in prompts])
        out = []
        for i, p in enumerate(prompts):
            text = self.policy(self.tokenizer.decode(p, skip_special_tokens=False))
            out += [self._complete(text, i, params) for _ in range(params.n)]
        if on_token is not None:
            for k, c in enumerate(out):
                for t, lp in zip(c.token_ids, c.logprobs):
                    on_token(k, t, lp, None)
        return out


class FixedAgent(ScriptedAgent):
    """Replies with ``replies[k]`` on its k-th turn of each episode (the last reply repeats).

    The turn is counted from the number of assistant turns already in the prompt (``assistant_marker`` occurrences
    after the generation prompt), so episodes of different lengths in one batch stay in step.
    """

    def __init__(
        self, tokenizer: Any, replies: Sequence[str], *, assistant_marker: str = "<|im_start|>assistant"
    ) -> None:
        if not replies:
            raise ValueError("FixedAgent needs at least one reply")
        self.replies = list(replies)

        def policy(prompt: str) -> str:
            k = max(prompt.count(assistant_marker) - 1, 0)
            return self.replies[min(k, len(self.replies) - 1)]

        super().__init__(tokenizer, policy)


class RandomAgent:
    """Samples uniformly random tokens (random length up to ``max_new_tokens``): a fuzzer for environments."""

    def __init__(self, tokenizer: Any, seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.rng = np.random.default_rng(seed)

    #: Nothing beyond ``generate``.
    capabilities = Capabilities()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Random completions; logprob log(1/V) per token."""
        vocab = len(self.tokenizer)
        out = []
        for i, _ in enumerate(prompts):
            for _ in range(params.n):
                n = int(self.rng.integers(1, params.max_new_tokens + 1))
                ids = self.rng.integers(0, vocab, size=n).tolist()
                out.append(
                    Completion(
                        self.tokenizer.decode(ids, skip_special_tokens=True),
                        ids,
                        [-float(np.log(vocab))] * n,
                        "length" if n == params.max_new_tokens else "stop",
                        i,
                    )
                )
        return out


def _stop_end(tokenizer: Any, ids: list[int], stop: Sequence[str]) -> int | None:
    """How many of ``ids`` a model stopped by ``stop`` would have produced: up to the token that completes the first
    stop string in the decoded text (None: no stop string in it)."""
    if not stop or not any(s in tokenizer.decode(ids, skip_special_tokens=False) for s in stop):
        return None
    for k in range(1, len(ids) + 1):
        if any(s in tokenizer.decode(ids[:k], skip_special_tokens=False) for s in stop):
            return k
    return None  # pragma: no cover — the whole text holds one, so some prefix does
