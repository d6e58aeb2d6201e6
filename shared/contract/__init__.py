"""baton's message contract: the JSON Schema of one Pub/Sub message
(`message.v1.schema.json`, beside this file) and the check every producer
and the push parser make with it.

One source: the functions (shared/push.py) and the installable client
(client/, `baton_client.contract` is this same directory, linked) import this
module and read this schema file, so a message the client refuses is one
push.py would reject, with the same reason (tests/unit/platforms/test_contract.py).

This module imports nothing else of baton: it is shipped inside the client.

What the schema cannot say is checked here too, after it: strings that are
not valid Unicode (a lone surrogate), a `sequence` above 2^53 - 1, a
`deliver_at` outside 1970-9998, a `delay_s` above ten years, and more than
ten rows across a WhatsApp list's sections (a JSON Schema bounds each
section only).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastjsonschema

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

VERSION = 1
SCHEMA_PATH = Path(__file__).with_name(f"message.v{VERSION}.schema.json")
# The schema as published (JSON Schema draft-07: the newest draft that both
# libraries below implement).
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))

# Producer sequence numbers: whole numbers from 1, below 2^53 (exact in JSON and Firestore).
MAX_SEQUENCE = 2**53 - 1
# A scheduled message at most this far ahead (s): 10 years, far beyond any product need, below any overflow.
MAX_DELAY_S = 10 * 365 * 24 * 3600
# Rows of a WhatsApp list message across all its sections
# (https://developers.facebook.com/docs/whatsapp/cloud-api/messages/interactive-list-messages).
MAX_LIST_ROWS = 10
# The longest reason kept for a refused message, in characters.
MAX_REASON_CHARS = 1000


def _python_patterns(node: Any) -> Any:
    """The schema with each `pattern` as JSON Schema means it (ECMA 262) in
    Python's `re`: a final `$` becomes `\\Z`, since Python's `$` also matches
    before a final newline (`"room-1\\n"` would pass), ECMA's only at the end."""
    if isinstance(node, dict):
        out = {k: _python_patterns(v) for k, v in node.items()}
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.endswith("$") and not pattern.endswith("\\$"):
            out["pattern"] = pattern[:-1] + "\\Z"
        return out
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


_PY_SCHEMA = _python_patterns(SCHEMA)
_explainer: Any = None


def _explain(message: dict[str, Any]) -> Any:
    """Every error of an invalid message, with its path (jsonschema, imported
    when a message first fails: a valid one never needs it)."""
    global _explainer
    if _explainer is None:
        from jsonschema import Draft7Validator

        _explainer = Draft7Validator(_PY_SCHEMA)
    return _explainer.iter_errors(message)
# The verdict on a message, compiled to Python code (fastjsonschema): the hot
# path, about 10x faster, but it stops at the first error. Compiled when first
# needed (the common ones at import, below): the attributes, one validator per (provider, kind) under
# `definitions/{provider}.{kind}` (what the schema's if/then picks for that
# kind), and the whole schema for the rare message with `prepare`.
_compiled: dict[str, Callable[[Any], Any]] = {}
_compile_lock = threading.Lock()


def _validator(name: str) -> Callable[[Any], Any] | None:
    found = _compiled.get(name)
    if found is not None:
        return found
    if name != "" and name not in _PY_SCHEMA["definitions"]:
        return None
    with _compile_lock:
        if name not in _compiled:
            schema = _PY_SCHEMA if name == "" else \
                {**copy.deepcopy(_PY_SCHEMA["definitions"][name]), "definitions": _PY_SCHEMA["definitions"]}
            _compiled[name] = fastjsonschema.compile(schema)
    return _compiled[name]


def warm() -> None:
    """Compile the validators of the common messages now (about 0.3 s), so
    that a function's first push does not wait for them (shared/bootstrap.py
    calls it at cold start). Importing this module compiles nothing: the
    CLI and the tools that only read a time stay quick to start."""
    for name in ("attributes", "whatsapp.text", "messenger.text", "instagram.text"):
        _validator(name)


def _valid_fast(attributes: Any, data: Any) -> bool:
    """Whether the message keeps the schema (the same verdict as `_explain`,
    tests/unit/platforms/test_contract.py checks it on every kind)."""
    if not isinstance(attributes, dict) or not isinstance(data, dict):
        return False
    try:
        if "prepare" in attributes:
            _validator("")({"attributes": attributes, "data": data})  # type: ignore[misc]
            return True
        kind = _validator(f"{attributes.get('provider')}.{data.get('type', 'text')}")
        if kind is None:
            return False
        _validator("attributes")(attributes)  # type: ignore[misc]
        kind(data)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


