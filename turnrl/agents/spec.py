"""Agent specs read once: :class:`AgentSpec`, the string that names an agent (``smollm2-135m-instruct``,
``hf:PATH``, ``vllm:PATH``, ``openai:URL#MODEL``, ``tiny:TEMPLATE``, ``run:OUT_DIR[#POLICY]``, or ``NAME:REST`` of a
backend a package or module registers in :data:`AGENT_BACKENDS`, which lives here and is exported as
``turnrl.agents.AGENT_BACKENDS``).

A config's agent fields (the run's ``model``, a reward judge, an opponent that is an agent) are read into one at
load, so a misspelt backend or a malformed target is a config error naming the field, before anything loads; every
consumer then asks its :attr:`~AgentSpec.kind` and :attr:`~AgentSpec.target` instead of splitting the string again,
and :func:`turnrl.agents.make_agent` builds from it. What is checked at load is the form only — a known backend and
what its target needs — not that a path exists or an endpoint answers: a config is read on machines that may not
hold them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from difflib import get_close_matches
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from turnrl.plugins import Registry

#: the backends by spec prefix (:mod:`turnrl.agents.backends`); installed packages add theirs under the
#: ``turnrl.agents`` entry-point group (``name = "module:function"``), a module of yours with
#: ``AGENT_BACKENDS.register(name, build)``
AGENT_BACKENDS: Registry[Callable[..., Any]] = Registry(
    "agent backend",
    "turnrl.agents",
    {name: f"turnrl.agents.backends:{name}" for name in ("hf", "vllm", "openai", "tiny", "run")},
)

#: how each built-in backend's target reads (for messages)
FORMS = {"hf": "PATH", "vllm": "PATH", "openai": "URL#MODEL", "tiny": "TEMPLATE", "run": "OUT_DIR"}


def keyword_typo(text: str, keywords: Sequence[str], what: str) -> ValueError | None:
    """The error for a bare word that most likely misspells one of ``keywords`` (difflib's ratio at least 0.75), or
    None. For fields where a few words mean something of their own — an opponent's ``self``, a judge's ``rule``, a
    reward judge's ``policy`` — and any other bare word is a model's name or folder: ``slef`` is refused with "did
    you mean 'self'", and a folder of that name is still written ``hf:slef`` or ``./slef``. Words with a ``:``, a
    ``/`` or a leading ``.`` are never taken for one."""
    if not text or ":" in text or "/" in text or text.startswith("."):
        return None
    close = get_close_matches(text, list(keywords), n=1, cutoff=0.75)
    if not close or text in keywords:
        return None
    return ValueError(
        f"{what} {text!r}: did you mean {close[0]!r}? (a model of that name: write hf:{text}, or ./{text} for a folder)"
    )


class ConfigStr(str):
    """A string a config reads once, at load: its subclass's constructor checks it (a ``ValueError`` is a config
    error naming the field), and it is saved as the user wrote it. :class:`AgentSpec` and
    :class:`turnrl.rollout.opponents.Opponent` are two."""

    __slots__ = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """Validated from a string (or an instance) once, at load; saved as the string."""
        return core_schema.no_info_after_validator_function(
            cls,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="always"),
        )


class AgentSpec(ConfigStr):
    """An agent spec as written (a ``str``: it compares, prints and saves as the user wrote it), with its backend.

    Raises (at load, as a config error):
        ValueError: an empty spec, a backend nobody registered (with the closest one and the forms), an empty
            target, or an ``openai:`` spec that is not ``openai:URL#MODEL``.
    """

    __slots__ = ()

    def __new__(cls, spec: str) -> AgentSpec:
        text = str(spec).strip()
        kind, target = split_spec(text)
        if not text:
            raise ValueError("an agent spec needs a name: a built-in model name, a path, or " + forms())
        from turnrl.agents.models import BUILTIN_MODELS

        if kind not in AGENT_BACKENDS:
            raise ValueError(
                f"unknown agent spec {text!r}; use a built-in name ({', '.join(BUILTIN_MODELS)}), a "
                f"path, or {forms()}" + (f". Did you mean {close}:?" if (close := AGENT_BACKENDS.closest(kind)) else "")
            )
        if not target:
            raise ValueError(f"agent spec {text!r} names no {FORMS.get(kind, 'target')} after {kind}:")
        if kind == "openai":
            url, _, model = target.partition("#")
            if not url or not model:
                raise ValueError(f"an openai agent spec is openai:URL#MODEL, got {text!r}")
        return super().__new__(cls, text)

    @property
    def kind(self) -> str:
        """The backend: the prefix before the first ``:``, or ``hf`` for a spec without one (a name or a path)."""
        return split_spec(self)[0]

    @property
    def target(self) -> str:
        """What the backend reads: the spec after its prefix (the whole spec for ``hf`` without one)."""
        return split_spec(self)[1]


def split_spec(spec: str) -> tuple[str, str]:
    """``(backend, target)`` of a spec: ``("hf", spec)`` where it has no ``:`` prefix."""
    kind, sep, rest = spec.partition(":")
    return (kind, rest) if sep else ("hf", spec)


def forms() -> str:
    """The prefixed forms every registered backend takes, for messages."""
    return ", ".join(f"{k}:{FORMS.get(k, 'SPEC')}" for k in AGENT_BACKENDS.names())
