"""The rulebook does not know the room's stored form (issue 45, item 3):
the Firestore codec is the store adapter's (shared/room_document.py, beside
shared/store.py), and no module of shared/room/ imports it, the document
size arithmetic (shared/docsize.py) or Firestore, or maps a room to or
from its document itself. The room's size limit reaches the rules as a
measure in the policy (`Policy.room_bytes`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOM = Path(__file__).resolve().parents[3] / "shared" / "room"
STORAGE_MODULES = ("shared.room_document", "shared.docsize", "shared.store", "google.cloud")
CODEC_NAMES = {"room_to_doc", "room_from_doc", "decode_room", "room_as_read", "message_to_doc", "message_from_doc",
               "room_doc_bytes", "acceptance_key"}


def _imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append(node.module or "")
            found += [f"{node.module}.{a.name}" for a in node.names]
    return found


def test_no_module_of_the_room_imports_the_codec_or_storage():
    bad = {}
    for path in sorted(ROOM.glob("*.py")):
        names = [n for n in _imports(ast.parse(path.read_text()))
                 if any(n == m or n.startswith(m + ".") for m in STORAGE_MODULES)]
        if names:
            bad[path.name] = names
    assert not bad, f"shared/room/ must not know the stored form: {bad}"


def test_no_module_of_the_room_defines_the_codec():
    bad = {}
    for path in sorted(ROOM.glob("*.py")):
        defined = {n.name for n in ast.walk(ast.parse(path.read_text()))
                   if isinstance(n, ast.FunctionDef | ast.ClassDef)} & CODEC_NAMES
        if defined:
            bad[path.name] = sorted(defined)
    assert not bad, f"the codec belongs to the store adapter (shared/room_document.py): {bad}"
    assert (ROOM.parent / "room_document.py").is_file()
