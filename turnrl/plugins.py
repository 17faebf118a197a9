"""One registry shape for every extension point: names mapped to plug-ins, built-ins and installed packages alike.

A :class:`Registry` holds the plug-ins of one kind — algorithms, health monitors, agent backends, … — by name. An
entry is the object itself or a lazy ``"module:attribute"`` string, imported on first use, so a registry costs no
import until something asks for a name. Three ways in, one call each:

* **built-ins**: the table the registry is created with (``Registry("algorithm", "turnrl.algorithms", {...})``);
* **installed packages**: entry points of the registry's group in their ``pyproject.toml``
  (``[project.entry-points."turnrl.algorithms"] my-algo = "my_pkg.algo:MyAlgo"``), read once, turnrl's own first,
  so no other package takes a name turnrl holds — turnrl's own methods come in this way;
* **a module of yours**: ``registry.register(name, obj)`` (or ``@registry.register(name)`` on the class).

An unknown name is refused with the closest registered one ("did you mean") and the list. A registry may check each
plug-in (``check(name, obj)`` raising its ``error``) when it is registered as an object and when a lazy entry loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from difflib import get_close_matches
from typing import Any, Generic, TypeVar

from turnrl.utils import entry_points_turnrl_first, load_entry

T = TypeVar("T")


class Registry(Generic[T]):
    """Names → plug-ins of one kind.

    Args:
        kind: what a plug-in is, as messages say it ("algorithm", "monitor", "agent backend").
        group: the entry-point group installed packages declare theirs in (``turnrl.algorithms``).
        builtins: the entries turnrl itself holds, ``name -> object or "module:attribute"``.
        check: called as ``check(name, obj)`` on every object registered or loaded; raises to refuse it.
        hint: appended to the message for an unknown name (how a user adds one).
        error: the exception raised when a name is taken or an entry does not load (a ``ValueError`` subclass).
    """

    def __init__(
        self,
        kind: str,
        group: str,
        builtins: Mapping[str, str | T] | None = None,
        *,
        check: Callable[[str, Any], None] | None = None,
        hint: str = "",
        error: type[ValueError] = ValueError,
    ) -> None:
        self.kind, self.group, self.hint, self.error = kind, group, hint, error
        self.builtins: dict[str, str | T] = dict(builtins or {})
        self.entries: dict[str, str | T] = dict(self.builtins)
        self.check = check
        self._read = False

    # ---- filling it ----

    def load_entry_points(self) -> None:
        """Add the entry points of :attr:`group` (once; turnrl's own first; a name already taken keeps its entry)."""
        if self._read:
            return
        self._read = True
        for name, value, _ in entry_points_turnrl_first(self.group):
            self.entries.setdefault(name, value)

    def register(self, name: str, entry: str | T | None = None, *, replace: bool = False) -> Any:
        """Register ``entry`` (an object, checked now, or a lazy ``"module:attribute"``, checked when it loads) under
        ``name``; without ``entry``, a decorator that registers what it decorates and returns it.

        Raises:
            error: ``name`` is taken by another entry (pass ``replace=True`` to override it on purpose), or the
                registry's check refuses the object.
        """
        if entry is None:

            def decorate(obj: T) -> T:
                self.register(name, obj, replace=replace)
                return obj

            return decorate
        self.load_entry_points()  # a name an installed package (turnrl's methods included) declares is taken
        old = self.entries.get(name)
        if old is not None and not replace and old is not entry:
            raise self.error(
                f"{self.kind} {name!r} is already registered ({describe(old)}), so {describe(entry)} "
                "cannot take it; pick another name, or pass replace=True to override it"
            )
        if not isinstance(entry, str) and self.check is not None:
            self.check(name, entry)
        self.entries[name] = entry
        return entry

    def reset(self) -> None:
        """Back to the built-ins alone, entry points unread (tests)."""
        self.entries = dict(self.builtins)
        self._read = False

    # ---- reading it ----

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self.load_entry_points()
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        if name not in self.entries:
            self.load_entry_points()
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def closest(self, name: str, cutoff: float = 0.6) -> str | None:
        """The registered name most like ``name`` (difflib's ratio at least ``cutoff``), or None: what "did you mean"
        offers, for a caller whose message says more than :meth:`unknown`'s."""
        close = get_close_matches(name, self.names(), n=1, cutoff=cutoff)
        return close[0] if close else None

    def unknown(self, name: str) -> ValueError:
        """The error for a name nobody registered: the closest registered name and the list."""
        close = self.closest(name)
        did_you_mean = f" Did you mean {close!r}?" if close else ""
        return ValueError(
            f"unknown {self.kind} {name!r}.{did_you_mean} Registered: {', '.join(self.names())}"
            + (f"; {self.hint}" if self.hint else "")
        )

    def get(self, name: str) -> T:
        """The plug-in registered under ``name``, loaded (and checked) on first use.

        Raises:
            ValueError: no such name (:meth:`unknown`).
            error: a lazy entry that does not load, or that the registry's check refuses.
        """
        if name not in self:
            raise self.unknown(name)
        entry = self.entries[name]
        if isinstance(entry, str):
            try:
                loaded = load_entry(entry)
            except (ImportError, AttributeError) as e:
                raise self.error(
                    f"{self.kind} {name!r} is registered as {entry!r}, which does not load "
                    f"({type(e).__name__}: {e}); fix the entry or the module"
                ) from e
            if self.check is not None:
                self.check(name, loaded)
            entry = self.entries[name] = loaded
        return entry

    def loaded(self) -> dict[str, T]:
        """Every plug-in by name, loaded, in name order."""
        return {name: self.get(name) for name in self.names()}


def describe(entry: Any) -> str:
    """An entry as messages name it: its ``"module:attribute"``."""
    if isinstance(entry, str):
        return entry
    return f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', type(entry).__qualname__)}"
