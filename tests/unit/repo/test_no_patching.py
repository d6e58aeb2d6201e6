"""No test or tool patches a function of baton's own `shared` package
(issue 45, item 5): the service takes its ports, clock, rules and sleeps as
arguments (shared/service/core.py), so a test or the simulation passes a
fake instead of replacing a module's or a class's function.

Read from the syntax tree of every file under tests/ and tools/: a call of
`mock.patch`, `mock.patch.object`, `monkeypatch.setattr`/`delattr` (or
`mocker.patch...`) whose target is `shared.` (a dotted string) or an object
reached from a name imported from `shared`, unless what it sets is a
constant (a class's memo, not a function). `monkeypatch.setenv`/`delenv`
and patches of fakes, of the standard library and of third-party modules
stay allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PATCHERS = {"patch", "patch.object", "patch.multiple", "setattr", "delattr"}


def _dotted(node: ast.expr) -> str:
    """`a.b.c` of an attribute chain ending in a name, else ""."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _shared_names(tree: ast.AST) -> set[str]:
    """The names a module binds to `shared` or to something imported from it."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shared" or alias.name.startswith("shared."):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and (node.module == "shared" or node.module.startswith("shared.")):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _patcher(call: ast.Call) -> bool:
    """Whether `call` is a patch (mock.patch..., monkeypatch.setattr, mocker.patch...)."""
    name = _dotted(call.func)
    for prefix in ("mock.", "unittest.mock.", "monkeypatch.", "mocker.", ""):
        if name.startswith(prefix) and name[len(prefix):] in PATCHERS:
            return not (prefix == "" and name in ("setattr", "delattr"))  # the builtins set an object's own field
    return False


def _sets_a_constant(call: ast.Call) -> bool:
    value = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "new"), None)
    return isinstance(value, ast.Constant)


def patches_of_shared(source: str) -> list[tuple[int, str]]:
    """(line, target) of each patch of a function of `shared` in `source`."""
    tree = ast.parse(source)
    shared = _shared_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _patcher(node) and node.args):
            continue
        target = node.args[0]
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            if target.value == "shared" or target.value.startswith("shared."):
                found.append((node.lineno, target.value))
        elif (dotted := _dotted(target)) and dotted.split(".")[0] in shared and not _sets_a_constant(node):
            attr = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else "?"
            found.append((node.lineno, f"{dotted}.{attr}"))
    return sorted(found)


def test_no_test_or_tool_patches_a_function_of_shared():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {target}"
                 for folder in ("tests", "tools") for path in sorted((ROOT / folder).rglob("*.py"))
                 for line, target in patches_of_shared(path.read_text(encoding="utf-8"))]
    assert not offenders, ("pass a fake, a clock or a decide as an argument instead of patching shared/ "
                           f"(DeliveryService's seams): {offenders}")


def test_the_check_finds_the_patches_it_forbids_and_lets_the_rest_be():
    forbidden = '''
import shared.service.core as service_core
from shared.service import webhook as webhook_module
from shared.tasks import TimerScheduler
from unittest import mock

def test(monkeypatch, world):
    with mock.patch.object(service_core, "now_us", world.clock.now_us):
        pass
    monkeypatch.setattr(webhook_module.time, "monotonic", lambda: 0.0)
    monkeypatch.setattr("shared.store.op_counts", lambda: None)
    mock.patch("shared.room.decide", world.decide)
    monkeypatch.setattr(TimerScheduler, "cancel", lambda *a: True)
'''
    assert [line for line, _ in patches_of_shared(forbidden)] == [8, 10, 11, 12, 13]
    allowed = '''
import subprocess
from shared.tasks import TimerScheduler

def test(monkeypatch, world):
    monkeypatch.setenv("BATON_MODE", "x")
    monkeypatch.delenv("BATON_MODE")
    monkeypatch.setattr(world.store, "apply", lambda *a: None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)
    monkeypatch.setattr("google.oauth2.id_token.verify_token", lambda *a: {})
    monkeypatch.setattr(TimerScheduler, "_delete_unimplemented", False)
'''
    assert patches_of_shared(allowed) == []
