"""Operation counts are taken at the port boundary (issue 45, item 5): the
request's counters (`shared.opcounts.op_counts()`) are touched only in
shared/opcounts.py and in the counting wrappers every billable call goes
through, never inline in an adapter or a handler, so a call cannot be made
uncounted or counted twice by the code around it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Where `op_counts()` may be used: "path" (anywhere in it) or "path:Class".
COUNTING_WRAPPERS = {
    "shared/opcounts.py": "the counters themselves, the tag and the invocation record's counts",
    "shared/firestore_calls.py:FirestoreCalls": "every Firestore call of the store, its parts, the sender window "
                                                "and the status queue's failure counts",
    "shared/tasks.py:CountedTasks": "every Cloud Tasks create and delete of the three Cloud Tasks adapters",
    "shared/counted.py:CountedPublisher": "every publish of the status queue and of inbound forwarding",
    "shared/counted.py:CountedSender": "every call of a platform's send",
    # Not a count: the outbox keys what this request logged by the request's counters object.
    "shared/outbox.py": "the request's identity (the outbox's per-request record), no count",
}


def uses_of_op_counts(source: str) -> list[tuple[int, str | None]]:
    """(line, enclosing top-level class or None) of each use of the name
    `op_counts` in `source`, imports and `__all__` strings (a re-export)
    left aside."""
    uses: list[tuple[int, str | None]] = []

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and cls is None:
                visit(child, child.name)
                continue
            if isinstance(child, ast.Name) and child.id == "op_counts" \
                    or isinstance(child, ast.Attribute) and child.attr == "op_counts":
                uses.append((child.lineno, cls))
            visit(child, cls)

    visit(ast.parse(source), None)
    return uses


def test_only_the_counting_wrappers_use_the_request_s_counters():
    offenders = []
    for top in ("shared", "functions", "baton_cli"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, cls in uses_of_op_counts(path.read_text(encoding="utf-8")):
                if rel not in COUNTING_WRAPPERS and f"{rel}:{cls}" not in COUNTING_WRAPPERS:
                    offenders.append(f"{rel}:{line}" + (f" ({cls})" if cls else ""))
    assert not offenders, f"count through a counting wrapper (shared/opcounts.py names them): {offenders}"


def test_every_named_wrapper_exists_and_counts():
    for key in COUNTING_WRAPPERS:
        rel, _, cls = key.partition(":")
        uses = uses_of_op_counts((ROOT / rel).read_text(encoding="utf-8"))
        assert any(c == (cls or c) for _, c in uses), f"{key} no longer uses op_counts(): remove it from the list"


def test_the_check_finds_an_inline_count_and_lets_a_re_export_be():
    inline = '''
from shared.opcounts import op_counts
__all__ = ["op_counts"]

class Adapter:
    def call(self):
        op_counts().firestore_reads += 1

def helper():
    import shared.opcounts
    shared.opcounts.op_counts().send_calls += 1
'''
    assert uses_of_op_counts(inline) == [(7, "Adapter"), (11, None)]
