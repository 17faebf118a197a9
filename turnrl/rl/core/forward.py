"""Per-token log-probabilities, entropies and hidden states of a causal LM on padded, right-aligned sequences.

Two savings over one plain forward pass over the batch, both exact up to float rounding:

* **Generated positions only.** Given the loss mask, the LM head (hidden → vocabulary, a fifth of a small model's
  compute) and the log-softmax run only from each row's first generated token on; prompt positions get 0.
* **Shared prompts** (``share_prefix``). Rows whose prompts — the tokens before their first generated token — are
  identical (the samples of one GRPO group) run that prompt once: its keys and values are repeated for the rows'
  continuations, and gradients flow back through them into the single prompt pass. With group size G and prompt
  length P this removes (G − 1)·P tokens from the forward and the backward pass.

The padding past each cluster's longest row is also cut. Rows with nothing generated still get hidden states.
"""

from __future__ import annotations

from collections import defaultdict

import torch


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, *, loss_mask: torch.Tensor | None = None,
                   share_prefix: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)``, both ``(B, T)``, aligned to token positions (see :func:`forward_tokens`)."""
    logp, entropy, _ = forward_tokens(model, input_ids, attention_mask, temperature, loss_mask=loss_mask,
                                      share_prefix=share_prefix)
    return logp, entropy


def sequence_logprobs(model: torch.nn.Module, sequences: list[list[int]], temperature: float = 1.0
                      ) -> list[list[float]]:
    """Each token's log-probability given the tokens before it (position 0: 0.0), for unpadded token lists; the
    probe that compares the weights two processes hold (a learner rank and a rollout worker)."""
    device = next(model.parameters()).device
    n = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), n), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s, device=device)
        mask[i, : len(s)] = 1
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, mask, temperature)
    return [logp[i, : len(s)].tolist() for i, s in enumerate(sequences)]


def forward_tokens(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, hidden: bool = False, *, loss_mask: torch.Tensor | None = None,
                   share_prefix: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(logp, entropy, last_hidden)`` of right-padded sequences.

    Args:
        input_ids, attention_mask: ``(B, T)``, right-padded (real tokens first).
        temperature: logits are divided by it (the sampling temperature of the rollout), unless 0 or 1.
        hidden: also return the last layer's hidden states ``(B, T, H)`` (detached: they feed the value head).
        loss_mask: ``(B, T)``, nonzero on generated tokens. Without it every position is scored.
        share_prefix: run identical prompts once (needs ``loss_mask``).

    Returns:
        ``logp[b, t]`` = log p(token t | tokens < t) and ``entropy[b, t]`` (no gradient) of that distribution,
        0 at position 0, at padding and (with ``loss_mask``) before the row's first generated token.
    """
    B, T = input_ids.shape
    device = input_ids.device
    lengths = attention_mask.sum(-1)
    if loss_mask is None:
        first = torch.ones(B, dtype=torch.long, device=device)
    else:
        generated = loss_mask > 0
        first = torch.where(generated.any(-1), generated.float().argmax(-1), lengths).clamp(min=1)
    logp = torch.zeros((B, T), device=device)
    entropy = torch.zeros((B, T), device=device)
    last_hidden = None
    clusters: dict[tuple[int, ...], list[int]] = defaultdict(list)
    rest: list[int] = []
    for b in range(B):
        if share_prefix and loss_mask is not None and first[b] < lengths[b]:
            clusters[tuple(input_ids[b, : first[b]].tolist())].append(b)
        else:
            rest.append(b)
    for rows in list(clusters.values()):
        if len(rows) == 1:
            rest += rows
            continue
        F, end = int(first[rows[0]]), int(lengths[rows].max())
        lp, ent, h = _shared_prompt_pass(model, input_ids, attention_mask, rows, F, end, temperature, hidden)
        idx = torch.tensor(rows, device=device)
        logp[idx, F:end] = lp
        entropy[idx, F:end] = ent
        if h is not None:
            last_hidden = _place(last_hidden, h, idx, B, T)
    if rest:
        idx = torch.tensor(sorted(rest), device=device)
        F, end = int(first[idx].min()), int(lengths[idx].max())
        out = model(input_ids=input_ids[idx, :end], attention_mask=attention_mask[idx, :end],
                    output_hidden_states=hidden, logits_to_keep=max(end - F + 1, 1))
        if F < end:
            lp, ent = _score(out.logits[:, -(end - F + 1) : -1], input_ids[idx, F:end], temperature)
            logp[idx, F:end] = lp
            entropy[idx, F:end] = ent
        if hidden:
            last_hidden = _place(last_hidden, out.hidden_states[-1], idx, B, T)
    scored = (attention_mask > 0) & (torch.arange(T, device=device)[None] >= first[:, None])
    return logp * scored, entropy * scored, last_hidden


def _shared_prompt_pass(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        rows: list[int], F: int, end: int, temperature: float, hidden: bool):  # noqa: ANN202
    """One pass of the common prompt ``[0, F)``, then the rows' continuations ``[F, end)`` on its keys/values."""
    n = len(rows)
    idx = torch.tensor(rows, device=input_ids.device)
    head = model(input_ids=input_ids[rows[0] : rows[0] + 1, :F], use_cache=True, logits_to_keep=1,
                 output_hidden_states=hidden)
    cache = head.past_key_values
    cache.batch_repeat_interleave(n)
    tail_ids = input_ids[idx, F:end]
    mask = torch.cat([attention_mask.new_ones((n, F)), attention_mask[idx, F:end]], 1)
    positions = torch.arange(F, end, device=input_ids.device)[None].expand(n, -1)
    tail = model(input_ids=tail_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                 use_cache=True, output_hidden_states=hidden)
    logits = torch.cat([head.logits[:, -1:].expand(n, 1, -1), tail.logits[:, :-1]], 1)  # predict tokens F..end-1
    lp, ent = _score(logits, tail_ids, temperature)
    h = None
    if hidden:
        h = torch.cat([head.hidden_states[-1].expand(n, F, -1), tail.hidden_states[-1]], 1)
    return lp, ent, h


def _score(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of each target and (without gradient) the entropy, from the logits that predict them."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    lp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    return lp, ent


def _place(full: torch.Tensor | None, part: torch.Tensor, idx: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """Write ``part`` (rows ``idx``, positions ``[0, len)``) into a detached ``(B, T, H)`` tensor."""
    part = part.detach()
    if full is None:
        full = part.new_zeros((B, T, part.shape[-1]))
    full[idx, : part.shape[1]] = part
    return full
