"""Package names loaded on first use (PEP 562), so that importing one module of a package does not load
the rest (a responsive CLI). A leaf module, as ``repart.errors`` is: it imports only the
standard library, and every package may use it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_attributes(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name in ``exports`` (name → the module defining it)
    is imported from its module the first time it is used and kept in ``namespace`` (the package's
    ``globals()``), so later uses find it there; any other name is an AttributeError."""

    def load(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return load
