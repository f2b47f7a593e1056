"""Front doors: a room's ``__init__`` lists its public names and loads each on first use
(``lazy_names``), so importing one name from a room does not import the whole room."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``'s front door: ``names`` maps each public
    name to the module that defines it; a name is imported once, then kept on the package."""

    def load(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return load
