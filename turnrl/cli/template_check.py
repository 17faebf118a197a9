"""``turnrl check-template MODEL``: can turnrl train on this chat template token-exactly, and what will the model see?

:func:`check_template` renders multi-turn conversations (a tool call and its result, a retry after feedback,
thinking blocks) through a tokenizer's chat template and reports, one :class:`Check` each:

* ``template``/``roles``: a template exists and renders the roles turnrl's environments send;
* ``boundaries``: the rollout can find where an assistant turn ends (it renders a placeholder there);
* ``append-only``: each turn's rendering is a prefix of the next one's;
* ``tokens``: the rollout's appended token sequence equals the token ids of the whole conversation re-rendered;
* ``tool calls``/``tool results``: structured tool calls and tool results appear in the text and parse back;
* ``thinking``: whether earlier turns' ``<think>`` blocks are stripped;
* ``end of turn``: how the generated end-of-sequence token meets the template's closing text.

turnrl's rollout only appends tokens (:mod:`turnrl.tokens`), so what it trains on is what the model saw; a
template that is not append-only only means a fresh re-render (a chat server at inference) differs from it.
A check *fails* only where the rollout cannot run at all (no template, roles the rollout needs raise, turn
boundaries lost); :attr:`TemplateReport.ok` is then False and the command exits 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import typer

Status = Literal["pass", "warn", "fail", "skip"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
_CALL_TEXT = '<tool_call>{"name": "calculator", "arguments": {"expression": "17 + 25"}}</tool_call>'
_RESULT = "42 (tool result 7319)"
_THOUGHT = "private reasoning 5581"


def conversation(*, thinking: bool = False) -> list[dict[str, Any]]:
    """A turnrl-like episode as chat messages: a tool call written as text, its result, an answer, feedback, a retry."""
    think = f"<think>{_THOUGHT}</think>" if thinking else ""
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 17 + 25?"},
        {"role": "assistant", "content": think + _CALL_TEXT},
        {"role": "tool", "name": "calculator", "content": _RESULT},
        {"role": "assistant", "content": "The answer is \\boxed{41}."},
        {"role": "user", "content": "That is not correct. Try again."},
        {"role": "assistant", "content": "The answer is \\boxed{42}."},
    ]


@dataclass
class Check:
    """One finding: ``name``, ``status`` (pass/warn/fail/skip) and what it means for training."""

    name: str
    status: Status
    message: str


@dataclass
class TemplateReport:
    """All checks of one template, and the mode the rollout will use for it."""

    model: str
    checks: list[Check] = field(default_factory=list)
    mode: str = ""

    @property
    def ok(self) -> bool:
        """Whether turnrl can train on this template token-exactly (no check failed)."""
        return all(c.status != "fail" for c in self.checks)

    def status(self, name: str) -> Status:
        """The status of the check called ``name``."""
        return next(c.status for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``--json``)."""
        return {
            "model": self.model,
            "ok": self.ok,
            "mode": self.mode,
            "checks": [{"name": c.name, "status": c.status, "message": c.message} for c in self.checks],
        }

    def __str__(self) -> str:
        lines = [f"chat template of {self.model}"]
        lines += [f"  {c.status.upper():4}  {c.name:12}  {c.message}" for c in self.checks]
        lines.append(f"rollout mode: {self.mode}" if self.mode else "rollout mode: none (the rollout cannot run)")
        lines.append(
            "result: turnrl can train on this template token-exactly"
            if self.ok
            else "result: turnrl cannot train on this template token-exactly (see FAIL above)"
        )
        return "\n".join(lines)


def _render(tok: Any, messages: list[dict[str, Any]], gen: bool, tools: list[dict[str, Any]] | None = None) -> str:
    kwargs = {"tools": tools} if tools else {}
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen, **kwargs)


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _excerpt(text: str, at: int, width: int = 40) -> str:
    return repr(text[max(at - width, 0) : at + width])


