"""The room tests' helpers live in tests/unit/room/steps.py (issue 45, item
7): one `step()`, the common `POLICY` and `make_event`; no test module
imports them from another room test module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_no_test_imports_a_room_test_module():
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                          if n.startswith("tests.unit.room.test_")]
    assert not offenders, f"import room helpers from tests/unit/room/steps.py: {offenders}"


def test_the_common_policy_is_defined_once():
    defined = [path.name for path in sorted((ROOT / "tests/unit/room").glob("*.py"))
               if "\nPOLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000, "
                  "first_timer_slack_ms=250,\n                max_send_attempts=3, send_retry_base_ms=1000, "
                  "dedup_retention=50, max_queued_messages=100,\n                watchdog_grace_ms=60_000)\n"
               in path.read_text(encoding="utf-8")]
    assert defined == ["steps.py"], defined
