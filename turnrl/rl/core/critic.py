"""Critics for PPO and VAPO: ``V(s_t)`` for every token position, aligned like the log-probabilities.

* :class:`ValueHead` — a linear head on the policy's own last hidden states (detached: the critic does not move
  the policy). Cheap: no second transformer.
* :class:`SeparateCritic` — its own transformer (any causal LM sharing the policy's vocabulary, e.g. a smaller
  one) plus a linear head, trained end to end (``algorithm.critic_model``).

Both read ``V(s_t)`` from the hidden state of the token before ``t`` (the state in which token ``t`` was chosen),
and both start by predicting 0. With context segments (``segment_ids``, :class:`turnrl.rl.core.forward.Segments`)
each segment is a sequence of its own: its first token gets value 0 like a row's (a prompt token: no loss reads
it), and the separate critic's transformer runs each segment alone.
"""

from __future__ import annotations

from typing import Any

import torch

from turnrl.rl.core.forward import Segments


def _zero_linear(hidden_size: int) -> torch.nn.Linear:
    """The value projection, initialized to predict 0."""
    proj = torch.nn.Linear(hidden_size, 1)
    torch.nn.init.zeros_(proj.weight)
    torch.nn.init.zeros_(proj.bias)
    return proj


def _after(proj: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """``(B, T, H)`` features → ``(B, T)`` values of the state *after* each token (layer-normalized features, see
    :func:`_values`)."""
    return proj(torch.nn.functional.layer_norm(hidden.float(), hidden.shape[-1:])).squeeze(-1)


def _values(
    proj: torch.nn.Linear,
    hidden: torch.Tensor,
    lengths: torch.Tensor | None = None,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``(B, T, H)`` features → ``(B, T)`` values of the state before each token (position 0, and with
    ``segment_ids`` the first token of each segment, get 0).

    With ``lengths`` ``(B,)`` also returns ``(B,)`` values of the state *after* each row's last token (the bootstrap
    value of a truncated episode). Features are layer-normalized first: LM hidden states can have a few very large
    dimensions, which would make Adam's per-weight steps move the predicted values by a lot; unit-scale features
    keep each step small.
    """
    after = _after(proj, hidden)  # (B, T): V of the state after token t
    v = after[:, :-1]
    v = torch.cat([torch.zeros_like(v[:, :1]), v], 1)
    if segment_ids is not None:  # a segment's first token has no state before it in its own context
        opens = torch.zeros_like(segment_ids, dtype=torch.bool)
        opens[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
        v = v.masked_fill(opens, 0.0)
    if lengths is None:
        return v
    return v, after.gather(1, (lengths.long() - 1).clamp(min=0)[:, None]).squeeze(1)


class ValueHead(torch.nn.Module):
    """A linear critic on the policy's last hidden states: ``V(s_t)`` is read from the hidden state of the token
    before ``t`` (the state in which token ``t`` was chosen). Features are detached, so critic training (and value
    pretraining) does not move the policy; they are layer-normalized (no affine). Initialized to predict 0."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = _zero_linear(hidden_size)

    def forward(
        self, last_hidden: torch.Tensor, lengths: torch.Tensor | None = None, segment_ids: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``(B, T, H)`` hidden states → ``(B, T)`` values aligned to token positions (and, given ``lengths``, the
        ``(B,)`` values after each row's last token). With ``segment_ids`` the hidden states must be per segment
        (:func:`turnrl.rl.core.forward.forward_tokens` given the same ``segment_ids``)."""
        return _values(self.proj, last_hidden.detach(), lengths, segment_ids)


class SeparateCritic(torch.nn.Module):
    """A critic with its own transformer: the backbone of a causal LM plus a linear value head, trained end to end.

    Args:
        model: a Hugging Face causal LM (its ``base_model`` is kept; the LM head is not used). It reads the
            policy's token ids, so its vocabulary must cover the policy tokenizer's.
        vocab_size: the policy tokenizer's size, checked against the critic's embeddings.

    Raises:
        ValueError: the critic's vocabulary is smaller than the policy's.
    """

    def __init__(self, model: Any, vocab_size: int) -> None:  # a transformers model: its config, embeddings
        super().__init__()
        embeddings = model.get_input_embeddings().num_embeddings
        if embeddings < vocab_size:
            raise ValueError(
                f"the critic model has {embeddings} token embeddings but the policy's tokenizer has "
                f"{vocab_size} tokens; the critic must share the policy's tokenizer"
            )
        self.backbone = model.base_model
        self.proj = _zero_linear(model.config.hidden_size)

    def after(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` token ids → ``(B, T)`` values of the state *after* each token (what a process reward model
        trained as this critic predicts at a line end: :mod:`turnrl.methods.prm`)."""
        return _after(self.proj, self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        lengths: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``(B, T)`` token ids → ``(B, T)`` values aligned to token positions (and, given ``lengths``, the ``(B,)``
        values after each row's last token); with ``segment_ids`` each context segment is run alone (one call)."""
        segments = Segments.of(attention_mask, segment_ids)
        if segments is None:
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        else:
            hidden = segments.pack(
                self.backbone(
                    input_ids=segments.unpack(input_ids), attention_mask=segments.attention_mask
                ).last_hidden_state
            )
        return _values(self.proj, hidden, lengths, segment_ids)
