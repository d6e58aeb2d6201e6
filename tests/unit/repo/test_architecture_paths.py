"""Every `file.py:Class.method` (or `file.py:function`) named in
docs/architecture.md exists: the newcomer's path and the rulebook's `code`
column stay true when code moves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "architecture.md"
REF = re.compile(r"`([\w/]+\.py):([\w.]+)`")


def defined(path: Path) -> set[str]:
    """Dotted names of the classes, functions and methods defined in `path`."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{m.name}" for m in node.body if isinstance(m, ast.FunctionDef)}
    return names


def test_every_code_reference_in_the_architecture_page_exists():
    refs = REF.findall(DOC.read_text())
    assert len(refs) > 10, "the page names the code it describes"
    missing = []
    for file, name in set(refs):
        path = ROOT / file if "/" in file else ROOT / "shared" / "room" / file
        if not path.exists() or name not in defined(path):
            missing.append(f"{file}:{name}")
    assert not missing, f"named in docs/architecture.md but not in the code: {sorted(missing)}"
