"""Gymnasium spaces for text environments: actions are strings, observations are tuples of messages."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from turnrl.types import Message

_CHARSET = np.array(list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,;:!?+-*/=()'\"\n"))


class TextSpace(spaces.Space[str]):
    """Any Python ``str`` up to ``max_length`` characters: an assistant message's text.

    ``sample()`` draws short random strings (printable letters, digits, punctuation), enough to drive a random
    agent through any environment; it never forms markup such as tool-call tags.
    """

    def __init__(self, max_length: int = 1_000_000, seed: int | np.random.Generator | None = None) -> None:
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Text cannot be flattened to a fixed-size array."""
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of 0–48 characters."""
        n = int(self.np_random.integers(0, 49))
        return "".join(self.np_random.choice(_CHARSET, size=n).tolist())

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string within the length limit."""
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class MessagesSpace(spaces.Space[tuple[Message, ...]]):
    """Tuples of :class:`~turnrl.types.Message` (possibly empty): the new messages an environment returns."""

    def __init__(self, max_messages: int = 64, seed: int | np.random.Generator | None = None) -> None:
        self.max_messages = max_messages
        self._text = TextSpace()
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Messages cannot be flattened to a fixed-size array."""
        return False

    def seed(self, seed: int | None = None) -> int:
        """Seed this space and its text sampler; the seed used (Gymnasium's)."""
        seeds = super().seed(seed)
        self._text.seed(int(self.np_random.integers(2**31)))
        return seeds

    def sample(self, mask: Any = None, probability: Any = None) -> tuple[Message, ...]:
        """One or two random user/tool messages."""
        n = int(self.np_random.integers(1, 3))
        roles = ("user", "tool")
        return tuple(
            Message(role=roles[int(self.np_random.integers(2))], content=self._text.sample()) for _ in range(n)
        )

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a tuple of at most ``max_messages`` Message objects."""
        return isinstance(x, tuple) and len(x) <= self.max_messages and all(isinstance(m, Message) for m in x)

    def __repr__(self) -> str:
        return f"MessagesSpace(max_messages={self.max_messages})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessagesSpace) and other.max_messages == self.max_messages
