"""The documentation keeps up with the code: docs/configuration.md lists every
setting shared/config.py reads (and nothing else), docs/event-log.md every
event type and field of shared/events.py, the README stays a front page, and
no relative link in README.md or docs/ dangles."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from shared.config import ENV_VARS, load
from shared.events import EVENT_FIELDS, EventType

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
README_PATH = ROOT / "README.md"
CONFIGURATION = DOCS / "configuration.md"
EVENT_LOG = DOCS / "event-log.md"
# Documented beside ENV_VARS but read by others: functions-framework (THREADS)
# and the Google client libraries (the emulator hosts).
NOT_READ_BY_BATON = {"THREADS", "FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST"}
# Settings of an earlier design; no page may document them again.
STALE_SETTINGS = ("DEDUP_WINDOW", "MAX_PENDING_BYTES")
README_MAX_LINES = 150


@cache
def text(path: Path) -> str:
    return path.read_text()


def markdown_pages() -> list[Path]:
    return [README_PATH, *sorted(DOCS.glob("*.md"))]


def without_fences(markdown: str) -> str:
    """The page with every fenced code block blanked (its lines kept empty)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def without_code(markdown: str) -> str:
    """The page without fenced code blocks and inline code spans, where a
    bracket or a '#' is not markdown."""
    return "\n".join(re.sub(r"`[^`\n]*`", "", line) for line in without_fences(markdown).splitlines())


def table_rows(markdown: str, first_header: str) -> list[list[str]]:
    """The body rows (cells, stripped) of every table whose first header cell is `first_header`."""
    rows: list[list[str]] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        if lines[i].lstrip().startswith("|") and cells[0] == first_header:
            i += 2  # the header and its |---| line
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            continue
        i += 1
    return rows


def code_name(cell: str) -> str:
    """`NAME` -> NAME (the first code span of a cell)."""
    m = re.search(r"`([^`]+)`", cell)
    return m.group(1) if m else cell


def configuration_table() -> dict[str, list[str]]:
    return {code_name(row[0]): row for row in table_rows(text(CONFIGURATION), "variable")}


# ------------------------------------------------------------ configuration


@pytest.mark.parametrize("name", sorted(ENV_VARS))
def test_every_environment_variable_is_in_the_configuration_page(name):
    assert f"`{name}`" in text(CONFIGURATION)
    row = configuration_table().get(name)
    assert row is not None, f"{name} has no row in the table of docs/configuration.md"
    default = ENV_VARS[name][0]
    assert (f"`{default}`" in row[1]) if default else ("(empty)" in row[1]), (
        f"docs/configuration.md gives {name} the default {row[1]!r}; shared/config.py has {default!r}")


def test_the_configuration_page_lists_no_variable_the_code_does_not_read():
    listed = set(configuration_table())
    assert listed >= set(ENV_VARS)  # the table was found and parsed
    assert listed - set(ENV_VARS) - NOT_READ_BY_BATON == set()


