"""Registration of environment ids with Gymnasium, and ``make`` with helpful errors.

Ids registered here work with both ``turnrl.make(id, **kwargs)`` and ``gymnasium.make(id, **kwargs)`` (after
``import turnrl``). Entry points are ``"module:attr"`` strings, so importing turnrl imports no environment
module (nor its heavy dependencies) until one is made.

Three ways to bring your own environment, as the Gymnasium ecosystem does it:

* ``turnrl.register("myproject/Lookup-v0", "mymodule:LookupEnv")`` in a module, then make it as
  ``"mymodule:myproject/Lookup-v0"``: ``make`` imports ``mymodule`` (which registers) and makes the id. The same
  string works in every ``turnrl`` command and in a config's ``env.id``.
* a package declares its ids in its own ``pyproject.toml``; ``import turnrl`` registers them (lazily: the module
  is imported when one is made), and ``turnrl envs list`` shows which package each comes from::

      [project.entry-points."turnrl.envs"]
      "myproject/Lookup-v0" = "mypackage.envs:LookupEnv"

* ``import_env_module(name)`` (the command line's ``--import MODULE``) imports a module that registers several.

``turnrl.make`` returns the environment itself (so ``env.tools``, ``env.task`` … are at hand); ``gymnasium.make``
returns it inside Gymnasium's usual wrappers. Its namesake :mod:`turnrl.envs.multiagent.registry` names the
environments of several agents (``make_multi_agent``), the same two ways: a registered id, or an adapter's prefix from
:data:`ENV_ADAPTERS` here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator, parse_env_id

from turnrl.envs.core import TextEnv
from turnrl.plugins import Registry
from turnrl.utils import entry_points_turnrl_first, import_from, parse_python

ENTRY_POINT_GROUP = "turnrl.envs"


@dataclass(frozen=True)
class EnvAdapter:
    """One id prefix's adapter.

    Attributes:
        make: ``make(env_id, **kwargs) -> env``, the whole id (prefix included) and the environment's arguments.
        check: ``check(env_id, search)``: raise ``UnknownEnvironmentError`` for a malformed id and ``EnvImportError``
            for a module that does not import (from ``sys.path`` or the folders ``search``, e.g. a config's folder);
            the default accepts every id.
        sets_spec: give the made environment a Gymnasium ``EnvSpec`` with the id and the arguments (an adapter whose
            environment sets its own, e.g. one that learns its spec from a server, says False).
        entry: what the spec names as its entry point (``"module:function"``).
        multi_agent: the environments it makes have several agents (a
            :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`): ``turnrl.make`` refuses its ids and
            ``make_multi_agent`` makes them.
        usage: the id's form and what it names, one line (``turnrl envs list``), e.g. ``"trl:MODULE:CLASS — …"``.
        modules: ``modules(env_id)``: the modules outside turnrl the id needs imported (a ``trl:`` class's module),
            which each Ray worker imports before its first step so that a node missing one is named at once; the
            default names none.
    """

    make: Callable[..., Any]
    check: Callable[[str, Sequence[str | Path]], None] = lambda env_id, search: None
    sets_spec: bool = True
    entry: str = ""
    multi_agent: bool = False
    usage: str = ""
    modules: Callable[[str], list[str]] = lambda env_id: []


def check_adapter(prefix: str, adapter: Any) -> None:
    """Refuse an adapter that is not an :class:`EnvAdapter` (a module's object or an entry point's), naming the prefix
    and what was given, so every reader of an adapter can rely on its fields.

    Raises:
        ValueError: ``adapter`` is something else (the registry's error).
    """
    if not isinstance(adapter, EnvAdapter):
        raise ValueError(
            f"environment adapter {prefix!r} is not an EnvAdapter (its type is {type(adapter).__name__}): build it as "
            "turnrl.envs.registry.EnvAdapter(make=..., check=..., multi_agent=..., usage=...)"
        )


#: Id prefixes (``PREFIX:REST``) that name an environment written elsewhere, each with the adapter that checks such
#: an id and makes the environment (:class:`EnvAdapter`): a server (``remote:``), a class written
#: for TRL's ``environment_factory`` (``trl:``), an environment written for Prime Intellect's verifiers
#: (``verifiers:``), and games with several agents (``textarena:``, ``pettingzoo:``; their adapters say
#: ``multi_agent``: :func:`turnrl.envs.multiagent.make_multi_agent` makes them). Installed packages add theirs under the
#: ``turnrl.env_adapters`` entry-point group.
ENV_ADAPTERS: Registry[EnvAdapter] = Registry(
    "environment adapter",
    "turnrl.env_adapters",
    {
        "remote": "turnrl.envs.remote.adapter:ADAPTER",
        "trl": "turnrl.envs.adapters.trl:ADAPTER",
        "verifiers": "turnrl.envs.adapters.verifiers_env:ADAPTER",
        "textarena": "turnrl.envs.multiagent.adapters:TEXTARENA",
        "pettingzoo": "turnrl.envs.multiagent.adapters:PETTINGZOO",
    },
    check=check_adapter,
)
BUILTIN_SOURCE = "turnrl (built-in)"

BUILTIN_ENVS: dict[str, str] = {
    "turnrl/Arithmetic-v0": "turnrl.envs.builtin.arithmetic:ArithmeticEnv",
    "turnrl/GSM8K-v0": "turnrl.envs.builtin.math:GSM8KEnv",
    "turnrl/MATH500-v0": "turnrl.envs.builtin.math:MATH500Env",
    "turnrl/Arithmetic-PAG-v0": "turnrl.envs.formats.self_verify:arithmetic_pag",
    "turnrl/GSM8K-PAG-v0": "turnrl.envs.formats.self_verify:gsm8k_pag",
    "turnrl/MATH500-PAG-v0": "turnrl.envs.formats.self_verify:math500_pag",
    "turnrl/HumanEval-PAG-v0": "turnrl.envs.formats.self_verify:humaneval_pag",
    "turnrl/HotPotQA-PAG-v0": "turnrl.envs.formats.self_verify:hotpotqa_pag",
    "turnrl/HumanEval-v0": "turnrl.envs.builtin.code:HumanEvalEnv",
    "turnrl/HotPotQA-v0": "turnrl.envs.builtin.hotpotqa:HotPotQAEnv",
    "turnrl/MultiHop-v0": "turnrl.envs.builtin.multihop:MultiHopEnv",
    "turnrl/Functions-v0": "turnrl.envs.builtin.functions:FunctionsEnv",
    "turnrl/Mixture-v0": "turnrl.envs.builtin.mixture:MixtureEnv",
}

_REGISTERED: dict[str, str] = {}  # id -> entry point as registered
_SOURCES: dict[str, str] = {}  # id -> where it comes from (for `turnrl envs list`)
_ENTRY_POINT_PROBLEMS: list[str] = []


class UnknownEnvironmentError(gym.error.UnregisteredEnv):
    """No environment is registered under the requested id; the message suggests the closest ones."""


class InvalidEnvKwargs(TypeError):
    """``make`` was given keyword arguments that the environment does not accept."""


class EnvImportError(ImportError):
    """The module named in ``"module:Name-v0"`` (or by ``--import``) could not be imported; the message says why."""


def register(env_id: str, entry_point: str | Any, **kwargs: Any) -> None:
    """Register an environment id with Gymnasium (and in turnrl's list).

    Args:
        env_id: ``"namespace/Name-vN"``, e.g. ``"myproject/Units-v0"``.
        entry_point: a ``"module:attr"`` string (preferred: imported lazily) or a callable returning the env.
        **kwargs: default keyword arguments for the entry point.
    """
    module = entry_point.partition(":")[0] if isinstance(entry_point, str) else getattr(entry_point, "__module__", "?")
    _register(env_id, entry_point, kwargs, f"module {module}")


def _register(env_id: str, entry_point: str | Any, kwargs: dict[str, Any], source: str) -> None:
    if env_id in gym.registry:
        if _REGISTERED.get(env_id) == str(entry_point):
            return
        del gym.registry[env_id]
    gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs)
    _REGISTERED[env_id] = str(entry_point)
    _SOURCES[env_id] = source


def registered() -> list[str]:
    """The ids registered through turnrl (built-in, entry points, modules imported by ``make``), sorted."""
    return sorted(_REGISTERED)


def source_of(env_id: str) -> str:
    """Where a registered id comes from: ``turnrl (built-in)``, ``package NAME VERSION (entry point)``, ``module M``."""
    return _SOURCES.get(env_id, "gymnasium registry")


def entry_point_problems() -> list[str]:
    """Entry points in the ``turnrl.envs`` group that could not be registered, with the reason."""
    return list(_ENTRY_POINT_PROBLEMS)


def load_entry_points() -> None:
    """Register the ids that installed packages declare in the ``turnrl.envs`` entry-point group (no import)."""
    _ENTRY_POINT_PROBLEMS.clear()
    try:
        found = entry_points_turnrl_first(ENTRY_POINT_GROUP)
    except Exception as e:  # broken metadata must not break `import turnrl`
        _ENTRY_POINT_PROBLEMS.append(f"reading the {ENTRY_POINT_GROUP!r} entry points failed: {e}")
        return
    for name, value, dist in found:
        problem = _entry_point_problem(name, value)
        if problem:
            _ENTRY_POINT_PROBLEMS.append(f"entry point {name!r} = {value!r} of {dist}: {problem}")
            continue
        _register(name, value, {}, f"package {dist} (entry point)")


def _entry_point_problem(name: str, value: str) -> str | None:
    if name in BUILTIN_ENVS:
        return "a built-in id cannot be replaced; choose your own namespace, e.g. 'myproject/Name-v0'"
    try:
        parse_env_id(name)
    except gym.error.Error:
        return "the name must be an environment id such as 'myproject/Name-v0'"
    module, sep, attr = value.partition(":")
    if not (module and sep and attr):
        return "the value must be 'module.path:EnvClass' (the class or function that creates the environment)"
    return None


# ---- `module:Name-v0` and --import ----


def error_location(e: BaseException) -> str:
    """`` (file.py:12)`` for the innermost frame of ``e``'s traceback, if any."""
    frames = traceback.extract_tb(e.__traceback__)
    if isinstance(e, SyntaxError) and e.filename:
        return f" ({Path(e.filename).name}:{e.lineno})"
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def import_env_module(name: str, search: Sequence[str | Path] = ()) -> ModuleType:
    """Import the module ``name`` (which registers environments) and record the ids it registered.

    The module is looked up on ``sys.path`` first, then in the folders ``search`` (e.g. the current folder, the
    folder of a config file); a folder that holds it is appended to ``sys.path``.

    Raises:
        EnvImportError: the module is not found, or importing it raised (the message names the error and the
            line).
    """
    before = set(gym.registry)
    try:
        module = import_module_from(name, search)
    except EnvImportError:
        raise
    except ModuleNotFoundError as e:
        raise EnvImportError(f"importing module {name!r} failed: {e}{error_location(e)}; install what it needs") from e
    except Exception as e:
        raise EnvImportError(f"importing module {name!r} raised {type(e).__name__}: {e}{error_location(e)}") from e
    for env_id in sorted(set(gym.registry) - before):
        if env_id not in _REGISTERED:  # registered with gymnasium.register directly
            _REGISTERED[env_id] = str(gym.spec(env_id).entry_point)
        _SOURCES[env_id] = f"module {name}"
    return module


def import_module_from(name: str, search: Sequence[str | Path]) -> ModuleType:
    """The module ``name``, from ``sys.path`` or the folders ``search``.

    Raises:
        EnvImportError: no such module there (the message says where it looked and what to do).
    """
    module = import_from(name, search)
    if module is not None:
        return module
    top = name.split(".")[0]
    places = "sys.path" + "".join(f" or {p}" for p in search)
    raise EnvImportError(
        f"no module named {name!r} on {places}. Run from the folder that holds {top}.py, add that folder to "
        "PYTHONPATH, or install the package that provides it."
    )


def adapter_of(env_id: str) -> EnvAdapter | None:
    """The adapter whose prefix ``env_id`` starts with (``remote:…``: :data:`ENV_ADAPTERS`' ``remote``), or None for
    an id Gymnasium's registry holds (``namespace/Name-v0``, ``module.path:Name-v0``)."""
    prefix, sep, _ = env_id.partition(":")
    return ENV_ADAPTERS.get(prefix) if sep and prefix in ENV_ADAPTERS else None


def resolve(env_id: str, search: Sequence[str | Path] = ()) -> str:
    """``"module.path:Name-v0"`` → import the module (it registers) and return ``"Name-v0"``; a plain id as is.

    Raises:
        EnvImportError: the module cannot be imported (see :func:`import_env_module`).
        UnknownEnvironmentError: the id is not registered (after the import), with suggestions.
    """
    if not isinstance(env_id, str):
        raise UnknownEnvironmentError(_suggest(repr(env_id)))
    adapter = adapter_of(env_id)
    if adapter is not None:  # remote:…, trl:…, verifiers:…: the adapter checks the id (and imports its module)
        adapter.check(env_id, search)
        return env_id
    if ":" not in env_id:
        if env_id not in gym.registry:
            raise UnknownEnvironmentError(_suggest(env_id))
        return env_id
    module, _, bare = env_id.partition(":")
    if not module or not bare or ":" in bare:
        raise UnknownEnvironmentError(
            f"{env_id!r} is not of the form 'module.path:namespace/Name-v0'.{_prefix_hint(module)}"
        )
    try:
        import_env_module(module, search)
    except EnvImportError as e:  # perhaps an adapter's prefix misspelt (remot:…, texarena:…)
        raise EnvImportError(f"{e}{_prefix_hint(module)}") from e
    if bare not in gym.registry:
        own = [i for i, s in _SOURCES.items() if s == f"module {module}"]
        close = get_close_matches(bare, own or registered(), n=3, cutoff=0.5)
        hint = (
            f" Did you mean {', '.join(repr(c) for c in close)}?"
            if close
            else (f" Register it in {module!r} with turnrl.register({bare!r}, '{module}:YourEnvClass').")
        )
        what = f"It registers {', '.join(sorted(own))}." if own else "It registers no environment through turnrl."
        raise UnknownEnvironmentError(
            f"module {module!r} was imported but no environment {bare!r} is registered.{hint} {what}"
        )
    return bare


def _prefix_hint(module: str) -> str:
    """`` Did you mean the prefix 'remote:'? …`` where ``module`` (an id's part before ``:``, which did not import)
    looks like a misspelt adapter prefix; empty where it does not."""
    if "." in module:
        return ""
    close = ENV_ADAPTERS.closest(module, cutoff=0.7)
    if close is None:
        return ""
    prefixes = ", ".join(f"'{p}:'" for p in ENV_ADAPTERS.names())
    return f" Did you mean the prefix '{close}:'? Id prefixes: {prefixes} (`turnrl envs list` shows them)."


def _suggest(env_id: str) -> str:
    ids = registered()
    lowered = {i.lower(): i for i in ids}
    close = get_close_matches(env_id.lower(), list(lowered), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(lowered[c]) for c in close)}?" if close else ""
    return (
        f"unknown environment {env_id!r}.{hint} Registered: {', '.join(ids)}. Your own: 'module.path:Name-v0' "
        "imports module.path, which registers Name-v0."
    )


# ---- keyword arguments ----


def _passed_to_parent(fn: Any) -> tuple[set[str], int] | None:
    """The keywords and the number of positional arguments ``fn`` itself passes to its parent's ``__init__``."""
    try:
        tree = parse_python(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__":
            positional = [a for a in node.args if not isinstance(a, ast.Starred)]
            via_super = isinstance(node.func.value, ast.Call) and getattr(node.func.value.func, "id", "") == "super"
            return {k.arg for k in node.keywords if k.arg}, len(positional) - (0 if via_super else 1)
    return None


def _named_params(fn: Any) -> list[inspect.Parameter]:
    params = inspect.signature(fn).parameters.values()
    return [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def _accepted_kwargs(creator: Any) -> tuple[set[str], bool, dict[str, str]]:
    """Keyword names a constructor accepts, following ``**options`` forwarding up the class hierarchy.

    Returns ``(names, complete, fixed)``: ``complete`` is False when the chain ends in an open ``**kwargs``;
    ``fixed`` maps the parents' parameters that a subclass passes itself (so the caller cannot) to that subclass.
    """
    names: set[str] = set()
    fixed: dict[str, str] = {}
    classes = [c for c in inspect.getmro(creator) if "__init__" in vars(c)] if inspect.isclass(creator) else [None]
    for i, cls in enumerate(classes):
        fn = vars(cls)["__init__"] if cls is not None else creator
        params = _named_params(fn)
        names |= {p.name for p in params if p.name not in fixed}
        if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()):
            return names, True, fixed
        passed = _passed_to_parent(fn) if cls is not None and i + 1 < len(classes) else None
        if passed is not None and cls is not None:  # passed: a class's __init__ only
            keywords, n_positional = passed
            parent = [
                p.name for p in _named_params(vars(classes[i + 1])["__init__"]) if p.kind is p.POSITIONAL_OR_KEYWORD
            ]
            for name in keywords | set(parent[: max(n_positional, 0)]):
                fixed.setdefault(name, cls.__name__)
    return names, False, fixed


def _check_kwargs(env_id: str, creator: Any, kwargs: dict[str, Any]) -> None:
    names, complete, fixed = _accepted_kwargs(creator)
    for key in kwargs:
        if key in names or (not complete and key not in fixed):
            continue
        close = get_close_matches(key, sorted(names), n=1) if key not in fixed else []
        hint = f" Did you mean {close[0]!r}?" if close else ""
        why = f" ({fixed[key]} sets it itself)" if key in fixed else ""
        raise InvalidEnvKwargs(
            f"{env_id} does not accept the keyword argument {key!r}{why}.{hint} Accepted: {', '.join(sorted(names))}."
        )


def make(env_id: str, **kwargs: Any) -> TextEnv:
    """Create an environment (unwrapped) with ``kwargs`` overriding its registered defaults.

    Args:
        env_id: a registered id (``"turnrl/GSM8K-v0"``), ``"module.path:Name-v0"`` to import the module that
            registers it first (Gymnasium's convention), or ``"remote:http://HOST:PORT/ID"`` for an environment that a
            server runs (``turnrl envs serve ID``, or an OpenEnv server): the kwargs are made there.
            ``"trl:module:Class"`` for a class written for TRL (:mod:`turnrl.envs.adapters.trl`) and ``"verifiers:NAME"`` for an
            environment written for verifiers (:mod:`turnrl.envs.adapters.verifiers_env`; the kwargs this adapter does not
            take go to its ``load_environment``). An adapter's id of a game with several agents (``textarena:GAME``,
            ``pettingzoo:MODULE:FACTORY``) is refused: :func:`turnrl.envs.multiagent.make_multi_agent` makes it.

    Raises:
        UnknownEnvironmentError: no such id (the message suggests close ids), or an id of several agents.
        EnvImportError: the module of ``"module:Name-v0"`` cannot be imported.
        InvalidEnvKwargs: a keyword argument the environment does not accept (with a suggestion).
        RemoteEnvError: a ``remote:`` server cannot be reached or refuses the kwargs.
    """
    adapter = adapter_of(env_id) if isinstance(env_id, str) else None
    if adapter is not None and adapter.multi_agent:
        raise UnknownEnvironmentError(
            f"{env_id!r} names an environment with several agents: make it with "
            "turnrl.envs.multiagent.make_multi_agent (turnrl train, eval and play take it as they are)"
        )
    if adapter is not None:  # the id names the environment, its adapter makes it
        resolve(env_id)
        env = adapter.make(env_id, **kwargs)
        if adapter.sets_spec:
            env.unwrapped.spec = gym.envs.registration.EnvSpec(
                id=env_id, entry_point=adapter.entry, kwargs=dict(kwargs)
            )
        return env
    spec = gym.spec(resolve(env_id))
    # the class or factory the id is registered with: it makes a TextEnv
    creator: Any = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    merged = {**spec.kwargs, **kwargs}
    _check_kwargs(spec.id, creator, merged)
    env = creator(**merged)
    env.unwrapped.spec = dataclasses.replace(spec, kwargs=merged)
    return env


for _id, _entry in BUILTIN_ENVS.items():
    _register(_id, _entry, {}, BUILTIN_SOURCE)
load_entry_points()