def check_template(tok: Any, model: str = "") -> TemplateReport:
    """Run every check on ``tok``'s chat template (see the module docstring)."""
    report = TemplateReport(model or getattr(tok, "name_or_path", "") or "tokenizer")
    add = report.checks.append
    if getattr(tok, "chat_template", None) is None:
        add(Check("template", "fail", "the tokenizer has no chat template; set tokenizer.chat_template"))
        return report
    add(Check("template", "pass", f"{len(tok.chat_template)} characters of Jinja"))
    roles = _check_roles(tok, add)
    if not roles.get("user") or not roles.get("assistant"):
        return report
    from turnrl.tokens import ChatRenderer  # what the rollout uses: the checks must exercise the same code
    from turnrl.types import Message

    renderer = ChatRenderer(tok)
    try:
        renderer.observation_text([Message(role="user", content="again")], ended_with_eos=False)
        if roles.get("tool"):
            renderer.observation_text([Message(role="tool", name="calculator", content=_RESULT)], ended_with_eos=False)
    except ValueError as e:
        add(Check("boundaries", "fail", f"{e}: the rollout cannot tell where the model's turn ends"))
        return report
    add(Check("boundaries", "pass", "an assistant turn's end is found (the rollout appends the text after it)"))
    chat = conversation()
    if not roles.get("tool"):
        chat = [m if m["role"] != "tool" else {"role": "user", "content": m["content"]} for m in chat]
    if not roles.get("system"):
        chat = chat[1:]
    src = tok.chat_template if isinstance(tok.chat_template, str) else json.dumps(tok.chat_template)
    thinking = [m for m in conversation(thinking=True) if m["role"] in {c["role"] for c in chat}]
    _check_append_only(tok, [chat, thinking] if "think" in src or "reasoning_content" in src else [chat], add)
    report.mode = _check_tokens(tok, renderer, chat, add)
    _check_tools(tok, roles, add)
    _check_thinking(tok, roles, add)
    return report


def _check_roles(tok: Any, add: Any) -> dict[str, bool]:
    probes = {
        "user": [{"role": "user", "content": "hi"}],
        "assistant": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "system": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "tool": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": _CALL_TEXT},
            {"role": "tool", "name": "calculator", "content": _RESULT},
        ],
    }
    ok: dict[str, bool] = {}
    errors: dict[str, str] = {}
    for role, messages in probes.items():
        try:
            text = _render(tok, messages, gen=False)
            ok[role] = messages[-1]["content"] in text
            if not ok[role]:
                errors[role] = "its content does not appear in the rendering"
        except Exception as e:  # Jinja raise_exception and friends
            ok[role], errors[role] = False, f"{type(e).__name__}: {e}"
    if not ok["user"] or not ok["assistant"]:
        bad = ", ".join(f"{r}: {errors[r]}" for r in ("user", "assistant") if r in errors)
        add(Check("roles", "fail", f"user/assistant turns do not render ({bad})"))
    elif errors:
        what = {
            "system": "environments with a system prompt will fail to reset",
            "tool": "tool-use environments will fail at their first tool result",
        }
        add(Check("roles", "warn", "; ".join(f"{r} messages do not render ({errors[r]}): {what[r]}" for r in errors)))
    else:
        add(Check("roles", "pass", "system, user, assistant and tool messages render"))
    return ok


def _check_append_only(tok: Any, chats: list[list[dict[str, Any]]], add: Any) -> None:
    for chat in chats:
        full = _render(tok, chat, gen=False)
        for k, m in enumerate(chat):
            if m["role"] != "assistant":
                continue
            prefix = _render(tok, chat[: k + 1], gen=False) if k + 1 < len(chat) else full
            for before in (_render(tok, chat[:k], gen=True), prefix):
                if not full.startswith(before):
                    at = _first_difference(before, full)
                    add(
                        Check(
                            "append-only",
                            "warn",
                            f"the rendering up to message {k} is not a prefix of the whole conversation's (at "
                            f"character {at}: {_excerpt(before, at)} vs {_excerpt(full, at)}); the template rewrites "
                            "earlier turns. turnrl trains on what the model saw during the rollout; a fresh re-render "
                            "at inference shows it a different context",
                        )
                    )
                    return
    add(Check("append-only", "pass", "each turn's rendering (with its generation prompt) is a prefix of the next"))