@pytest.mark.parametrize("path", markdown_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_documents_a_setting_of_an_earlier_design(path):
    for name in STALE_SETTINGS:
        assert name not in text(path), f"{path.relative_to(ROOT)} mentions {name}, which the code no longer reads"


@pytest.mark.parametrize("path", markdown_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_names_a_path_of_a_developers_machine(path):
    """A figure's command is quoted as anyone would run it from a clone: no
    scratch directory or script of the machine it happened to run on."""
    found = re.findall(r"(?<![\w.])/(?:work|tmp|home|root|Users)/[^\s`)]*", text(path))
    assert not found, f"{path.relative_to(ROOT)} names paths of a machine: {found[:5]}"


def test_the_benchmarks_page_holds_current_figures_in_under_250_lines():
    """The history of experiments lives in benchmarks-history.md (issue 32, item 7)."""
    page = ROOT / "docs" / "benchmarks.md"
    assert len(text(page).splitlines()) < 250
    assert "benchmarks-history.md" in text(page) and (ROOT / "docs" / "benchmarks-history.md").exists()


# ------------------------------------------------------------ the event log


@pytest.mark.parametrize("event", [str(e) for e in EventType])
def test_every_event_type_is_in_the_event_log_page(event):
    assert f"`{event}`" in text(EVENT_LOG)
    assert event in {code_name(row[0]) for row in table_rows(text(EVENT_LOG), "event")}


@pytest.mark.parametrize("field", sorted(EVENT_FIELDS))
def test_every_event_field_is_in_the_event_log_page(field):
    assert f"`{field}`" in text(EVENT_LOG)
    assert field in {code_name(row[0]) for row in table_rows(text(EVENT_LOG), "field")}


def test_the_event_log_page_lists_no_event_type_or_field_the_code_lacks():
    events = {code_name(row[0]) for row in table_rows(text(EVENT_LOG), "event")}
    fields = {code_name(row[0]) for row in table_rows(text(EVENT_LOG), "field")}
    assert events - {str(e) for e in EventType} == set()
    assert fields - set(EVENT_FIELDS) == set()


# ------------------------------------------------------------ the README


def test_the_readme_is_a_front_page_with_the_two_commands():
    readme = text(README_PATH)
    assert len(readme.splitlines()) < README_MAX_LINES
    assert "make demo" in readme and "make test" in readme
    lines = [line.strip() for line in readme.splitlines()]
    assert any(line.startswith("make demo") for line in lines), "the line that runs `make demo` is gone"
    assert any(line.startswith("make test") for line in lines), "the line that runs `make test` is gone"


def test_the_readme_links_every_docs_page():
    targets = {target.split("#")[0] for _, target in links(README_PATH)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in targets]
    assert missing == []


# ------------------------------------------------------------ links

_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition."""
    body = without_code(text(path))
    found = []
    for number, line in enumerate(body.splitlines(), start=1):
        found += [(number, m.group(1)) for m in _INLINE_LINK.finditer(line)]
        found += [(number, m.group(1)) for m in _REFERENCE_DEFINITION.finditer(line)]
    return found


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: the text without markdown (link
    targets, emphasis and code markers), lowercase, punctuation dropped
    (letters, digits, '_', '-' and spaces stay), each space a '-'."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    heading = heading.replace("`", "").strip().lower()
    heading = re.sub(r"[^\w\- ]", "", heading)
    return heading.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2, ... for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(without_fences(text(path))):
        slug = github_anchor(m.group(2))
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return out


def test_github_anchor_rules():
    assert github_anchor("Phases of a room") == "phases-of-a-room"
    assert github_anchor("Why each pipeline dependency is there (`requirements-pipeline.txt`)") == (
        "why-each-pipeline-dependency-is-there-requirements-pipelinetxt")
    assert github_anchor("In the cloud: `make report-cloud`") == "in-the-cloud-make-report-cloud"
    assert github_anchor("Invariants (`DESIGN.md`) and the tests that check them") == (
        "invariants-designmd-and-the-tests-that-check-them")


@pytest.mark.parametrize("path", markdown_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    broken = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"line {line}: {target} (no such file)")
        elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"line {line}: {target} (no heading #{anchor} in {dest.name})")
    assert broken == [], f"{path.relative_to(ROOT)}: " + "; ".join(broken)


# ------------------------------------------------------------ settings the docs promise


def test_config_rejects_a_send_timeout_not_below_the_ack_timeout(monkeypatch):
    monkeypatch.setenv("ACK_TIMEOUT_MS", "1000")
    monkeypatch.setenv("SEND_TIMEOUT_MS", "1000")
    with pytest.raises(ValueError, match="SEND_TIMEOUT_MS"):
        load()
    monkeypatch.setenv("SEND_TIMEOUT_MS", "abc")
    with pytest.raises(ValueError, match="not a whole number"):
        load()


def test_config_rejects_a_room_size_limit_over_firestores_1_mib(monkeypatch):
    monkeypatch.setenv("MAX_ROOM_BYTES", "1048577")
    with pytest.raises(ValueError, match="MAX_ROOM_BYTES"):
        load()
    monkeypatch.setenv("MAX_ROOM_BYTES", "1048576")
    assert load().max_room_bytes == 1_048_576


def test_the_architecture_page_shows_the_rulebook_as_the_code_has_it():
    from tools.docs.rulebook import DOC, updated

    assert updated(DOC.read_text()) == DOC.read_text(), "run: python -m tools.docs.rulebook"