class InvalidMessage(ValueError):
    """A message that breaks the contract: `errors`, one line each
    (`where: what`), and `reason`, all of them as push.py keeps them."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.reason = reason_of(errors)
        super().__init__(self.reason)


def reason_of(errors: list[str]) -> str:
    """The one-line reason a refused message is kept with: every error, `; ` between them."""
    return "; ".join(errors)[:MAX_REASON_CHARS]


def _where(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "message"


def _what(error: ValidationError) -> str:
    """A short text for one failed check: the schema's `errorMessage` where it
    gives one, else one made from the keyword (never the whole value)."""
    own = error.schema.get("errorMessage") if isinstance(error.schema, dict) else None
    if own:
        return str(own)
    v: Any = error.validator_value
    kind = error.validator
    if kind == "maxLength":
        return f"longer than {v} characters"
    if kind == "minLength":
        return "must not be empty" if v == 1 else f"shorter than {v} characters"
    if kind in ("maxItems", "minItems"):
        return f"must have at {'most' if kind == 'maxItems' else 'least'} {v} item{'s' if v != 1 else ''}"
    if kind in ("maximum", "minimum"):
        return f"must be at {'most' if kind == 'maximum' else 'least'} {v}"
    if kind == "enum":
        return f"is {error.instance!r:.40}; must be one of {', '.join(map(str, v))}"
    if kind == "minProperties":  # only a template parameter has it: {"type": X, X: value}
        return "needs the field its `type` names"
    if kind == "const":
        return f"must be {v!r}"
    if kind == "type":
        return f"must be of type {v}"
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        extra = sorted(k for k in error.instance if k not in known)
        return f"unexpected field{'s' if len(extra) != 1 else ''} {', '.join(map(str, extra))}"[:200]
    return error.message[:200]


def _lone_surrogates(value: Any, path: str) -> list[str]:
    """Where a string cannot be UTF-8 (JSON can carry a lone surrogate; Firestore and the platforms cannot)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return [f"{path}: is not valid Unicode (a lone surrogate)"]
        return []
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in _lone_surrogates(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [e for i, v in enumerate(value) for e in _lone_surrogates(v, f"{path}.{i}")]
    return []


def _beyond_schema(attributes: dict[str, Any], data: Any) -> list[str]:
    out = _lone_surrogates(data, "data")
    seq = attributes.get("sequence")
    if isinstance(seq, str) and seq.isdigit() and int(seq) > MAX_SEQUENCE:
        out.append(f"attributes.sequence: must be a whole number from 1 to {MAX_SEQUENCE}")
    at = attributes.get("deliver_at")
    if isinstance(at, str) and re.fullmatch(_PY_SCHEMA["definitions"]["attributes"]["properties"]["deliver_at"]["pattern"], at):
        try:
            year = datetime.fromisoformat(at.replace("Z", "+00:00")).astimezone(UTC).year
        except (ValueError, OverflowError):
            year = 0
        if not 1970 <= year <= 9998:
            out.append("attributes.deliver_at: must be a time from 1970 to 9998")
    delay = attributes.get("delay_s")
    if isinstance(delay, str) and re.fullmatch(r"[0-9.]+", delay) and delay.count(".") <= 1 and float(delay) > MAX_DELAY_S:
        out.append(f"attributes.delay_s: must be from 0 to {MAX_DELAY_S} s")
    action = ((data.get("interactive") or {}).get("action") if isinstance(data, dict) else None) or {}
    sections = action.get("sections") if isinstance(action, dict) else None
    if isinstance(sections, list):
        rows = sum(len(s.get("rows") or []) for s in sections if isinstance(s, dict) and isinstance(s.get("rows"), list))
        if rows > MAX_LIST_ROWS:
            out.append(f"data.interactive.action.sections: {rows} rows; a list has at most {MAX_LIST_ROWS} in all")
    return out


def errors(attributes: Any, data: Any) -> list[str]:
    """Every way a message (its Pub/Sub `attributes` and its decoded `data`)
    breaks the contract, one `where: what` line each, in a stable order;
    empty when it keeps it. Never raises for any JSON value."""
    found: list[str] = []
    if not _valid_fast(attributes, data):
        for error in _explain({"attributes": attributes, "data": data}):
            where, what = _where(error), _what(error)
            # An `errorMessage` said once for a node is not said again for its fields.
            if not any(f.endswith(": " + what) and where.startswith(f[: -len(what) - 2]) for f in found):
                found.append(f"{where}: {what}")
    if isinstance(attributes, dict):
        found += [e for e in _beyond_schema(attributes, data) if e not in found]
    return found


def check(attributes: Any, data: Any) -> None:
    """Raises:
        InvalidMessage: `errors(attributes, data)` found any (all of them, at once).
    """
    found = errors(attributes, data)
    if found:
        raise InvalidMessage(found)
