"""The package's size and shape rules (the developers' guide): no module over
500 lines, no function over 80, no module docstring over 30, and every import
made inside a function says why it is deferred. Read from the source with
``ast``: a new function or module breaking a rule fails here, named."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_DOCSTRING_LINES = 30
# A module-wide reason (top-level comment) covers all its functions' imports.
_MODULE_REASON = re.compile(r"^# deferred imports?:", re.IGNORECASE | re.MULTILINE)
_REASON = re.compile(r"#.*\bdeferred\b", re.IGNORECASE)


def _modules() -> list[Path]:
    return sorted((REPO / "emulator").rglob("*.py"))


def _parsed(path: Path) -> tuple[str, ast.Module]:
    src = path.read_text()
    return src, ast.parse(src, str(path))


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_rules_see_the_package():
    assert len(_modules()) > 100     # a wrong REPO would pass every rule below


def test_no_module_over_500_lines():
    long = {_rel(p): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: split them"


def test_no_function_over_80_lines():
    """From the ``def`` line to the function's last line (its docstring and
    nested functions included, decorators not)."""
    long = {}
    for p in _modules():
        _, tree = _parsed(p)
        for f in _functions(tree):
            if (n := f.end_lineno - f.lineno + 1) > MAX_FUNCTION_LINES:
                long[f"{_rel(p)}:{f.lineno} {f.name}"] = n
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: split them into named parts"


def test_no_module_docstring_over_30_lines():
    """A module's docstring says what it is and how it is used; measurements,
    history and long rationale live in docs/ (docs/design-notes.md)."""
    long = {}
    for p in _modules():
        _, tree = _parsed(p)
        first = tree.body[0] if tree.body else None
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            if (n := first.end_lineno - first.lineno + 1) > MAX_DOCSTRING_LINES:
                long[_rel(p)] = n
    assert long == {}, f"module docstrings over {MAX_DOCSTRING_LINES} lines"


def _unexplained_imports(src: str, tree: ast.Module) -> list[int]:
    """Lines of imports inside functions with no ``# deferred: <why>`` on the
    line or in the comments just above its block of imports."""
    if _MODULE_REASON.search(src):
        return []
    lines = src.splitlines()
    imports = [n for f in _functions(tree) for n in ast.walk(f)
               if isinstance(n, (ast.Import, ast.ImportFrom))]
    import_lines = {i for n in imports for i in range(n.lineno, n.end_lineno + 1)}
    bad = []
    for n in imports:
        if any(_REASON.search(lines[i - 1]) for i in range(n.lineno, n.end_lineno + 1)):
            continue
        j = n.lineno - 1            # 1-based line above the import
        while j >= 1:
            text = lines[j - 1].strip()
            if text.startswith("#") and _REASON.search(text):
                break
            if text.startswith("#") or not text or j in import_lines:
                j -= 1
                continue
            j = 0
        if j < 1:
            bad.append(n.lineno)
    return sorted(set(bad))


def test_every_import_inside_a_function_says_why():
    bad = {}
    for p in _modules():
        src, tree = _parsed(p)
        if lines := _unexplained_imports(src, tree):
            bad[_rel(p)] = lines
    assert bad == {}, ("imports inside functions without a '# deferred: <why>' comment: move "
                       "them to the module's top, or say why not")


@pytest.mark.parametrize("src, unexplained", [
    ("def f():\n    import json\n", [2]),
    ("def f():\n    import json  # deferred: slow\n", []),
    ("def f():\n    # deferred: slow\n    import json\n\n    import os\n", []),
    ("def f():\n    # deferred: slow\n    import json\n    x = 1\n    import os\n", [5]),
    ("# deferred imports: the CLI starts fast\ndef f():\n    import json\n", []),
    ("import json\n", []),
])
def test_the_import_rule_reads_comments_as_meant(src, unexplained):
    assert _unexplained_imports(src, ast.parse(src)) == unexplained
