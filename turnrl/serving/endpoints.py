"""The OpenAI endpoints of :class:`turnrl.serving.server.AgentServer` (which derives from :class:`OpenAIEndpoints`):
``/v1/completions`` and ``/v1/chat/completions`` — their parameters checked, the generation run through the server's
hooks (``generate``, ``chat_prompt``, ``answered``: :mod:`turnrl.serving.hooks`, the only way an endpoint reaches the
server), logprobs and top logprobs, tool calls parsed, and the responses or server-sent events in OpenAI's shape.
:mod:`turnrl.serving.server` holds the HTTP side: routes, keys, bodies, the hooks, starting and stopping.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from turnrl.agents.base import Completion, capabilities_of
from turnrl.serving.hooks import Endpoints
from turnrl.serving.openai_api import (
    CHAT_MAX_TOKENS,
    CHAT_PARAMS,
    COMPLETION_PARAMS,
    APIError,
    ChatCall,
    CompletionCall,
    chat_messages,
    check_params,
    cut_at_stop,
    parse_tool_calls,
    sampling_params,
    token_pieces,
    tool_choice,
    unsupported,
)
from turnrl.serving.streaming import chat_events, completion_events


class OpenAIEndpoints(Endpoints):
    """OpenAI's completions and chat endpoints of :class:`~turnrl.serving.server.AgentServer`; they reach the server
    only through its hooks (``self.hooks``, :class:`~turnrl.serving.hooks.ServerHooks`: the agent, the model name,
    the generation lock, ``generate``, ``chat_prompt``, ``answered``)."""

    def _top_logprobs(
        self, prompt: list[int], c: Completion, k: int, temperature: float
    ) -> list[list[tuple[int, float]]]:
        """The ``k`` most likely tokens at each generated position, under the distribution the agent sampled from:
        recorded while sampling where the agent does (the HF agent), else scored by a forward pass."""
        if c.top_logprobs is not None and len(c.top_logprobs) == len(c.token_ids):
            return [row[:k] for row in c.top_logprobs]
        self._check_top_logprobs(1)
        model = self.hooks.agent.model
        if not c.token_ids:
            return []
        import torch

        with self.hooks.generation_lock, torch.no_grad():
            device = next(model.parameters()).device
            ids = torch.tensor([prompt + c.token_ids], device=device)
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float()  # (T, V): position t predicts token t
            logp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
            values, indices = logp.topk(min(k, logp.shape[-1]), dim=-1)
        return [list(zip(i.tolist(), v.tolist())) for i, v in zip(indices, values)]

    def _check_top_logprobs(self, k: int | None) -> None:
        """Refuse alternatives (``top_logprobs`` > 0) from an agent that has no local model to rank them."""
        if k and not capabilities_of(self.hooks.agent).local_model:
            raise unsupported(
                "top_logprobs", "this agent has no local model to score alternatives; ask for logprobs only"
            )

    def new_id(self, kind: str) -> str:
        """A response id (``chatcmpl-…`` or ``cmpl-…``)."""
        return f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex[:16]}"

    # ---- /v1/completions ----

    def completions(self, body: dict[str, Any], ctx: Any = None) -> dict[str, Any] | Iterator[str]:
        """Handle ``/v1/completions``: a response dict, or an iterator of server-sent events when streaming."""
        check_params(body, COMPLETION_PARAMS)
        if body.get("echo"):
            raise unsupported("echo", "the prompt is not echoed back")
        if body.get("suffix"):
            raise unsupported("suffix", "no fill-in-the-middle")
        params = sampling_params(body, 16)
        if body.get("best_of") not in (None, 1, params.n):
            raise unsupported("best_of", "no server-side ranking of candidates; use n")
        k = body.get("logprobs")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20):
            raise APIError(
                400, f"logprobs must be an integer from 0 to 20 on /v1/completions, got {k!r}", param="logprobs"
            )
        tok = self.hooks.agent.tokenizer
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = [list(tok.encode(prompt, add_special_tokens=False))]
        elif (
            isinstance(prompt, list) and prompt and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt)
        ):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(x, str) for x in prompt):
            prompts = [list(tok.encode(p, add_special_tokens=False)) for p in prompt]
        else:
            raise APIError(
                400, "prompt must be a non-empty string, a list of strings, or a list of token ids", param="prompt"
            )
        self._check_top_logprobs(k)
        if k:
            params = params.model_copy(update={"top_logprobs": k})
        call = CompletionCall(prompts, params, k, bool(body.get("return_tokens_as_token_ids")))
        if body.get("stream"):
            return completion_events(self, call, body, ctx)
        return self.run_completions(call, ctx)[0]

    def run_completions(
        self, call: CompletionCall, ctx: Any = None, on_token: Any = None
    ) -> tuple[dict[str, Any], list[Completion]]:
        """Generate every prompt of a checked request: the response and its completions, in choice order."""
        choices: list[dict[str, Any]] = []
        outs_all: list[Completion] = []
        used = 0
        for n, p in enumerate(call.prompts):
            base = n * call.params.n
            relay = None if on_token is None else (lambda i, *rest, base=base: on_token(base + i, *rest))
            outs = self.hooks.generate(p, call.params, ctx, relay)
            self.hooks.answered(ctx, p, outs, {"endpoint": "completions"})
            for c in outs:
                text = c.text if call.as_ids else cut_at_stop(c.text, call.params.stop)  # token-level: everything
                choice: dict[str, Any] = {
                    "index": len(choices),
                    "text": text,
                    "finish_reason": c.finish_reason,
                    "logprobs": None,
                }
                if call.k is not None:
                    top = self._top_logprobs(p, c, call.k, call.params.temperature) if call.k > 0 else None
                    pieces = self._pieces(c.token_ids)
                    choice["logprobs"] = {
                        "tokens": [self._token_name(call, t) for t in c.token_ids],
                        "token_logprobs": c.logprobs,
                        "text_offset": [sum(len(x) for x in pieces[:i]) for i in range(len(pieces))],
                        "top_logprobs": None
                        if top is None
                        else [{self._token_name(call, t): lp for t, lp in row} for row in top],
                    }
                choices.append(choice)
                outs_all.append(c)
            used += len(p)
        generated = sum(len(c.token_ids) for c in outs_all)
        return self._envelope("text_completion", choices, used, generated), outs_all

    def _token_name(self, call: CompletionCall, t: int) -> str:
        return f"token_id:{t}" if call.as_ids else self.hooks.agent.tokenizer.decode([t])

    def completion_lp(self, call: CompletionCall, token: int, logprob: float, top: Any, offset: int) -> dict[str, Any]:
        """The ``logprobs`` of one streamed token of ``/v1/completions``."""
        return {
            "tokens": [self._token_name(call, token)],
            "token_logprobs": [logprob],
            "text_offset": [offset],
            "top_logprobs": None
            if not call.k or top is None
            else [{self._token_name(call, t): lp for t, lp in top[: call.k]}],
        }

    def _pieces(self, ids: list[int]) -> list[str]:
        return token_pieces(self.hooks.agent.tokenizer, ids)

    # ---- /v1/chat/completions ----

    def chat(self, body: dict[str, Any], ctx: Any = None) -> dict[str, Any] | Iterator[str]:
        """Handle ``/v1/chat/completions``: a response dict, or an iterator of server-sent events when streaming."""
        check_params(body, CHAT_PARAMS)
        fmt = body.get("response_format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
            raise unsupported(
                "response_format",
                "no constrained decoding (JSON mode, json_schema); ask for JSON in the prompt and validate it yourself",
            )
        params = sampling_params(body, CHAT_MAX_TOKENS)
        want_lp = body.get("logprobs")
        if want_lp is not None and not isinstance(want_lp, bool):
            raise APIError(
                400, f"logprobs must be true or false on /v1/chat/completions, got {want_lp!r}", param="logprobs"
            )
        k = body.get("top_logprobs")
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20:
                raise APIError(400, f"top_logprobs must be an integer from 0 to 20, got {k!r}", param="top_logprobs")
            if not want_lp:
                raise APIError(400, "top_logprobs requires logprobs=true", param="top_logprobs")
            self._check_top_logprobs(k)
            if k:
                params = params.model_copy(update={"top_logprobs": k})
        tools = body.get("tools") or None
        parse_tools = tools is not None and tool_choice(body.get("tool_choice"), tools)
        messages = chat_messages(body.get("messages"))
        call = ChatCall(
            self.hooks.chat_prompt(messages, tools, ctx), params, messages, tools, parse_tools, bool(want_lp), k or 0
        )
        if body.get("stream"):
            return chat_events(self, call, body, ctx)
        return self.run_chat(call, ctx)[0]

    def run_chat(
        self, call: ChatCall, ctx: Any = None, on_token: Any = None
    ) -> tuple[dict[str, Any], list[Completion]]:
        """Generate a checked chat request: the response and its completions."""
        outs = self.hooks.generate(call.prompt, call.params, ctx, on_token)
        choices = []
        for i, c in enumerate(outs):
            content = cut_at_stop(c.text, call.params.stop)
            message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
            finish: str = c.finish_reason
            if call.parse_tools:
                calls, rest = parse_tool_calls(content, call.id_prefix)
                if calls:
                    message.update(content=rest or None, tool_calls=calls)
                    finish = "tool_calls"
            logprobs = None
            if call.want_lp:
                logprobs = {"content": self._chat_logprobs(call, c, len(content)), "refusal": None}
            choices.append({"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish})
        self.hooks.answered(
            ctx,
            call.prompt,
            outs,
            {
                "endpoint": call.endpoint,
                "messages": call.messages,
                "tools": call.tools,
                "returned": [ch["message"] for ch in choices],
            },
        )
        envelope = self._envelope("chat.completion", choices, len(call.prompt), sum(len(c.token_ids) for c in outs))
        return envelope, outs

    def lp_entry(self, token: int, logprob: float, top: Any, k: int) -> dict[str, Any]:
        """One token's entry in a chat response's ``logprobs.content``."""
        tok = self.hooks.agent.tokenizer
        name = tok.decode([token])
        alternatives = (
            [{"token": (s := tok.decode([a])), "logprob": b, "bytes": list(s.encode())} for a, b in (top or [])[:k]]
            if k
            else []
        )
        return {"token": name, "logprob": logprob, "bytes": list(name.encode()), "top_logprobs": alternatives}

    def _chat_logprobs(self, call: ChatCall, c: Completion, keep_chars: int) -> list[dict[str, Any]]:
        top = self._top_logprobs(call.prompt, c, call.k, call.params.temperature) if call.k > 0 else None
        out, seen = [], 0
        for i, (t, lp, piece) in enumerate(zip(c.token_ids, c.logprobs, self._pieces(c.token_ids))):
            if seen >= keep_chars and piece:  # past a stop sequence that was cut from the content
                break
            seen += len(piece)
            out.append(self.lp_entry(t, lp, None if top is None else top[i], call.k))
        return out

    def _envelope(
        self, kind: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        return {
            "id": self.new_id(kind),
            "object": kind,
            "created": int(time.time()),
            "model": self.hooks.model,
            "system_fingerprint": None,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