def _check_tokens(tok: Any, renderer: Any, chat: list[dict[str, Any]], add: Any) -> str:
    """Replay the conversation as the rollout would and compare with re-tokenizing the full rendering."""
    from turnrl.types import Message

    eos = tok.eos_token_id
    eos_text = tok.decode([eos], skip_special_tokens=False) if eos is not None else None
    messages = [Message(role=m["role"], content=m["content"], name=m.get("name")) for m in chat]
    first = next(i for i, m in enumerate(messages) if m.role == "assistant")
    seq = renderer.prompt_tokens(messages[:first])
    k = first
    while k < len(messages):
        seq += renderer.encode(messages[k].content) + ([eos] if eos is not None else [])  # the model ends with eos
        nxt = next((j for j in range(k + 1, len(messages)) if messages[j].role == "assistant"), len(messages))
        if nxt < len(messages):
            seq += renderer.observation_tokens(messages[k + 1 : nxt], ended_with_eos=eos is not None)
        k = nxt
    full = renderer.encode(_render(tok, chat, gen=False))
    closing = renderer.observation_text([], ended_with_eos=False)
    if eos_text and closing.startswith(eos_text):
        mode = (
            f"append: the prompt is rendered once; then each turn's generated tokens (trained) and the template "
            f"text after the turn (not trained); the model's end-of-sequence {eos_text!r} closes its turn, so the "
            "template's copy is not added twice"
        )
    else:
        mode = (
            f"append: the prompt is rendered once; then each turn's generated tokens (trained) and the template "
            f"text after the turn (not trained); the template closes a turn with {closing[:20]!r}, which is not the "
            f"model's end-of-sequence {eos_text!r}: both stay in the sequence"
        )
        add(
            Check(
                "end of turn",
                "warn",
                f"the template closes an assistant turn with {closing[:20]!r} but the model "
                f"stops at {eos_text!r}; the rollout keeps the generated {eos_text!r} and appends the template's text",
            )
        )
    lossless = tok.decode(full, skip_special_tokens=False) == _render(tok, chat, gen=False)
    tail = tok.decode(full[len(seq) :], skip_special_tokens=False) if full[: len(seq)] == seq else None
    if tail is not None and not tail.strip():
        extra = f" (the template's {tail!r} after the last turn is not part of an episode)" if tail else ""
        add(
            Check(
                "tokens",
                "pass",
                f"the rollout's appended sequence equals the re-rendered conversation's "
                f"{len(seq)} token ids{extra}" + ("" if lossless else "; the tokenizer is not lossless on this text"),
            )
        )
    else:
        at = next((i for i, (a, b) in enumerate(zip(seq, full)) if a != b), min(len(seq), len(full)))
        show = lambda ids: repr(tok.decode(ids[max(at - 3, 0) : at + 4], skip_special_tokens=False))
        add(
            Check(
                "tokens",
                "warn",
                f"the rollout's sequence ({len(seq)} tokens) and the re-rendered conversation "
                f"({len(full)}) part at token {at}: {show(seq)} vs {show(full)}; training stays exact (turnrl never "
                "re-tokenizes), but the trained context differs from what a re-render shows the model",
            )
        )
    return mode


