"""One platform registry (issue 45, item 4): every provider of the
configuration has its entry in shared/providers/registry.py, its facts
agree with the configuration, no provider name is spelled as a literal
outside shared/providers/ and shared/config.py, and `SendOutcome` is one
class that the room imports without the platforms' clients."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

from shared import config
from shared.providers import registry

ROOT = Path(__file__).resolve().parents[3]
# Where a provider's name may be written out: the registry and its platforms, and the settings.
ALLOWED_PLACES = ("shared/providers/", "shared/config.py")
SCANNED = ("shared", "functions", "baton_cli")


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of a module, its classes and functions."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def provider_literals(source: str, names: frozenset[str]) -> list[int]:
    """Lines of `source` where a string constant is exactly a provider's name
    (docstrings and comments aside: comments are not in the syntax tree)."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                  and id(node) not in skip)


def test_no_provider_name_is_a_literal_outside_the_providers_and_the_configuration():
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED_PLACES):
                continue
            lines = provider_literals(path.read_text(), registry.KNOWN_PROVIDERS)
            if lines:
                found[rel] = lines
    assert not found, (f"a provider's name written out (lines) outside {ALLOWED_PLACES}: ask the registry "
                       f"(shared/providers/registry.py: `platform`, `has_numbers`, the WHATSAPP... names): {found}")


def test_the_literal_check_sees_code_and_skips_docstrings_and_comments():
    source = ('"""A module about "whatsapp"."""\n'
              'def f(p):\n    """whatsapp"""\n    # "whatsapp"\n    return p == "whatsapp"\n')
    assert provider_literals(source, frozenset({"whatsapp"})) == [5]


def test_the_registry_covers_every_provider_of_the_configuration():
    assert registry.KNOWN_PROVIDERS == frozenset(config.PROVIDERS)
    assert tuple(p.name for p in registry.PLATFORMS) == config.PROVIDERS  # the order a signature is tried in


def test_each_platforms_facts_agree_with_the_configuration():
    fields = {f.name for f in dataclasses.fields(config.Settings)}
    for p in registry.PLATFORMS:
        assert p.secret_setting in fields and p.secret_setting.endswith("_app_secret"), p
        assert f"{p.secret_setting.upper()}" in config.SECRET_ENV_VARS, p
        assert p.default_ack_level == config.ENV_VARS[f"ACK_LEVEL_{p.name.upper()}"][0], p
        assert f"ack_level_{p.name}" in fields, p
        assert registry.by_webhook_object(p.webhook_object) is p
        assert registry.platform(p.name) is p
    assert len(registry.WEBHOOK_OBJECTS) == len(registry.PLATFORMS), "two platforms share a webhook `object`"
    assert registry.by_webhook_object("no such object") is None and registry.by_webhook_object(["page"]) is None
    assert not registry.has_numbers("no such provider")


def test_app_secret_reads_the_platforms_own_setting():
    settings = config.load()
    for p in registry.PLATFORMS:
        assert p.app_secret(settings) == getattr(settings, p.secret_setting)


def test_each_webhook_format_has_its_parser():
    assert registry.parse_statuses({"object": "whatsapp_business_account", "entry": []}) == []
    page = registry.platform(registry.MESSENGER).webhook_object
    assert registry.parse_receipts({"object": page, "entry": []}) == []


def test_send_outcome_is_one_class_and_the_room_loads_no_client():
    from shared.providers import SendOutcome as Providers
    from shared.room import SendOutcome as Room

    assert Room is Providers
    code = ("import sys, shared.room; "
            "loaded = sorted(m for m in sys.modules if m.startswith('shared.providers.') or m == 'requests'); "
            "print(loaded)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['shared.providers.base', 'shared.providers.registry']", out
