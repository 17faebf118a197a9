"""The Hugging Face transformers backend: batched sampling with a KV cache, exact per-token logprobs.

The CPU default. It shares the model object with the trainer (no weight copies): after an optimizer step the
next ``generate`` call samples from the updated weights.
"""

from __future__ import annotations

from typing import Any

import torch

from turnrl.agents.base import Completion, SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) everything outside the top-k tokens and outside the top-p probability mass.

    Args:
        logits: ``(B, V)`` temperature-scaled logits.
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


class HFAgent:
    """Generate with a ``transformers`` causal LM.

    Args:
        model: a causal LM (``AutoModelForCausalLM``); used in eval mode under ``torch.no_grad`` while generating.
        tokenizer: its tokenizer (with a chat template for multi-turn rollouts).
        batch_size: the most sequences decoded at once (prompts × n are split into chunks of this size).
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, batch_size: int = 32, **kwargs: Any) -> HFAgent:
        """Load a model by path, hub name or built-in name (see :func:`turnrl.agents.models.load_model`)."""
        from turnrl.agents.models import load_model

        model, tokenizer = load_model(name_or_path, **kwargs)
        return cls(model, tokenizer, batch_size=batch_size)

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are."""
        return next(self.model.parameters()).device

    def generate(self, prompts: list[list[int]], params: SamplingParams, *,
                 seeds: list[int] | None = None) -> list[Completion]:
        """Sample ``params.n`` completions for each token prompt (see :class:`~turnrl.agents.base.Agent`).

        ``seeds`` (one per prompt) gives every row its own random stream, so what a row samples does not depend on
        which other prompts share its batch (``params.seed`` is then unused).
        """
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds must have one entry per prompt ({len(prompts)}), got {len(seeds)}")
        generator = torch.Generator(device="cpu")
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        rows = [(i, p) for i, p in enumerate(prompts) for _ in range(params.n)]
        row_gens = None
        if seeds is not None:
            row_gens = [torch.Generator(device="cpu").manual_seed((seeds[i] * 1_000_003 + j) % 2**63)
                        for i in range(len(prompts)) for j in range(params.n)]
        out: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(rows), self.batch_size):
                gens = row_gens[start : start + self.batch_size] if row_gens is not None else None
                out += self._generate_batch(rows[start : start + self.batch_size], params, generator, gens)
        finally:
            self.model.train(was_training)
        return out

    @torch.no_grad()
    def _generate_batch(
        self, rows: list[tuple[int, list[int]]], params: SamplingParams, generator: torch.Generator,
        row_gens: list[torch.Generator] | None = None,
    ) -> list[Completion]:
        device = self.device
        B, L = len(rows), max(len(p) for _, p in rows)
        input_ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        attention = torch.zeros((B, L), dtype=torch.long)
        for b, (_, p) in enumerate(rows):  # left padding
            input_ids[b, L - len(p) :] = torch.tensor(p)
            attention[b, L - len(p) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        full_attention = torch.cat([attention, torch.ones((B, params.max_new_tokens), dtype=attention.dtype, device=device)], 1)
        eos = torch.tensor(self.eos_ids, device=device)

        tokens = torch.zeros((B, params.max_new_tokens), dtype=torch.long)
        logps = torch.zeros((B, params.max_new_tokens), dtype=torch.float32)
        lengths = torch.full((B,), params.max_new_tokens, dtype=torch.long)
        stopped = torch.zeros(B, dtype=torch.bool)
        window = max((len(s) for s in params.stop), default=0) + 2
        active = torch.arange(B)  # rows still generating; finished rows leave the batch (and the KV cache)

        # Identical prompts (a GRPO group, n > 1) are prefilled once and their keys/values repeated.
        # logits_to_keep=1: only the last position's logits are needed (the LM head over a long prompt is costly)
        slot: dict[tuple[int, ...], int] = {}
        first_rows, which_list = [], []
        for b, (_, p) in enumerate(rows):
            if tuple(p) not in slot:
                slot[tuple(p)] = len(first_rows)
                first_rows.append(b)
            which_list.append(slot[tuple(p)])
        uniq, which = torch.tensor(first_rows, device=device), torch.tensor(which_list, device=device)
        out = self.model(input_ids=input_ids[uniq], attention_mask=attention[uniq], position_ids=positions[uniq],
                         use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        logits = out.logits[:, -1, :]
        if len(uniq) < B:
            cache.batch_select_indices(which)
            logits = logits[which]
        for t in range(params.max_new_tokens):
            logits = logits.float()  # (A, V)
            temp = params.fire_temperature if (t == 0 and params.fire_temperature) else params.temperature
            scaled = logits / temp if temp > 0 else logits
            logp_all = torch.log_softmax(scaled, dim=-1)
            if temp == 0:
                nxt = scaled.argmax(-1)
            else:
                probs = filter_logits(scaled, params.top_k, params.top_p).softmax(-1).cpu()
                if row_gens is None:
                    nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(device)
                else:  # one stream per row: batch-invariant sampling
                    nxt = torch.cat([torch.multinomial(probs[a : a + 1], 1, generator=row_gens[int(r)])[0]
                                     for a, r in enumerate(active)]).to(device)
            tokens[active, t] = nxt.cpu()
            logps[active, t] = logp_all.gather(-1, nxt[:, None]).squeeze(-1).cpu()
            newly = torch.isin(nxt, eos).cpu()
            if params.stop:
                newly |= self._hits_stop(tokens[active, : t + 1], window, params.stop)
            stopped[active[newly]] = True
            lengths[active[newly]] = t + 1
            if bool(newly.all()) or t + 1 == params.max_new_tokens:
                break
            if bool(newly.any()):
                keep = (~newly).nonzero().squeeze(-1)
                cache.batch_select_indices(keep.to(device))
                full_attention, positions, nxt = full_attention[keep.to(device)], positions[keep.to(device)], nxt[keep.to(device)]
                active = active[keep]
            attention = full_attention[:, : L + t + 1]
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=nxt[:, None], attention_mask=attention, position_ids=positions, past_key_values=cache,
                use_cache=True, logits_to_keep=1,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]

        completions = []
        for b, (index, _) in enumerate(rows):
            n = int(lengths[b])
            ids = tokens[b, :n].tolist()
            completions.append(
                Completion(
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=logps[b, :n].tolist(),
                    finish_reason="stop" if bool(stopped[b]) else "length",
                    prompt_index=index,
                )
            )
        return completions

    def _hits_stop(self, tokens: torch.Tensor, window: int, stop: tuple[str, ...]) -> torch.Tensor:
        """Which rows' recent tokens contain a stop string. ``tokens``: (A, t) of the active rows."""
        tails = [self.tokenizer.decode(row[-window:].tolist(), skip_special_tokens=False) for row in tokens]
        return torch.tensor([any(s in tail for s in stop) for tail in tails], dtype=torch.bool)