def _check_tools(tok: Any, roles: dict[str, bool], add: Any) -> None:
    from turnrl.tools.parsers import HermesParser

    call = {
        "type": "function",
        "id": "call_0",
        "function": {"name": "calculator", "arguments": {"expression": "17 + 25"}},
    }
    base = [{"role": "user", "content": "What is 17 + 25?"}]
    try:
        text = _render(tok, [*base, {"role": "assistant", "content": "", "tool_calls": [call]}], gen=False, tools=TOOLS)
    except Exception as e:
        add(
            Check(
                "tool calls",
                "warn",
                f"an assistant message with tool_calls does not render ({type(e).__name__}: "
                f"{e}); turnrl is unaffected (the model writes its calls as text), OpenAI-style clients are not",
            )
        )
        text = None
    if text is not None:
        parsed = HermesParser().parse(text).calls
        if parsed and parsed[0].name == "calculator" and parsed[0].arguments == {"expression": "17 + 25"}:
            add(
                Check(
                    "tool calls", "pass", "structured tool_calls render as <tool_call> blocks and parse back unchanged"
                )
            )
        elif "calculator" in text and "17 + 25" in text:
            add(
                Check(
                    "tool calls",
                    "pass",
                    "structured tool_calls appear in the text (not in turnrl's <tool_call> "
                    "style: give the env a matching parser)",
                )
            )
        else:
            add(
                Check(
                    "tool calls",
                    "warn",
                    "the template drops structured tool_calls; turnrl is unaffected (the model "
                    "writes its calls as text, which is kept), but a server passing tool_calls shows the model nothing",
                )
            )
    if roles.get("tool"):
        shown = _RESULT in _render(
            tok,
            [
                *base,
                {"role": "assistant", "content": _CALL_TEXT},
                {"role": "tool", "name": "calculator", "content": _RESULT},
            ],
            gen=True,
        )
        add(
            Check(
                "tool results",
                "pass" if shown else "warn",
                "tool results appear verbatim in the next prompt"
                if shown
                else "the template drops the tool message's content: the model never sees tool results",
            )
        )
    else:
        add(Check("tool results", "skip", "the template has no tool role"))


def _check_thinking(tok: Any, roles: dict[str, bool], add: Any) -> None:
    src = tok.chat_template if isinstance(tok.chat_template, str) else json.dumps(tok.chat_template)
    if "think" not in src and "reasoning_content" not in src:
        add(
            Check("thinking", "skip", "the template has no thinking blocks: <think> text passes through like any other")
        )
        return
    chat = [m for m in conversation(thinking=True) if roles.get(m["role"], True)]
    text = _render(tok, chat, gen=False)
    if _THOUGHT in text:
        add(Check("thinking", "pass", "earlier turns' <think> blocks are kept"))
    else:
        add(
            Check(
                "thinking",
                "warn",
                "earlier turns' <think> blocks are stripped by the template; turnrl's rollout "
                "appends, so the model sees (and is trained with) its earlier thinking, unlike a re-render",
            )
        )


def load_tokenizer(spec: str) -> Any:
    """A tokenizer from an agent spec without loading weights: ``tiny:TEMPLATE``, a built-in name, ``hf:PATH``, a path.

    Raises:
        ValueError: a spec form that has no local tokenizer (``openai:``).
        OSError: the path or name could not be loaded.
    """
    kind, sep, rest = spec.partition(":")
    if sep and kind == "tiny":
        from turnrl.agents.tiny import tiny_tokenizer

        return tiny_tokenizer(rest or "chatml")
    if sep and kind in ("openai",):
        raise ValueError(f"{spec!r} names a remote server; give the model's tokenizer (a path or hf:NAME) instead")
    name = rest if sep and kind in ("hf", "vllm") else spec
    from transformers import AutoTokenizer

    from turnrl.agents.models import resolve_model_path

    path = resolve_model_path(name)
    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise OSError(f"could not load a tokenizer for {spec!r} (resolved to {path!r}): {e}") from e


def check_template_command(
    model: Annotated[str, typer.Argument(help="smollm2-135m-instruct, hf:PATH_OR_NAME, a path, or tiny:TEMPLATE")],
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Check a model's chat template for token-exact multi-turn training; exit 1 if turnrl cannot train on it."""
    try:
        tok = load_tokenizer(model)
    except (OSError, ValueError, KeyError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    report = check_template(tok, model)
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else str(report))
    if not report.ok:
        raise typer.Exit(1)
