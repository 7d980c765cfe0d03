"""Names a package exports, imported from its modules on first use.

    __getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), {"api": ("run", ...)})

So importing one module of a package (or the package itself) does not import
every module behind its exported names.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, namespace: dict, exports: dict[str, tuple[str, ...]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``exports``: module (relative to ``package``) -> the names it provides."""
    module_of = {name: module for module, names in exports.items() for name in names}
    names = sorted(module_of)

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__, names
