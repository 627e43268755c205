"""One way to register: `Registry`, a name -> object mapping for one kind of thing vitlab finds by name (model
presets and families, tasks, checkpoint converters, commands, page layouts).

    PRESETS = Registry("model")                          # filled by @register_model in each family's file
    TASKS = Registry("task", discover="vitlab.tasks", order=lambda task: task.order)

A name registered twice is an error naming both (unless `replace=True`: a module imported again registers again);
an unknown name is an error that lists the close matches. With `discover`, the first lookup imports the modules of
that package (`packages=True`: its sub-packages; a tuple of packages and `walk=True`: every module below them
whose name `matches`) so that they register themselves: a new family, task or converter
is a new file, and no list elsewhere names it. `order` sorts what iteration yields (ties keep registration order);
without it, registration order.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name no one registered; its message lists the close matches (a KeyError for mappings, a ValueError for
    the callers that report bad input)."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Mapping[str, T], Generic[T]):
    def __init__(self, kind: str, *, discover: str | tuple[str, ...] | None = None, packages: bool = False,
                 walk: bool = False, matches: Callable[[str], bool] | None = None,
                 order: Callable[[T], Any] | None = None, replace: bool = False) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._discover = (discover,) if isinstance(discover, str) else discover
        self._packages, self._walk, self._matches = packages, walk, matches
        self._discovered = discover is None
        self._order, self._replace = order, replace

    def register(self, name: str, item: T) -> T:
        """Make `item` known as `name`; returns it (so that decorators can return what they were given)."""
        known = self._items.get(name)
        if known is not None and known is not item and not self._replace and _qualname(known) != _qualname(item):
            raise ValueError(f"{self.kind} {name!r} is registered twice ({_qualname(known)} and {_qualname(item)})")
        self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Forget `name` (a test's toy family, say), if it is known."""
        self._items.pop(name, None)

    def discover(self) -> None:
        """Import the package's modules (once), which register what they define."""
        if self._discovered:
            return
        self._discovered = True  # first: a module being imported may look itself up
        for root in self._discover:
            package = importlib.import_module(root)
            if self._walk:  # walk_packages imports the packages it walks through
                for module in pkgutil.walk_packages(package.__path__, f"{root}."):
                    if not module.ispkg and (self._matches is None or self._matches(module.name.rpartition(".")[2])):
                        importlib.import_module(module.name)
                continue
            for module in pkgutil.iter_modules(package.__path__):
                if module.ispkg == self._packages and (self._matches is None or self._matches(module.name)):
                    importlib.import_module(f"{root}.{module.name}")

    def unknown(self, name: str) -> UnknownName:
        close = difflib.get_close_matches(name, list(self), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return UnknownName(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self)})")

    def __getitem__(self, name: str) -> T:
        self.discover()
        if name not in self._items:
            raise self.unknown(name)
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self.discover()
        if self._order is None:
            return iter(list(self._items))
        return iter(sorted(self._items, key=lambda name: self._order(self._items[name])))

    def __len__(self) -> int:
        self.discover()
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"


def _qualname(item: Any) -> str:
    return f"{getattr(item, '__module__', '')}.{getattr(item, '__qualname__', type(item).__qualname__)}"
