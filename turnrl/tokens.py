"""Token bookkeeping for multi-turn rollouts: render messages through the chat template once, never re-tokenize.

The rollout keeps each episode's token sequence and only ever *appends* to it: the tokens the agent generated,
and the template tokens of the environment's new messages. Those are found by rendering a fixed two-message
conversation whose assistant turn holds a placeholder, plus the new messages, and keeping the text after the
placeholder: it holds the closing of the assistant turn, the new messages and the next generation prompt, for
any chat template (ChatML, Llama 3, Qwen with tools, …). If the agent already produced the end-of-turn token,
that token's text is not added twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnrl.template_tools import fit_to_template, template_support
from turnrl.types import Message

_PLACEHOLDER = "\u2063TURNRL_ASSISTANT_PLACEHOLDER\u2063"


class ChatRenderer:
    """Turns messages into token ids with a tokenizer's chat template, for appending to a running sequence.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        tools: OpenAI-style tool schemas passed to the template (``tools=``), or None.
        fit_tools: where the template cannot render tools, structured tool calls or ``tool`` messages, rewrite
            the messages so that nothing is lost (:func:`turnrl.template_tools.fit_to_template`; for requests from
            outside — turnrl's environments describe their tools themselves).
    """

    def __init__(
        self, tokenizer: Any, tools: Sequence[dict[str, Any]] | None = None, *, fit_tools: bool = False
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; set tokenizer.chat_template")
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        self.support = template_support(tokenizer) if fit_tools else None
        eos = tokenizer.eos_token_id
        self._eos_text = tokenizer.decode([eos], skip_special_tokens=False) if eos is not None else None

    def render(self, messages: Sequence[Message | dict[str, Any]], *, add_generation_prompt: bool) -> str:
        """The chat template's text for ``messages``."""
        chat = [m.to_chat() if isinstance(m, Message) else m for m in messages]
        tools = self.tools
        if self.support is not None and not self.support.complete:
            chat, tools = fit_to_template(chat, tools, self.support)
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        """Tokenize template text (special tokens in it are recognized; none are added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_tokens(self, messages: Sequence[Message]) -> list[int]:
        """The tokens of the opening messages followed by the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_text(self, messages: Sequence[Message | dict[str, Any]], *, ended_with_eos: bool) -> str:
        """The template text that follows an assistant turn: its closing, ``messages``, the next generation prompt.

        Args:
            messages: the environment's new messages.
            ended_with_eos: whether the agent's turn already ends with the end-of-sequence token, whose text is
                then left out here.
        """
        base = [Message(role="user", content="x"), Message(role="assistant", content=_PLACEHOLDER)]
        full = self.render([*base, *messages], add_generation_prompt=True)
        at = full.find(_PLACEHOLDER)
        if at < 0:
            raise ValueError("the chat template dropped the assistant message's content; cannot find turn boundaries")
        suffix = full[at + len(_PLACEHOLDER) :]
        if ended_with_eos and self._eos_text and suffix.startswith(self._eos_text):
            suffix = suffix[len(self._eos_text) :]
        return suffix

    def observation_tokens(self, messages: Sequence[Message | dict[str, Any]], *, ended_with_eos: bool) -> list[int]:
        """Tokens of :meth:`observation_text`."""
        return self.encode(self.observation_text(messages, ended_with_eos=ended_with_eos))


def end_of_turn(tokenizer: Any, replaced: Sequence[int]) -> list[int]:
    """The end-of-turn token for a turn written in place of ``replaced`` (a relabelled action): ``replaced``'s own
    last token if it is a special token (the turn ended there), else the tokenizer's eos (none if it has none)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    if replaced and replaced[-1] in special:
        return [int(replaced[-1])]
    eos = getattr(tokenizer, "eos_token_id", None)
    return [int(eos)] if eos is not None else []
