"""Reading a training config: a YAML file plus ``key.sub=value`` overrides (:func:`load_config`), and what went
wrong said on one line that names the file or the override (:func:`config_error`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from turnrl.rl.config.train import TrainConfig


def parse_overrides(overrides: list[str] | None) -> list[tuple[list[str], Any, str]]:
    """``key.sub=value`` items as ``(["key", "sub"], value read as YAML, the item)``.

    Raises:
        ValueError: an item without ``=``.
    """
    out = []
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override must be key.sub=value, got {item!r}")
        out.append((key.strip().split("."), yaml.safe_load(value), item))
    return out


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Load a YAML config and apply dotted ``key.sub=value`` overrides (values read as YAML).

    Raises:
        pydantic.ValidationError: the config does not validate (:func:`config_error` says it in one line).
    """
    data = yaml.safe_load(Path(path).read_text()) or {}
    for (*parents, leaf), value, item in parse_overrides(overrides):
        node = data
        for n, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):  # e.g. rollout.temperature.x=1: temperature is a value, not a section
                raise ValueError(
                    f"override {item}: {'.'.join(parents[: n + 1])} is a value ({node!r}), not a section with keys"
                )
        node[leaf] = value
    return TrainConfig.model_validate(data)


def config_error(e: Exception, path: str | Path, overrides: list[str] | None = None) -> str:
    """What :func:`load_config` raised, on one line that says where: each problem of a command-line override as
    ``override KEY=VALUE: …``, the others as ``PATH: field.path: …``; an unknown key with the keys that section
    takes ("did you mean" for a near miss)."""
    from pydantic import ValidationError

    if not isinstance(e, ValidationError):
        text = str(e) if isinstance(e, (OSError, ValueError, yaml.YAMLError)) else f"{type(e).__name__}: {e}"
        return text if text.startswith("override ") else f"{path}: {text}"
    try:
        parsed = parse_overrides(overrides)
        file_data = yaml.safe_load(Path(path).read_text()) or {}
    except Exception:  # the problem is the one to report
        parsed, file_data = [], {}
    parts = []
    for err in e.errors():
        loc = tuple(str(x) for x in err["loc"])
        value = err.get("input")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(loc)
        elif err["type"] != "missing" and isinstance(value, (str, int, float, bool)):
            msg += f" (got {value!r})"
        item = _override_of(loc, parsed, file_data)
        if item is not None:
            shown = "" if loc == tuple(item.partition("=")[0].strip().split(".")) else f"{'.'.join(loc)}: "
            parts.append(f"override {item}: {shown}{msg}")
        elif loc:
            parts.append(f"{path}: {'.'.join(loc)}: {msg}")
        else:
            with_ = f" (with {', '.join(o for *_, o in parsed)})" if parsed else ""
            parts.append(f"{path}{with_}: {msg}")
    return "; ".join(parts)


def _override_of(loc: tuple[str, ...], parsed: list[tuple[list[str], Any, str]], file_data: Any) -> str | None:
    """The override that set ``loc`` (or a section around it, or a value inside it), or that made the section in
    which a required field is missing; None: the file's."""
    for keys, _, item in reversed(parsed):  # the last override of a key wins
        n = min(len(keys), len(loc))
        if n and tuple(keys[:n]) == loc[:n]:
            return item
    node = file_data
    for part in loc[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if loc[:-1] and node is None:  # the file has no such section: an override made it
        for keys, _, item in parsed:
            if tuple(keys[: len(loc) - 1]) == loc[:-1]:
                return item
    return None


def _unknown_key(loc: tuple[str, ...]) -> str:
    """'unknown key 'x'; did you mean 'y'?' (or the keys the section takes)."""
    from difflib import get_close_matches
    from typing import get_args

    cls: Any = TrainConfig
    for part in loc[:-1]:
        field = cls.model_fields.get(part) if cls is not None else None
        kinds = [field.annotation, *get_args(field.annotation)] if field is not None else []
        cls = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
    if cls is None:
        return f"unknown key {loc[-1]!r}"
    names = list(cls.model_fields)
    close = get_close_matches(loc[-1], names, n=1, cutoff=0.6)
    section = ".".join(loc[:-1]) or "the top level"
    if close:
        return f"unknown key {loc[-1]!r}; did you mean {close[0]!r}?"
    return f"unknown key {loc[-1]!r}; {section} takes: {', '.join(names)}"
