"""The operators' console in a real browser (issue 48): headless Chromium
(Debian's `chromium`, driven by Playwright for Python; never a downloaded
browser) against the session's emulator stack, through the stack's
`baton console` proxy, as an operator uses it.

Screenshots of each page go to BATON_SCREENSHOTS when it is set (`make
console-screenshots` sets docs/console, the pictures docs/console.md shows),
else to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.admin.identity import local_token
from tests.conftest import room_events, wait_for
from tools.local.publisher import OutboundMessage, Publisher
from tools.local.stack import PROJECT, TOPIC

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE_TIMEOUT_MS = 90_000  # the first overview builds the function's clients; a 2-core shared machine is slow

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=(
    "Chromium is not installed at /usr/bin/chromium: `make test` installs Debian's `chromium` "
    "(apt-get install -y chromium) and could not here; the console's browser tests did not run"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="baton-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                       args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("BATON_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def publish(room: str, message_id: str) -> None:
    Publisher(PROJECT, TOPIC).publish(
        OutboundMessage(room, "whatsapp", f"+1555{uuid.uuid4().int % 10**7:07d}", message_id, "hello")).result(60)


def ended(stack: Any, room: str, message_id: str) -> str | None:
    return next((e["event"] for e in room_events(stack, room) if e.get("message_id") == message_id
                 and e["event"] in ("acked", "failed", "timed_out", "dead_lettered", "skipped")), None)


def act(page: Any, action: str, reason: str, shot: Path | None = None) -> None:
    """Fill the action's reason, see its dry run, confirm it."""
    form = page.locator(f"form:has(#act-{action})")
    form.locator("input[name=reason]").fill(reason)
    form.locator(f"#act-{action}").click()
    page.wait_for_selector("#confirm")
    assert re.search(r"\d+ message\(s\) in \d+ room\(s\)", page.inner_text("#touch"))
    if shot is not None:
        page.screenshot(path=str(shot), full_page=True)
    page.click("#confirm")
    page.wait_for_selector("#done")


def test_an_operator_finds_a_room_by_message_id_pauses_it_and_resumes_it_in_the_browser(stack, browser, shots):
    room = f"console-{uuid.uuid4().hex[:8]}"
    first, second = f"{room}-m1", f"{room}-m2"
    publish(room, first)
    wait_for(lambda: ended(stack, room, first) == "acked", 60, "the first message acked")

    page = browser.new_page()
    page.goto(stack.console_url)
    assert page.inner_text("h1").startswith("Overview")
    assert page.locator("#counts a[href*='kind=paused']").count() == 1
    # The last hour: the first message's ack is counted, charted, and listed behind its link.
    assert page.locator("#chart rect").count() >= 1 and page.inner_text("#acked-share").endswith("%")
    page.screenshot(path=str(shots / "overview.png"), full_page=True)
    # Per sending number: the stack's WhatsApp number, counted, linking to its rooms (by room id).
    number_row = page.locator("#counts tr.per-number")
    assert number_row.count() >= 1 and re.search(r"in flight from WhatsApp number \d+\s+\d+", number_row.first.inner_text())
    number_row.first.locator("a").click()
    page.wait_for_selector("#rooms")
    assert page.inner_text("h2").startswith("Rooms sending from WhatsApp number ")
    page.goto(stack.console_url)
    page.click("#hour a[href$='outcome=acked']")
    page.wait_for_selector("#ended")
    assert page.locator("#ended a", has_text=room).count() >= 1
    page.goto(stack.console_url)
    operator = page.inner_text("#actor")

    # Find the room by its message id, from the search box on every page.
    page.fill("input[name=q]", first)
    page.press("input[name=q]", "Enter")
    page.wait_for_selector("#room")
    assert page.inner_text("#room") == room
    assert "acked" in page.inner_text("#messages")

    act(page, "pause", "console test: hold this room", shots / "confirm.png")
    assert f"by {operator}: console test: hold this room" in page.inner_text("#paused")

    # A message published now waits in the paused room: enqueued, never sent.
    publish(room, second)
    wait_for(lambda: any(e["event"] == "enqueued" and e.get("message_id") == second
                         for e in room_events(stack, room)), 60, "the second message enqueued")
    time.sleep(2.0)
    assert not any(e["event"] == "sent" and e.get("message_id") == second for e in room_events(stack, room))
    page.click("#refresh")
    assert "1" in page.inner_text("#queued") and second in page.inner_text("#queued")
    page.screenshot(path=str(shots / "room-paused.png"), full_page=True)

    # The paused listing names it, with who paused it, and links back to it.
    page.goto(stack.console_url + "rooms?kind=paused")
    row = page.locator("#rooms tr", has_text=room)
    assert row.count() == 1 and f"by {operator}" in row.inner_text()
    page.screenshot(path=str(shots / "rooms.png"), full_page=True)
    row.locator("a").click()
    page.wait_for_selector("#room")

    act(page, "resume", "console test: done holding")
    wait_for(lambda: ended(stack, room, second) == "acked", 60, "the second message acked after the resume")

    def delivered_in_timeline() -> bool:
        page.click("#refresh")
        row = page.locator("#messages tr", has_text=second)
        return row.count() == 1 and "acked" in row.inner_text()

    wait_for(delivered_in_timeline, 30, "the timeline showing the second message acked")
    timeline = page.inner_text("#timeline")
    # The operator's actions are in the room's timeline, with the verified identity.
    for event in ("paused", "resumed"):
        line = next(row for row in timeline.splitlines() if f"\t{event}\t" in row)
        assert operator in line
    page.screenshot(path=str(shots / "room.png"), full_page=True)
    page.close()


def test_a_request_without_a_valid_identity_or_a_post_without_the_csrf_token_is_refused(stack, room_id):
    publish(room_id, f"{room_id}-m1")
    wait_for(lambda: ended(stack, room_id, f"{room_id}-m1"), 60, "the message ended")
    admin = stack.url("admin") + "console/"
    assert requests.get(admin, timeout=30).status_code == 401  # no token: the browser without the proxy
    forged = local_token("not-the-stacks-key", "mallory@example.com")
    assert requests.get(admin, headers={"Authorization": f"Bearer {forged}"}, timeout=30).status_code == 401
    form = {"action": "pause", "room": room_id, "reason": "csrf", "step": "confirm"}
    r = requests.post(admin, data=form, headers={"Authorization": f"Bearer {forged}"}, timeout=30)
    assert r.status_code == 401
    # Through the proxy (an operator's identity), but without the form's token:
    # what another web page could make the operator's browser send.
    r = requests.post(stack.console_url + "act", data=form, timeout=60, allow_redirects=False)
    assert r.status_code == 403 and "CSRF" in r.text
    r = requests.post(stack.console_url + "act", data={**form, "csrf": "1999999999.00"}, timeout=60,
                      allow_redirects=False)
    assert r.status_code == 403
    assert not any(e["event"] == "paused" for e in room_events(stack, room_id))


def test_an_operator_pauses_and_resumes_several_rooms_at_once_each_timeline_naming_them(stack, browser, shots):
    rooms = [f"bulk-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for room in rooms:
        publish(room, f"{room}-m1")
    for room in rooms:
        wait_for(lambda room=room: ended(stack, room, f"{room}-m1") == "acked", 60, "each room's message acked")

    page = browser.new_page()
    page.goto(stack.console_url + "rooms?kind=paused&fresh=1")
    operator = page.inner_text("#actor")
    form = page.locator("form#bulk")
    form.locator("textarea[name=rooms]").fill("\n".join(rooms))
    form.locator("select[name=bulk_action]").select_option("pause")
    form.locator("input[name=reason]").fill("console test: hold both")
    page.click("#bulk-preview")
    page.wait_for_selector("#confirm")
    assert page.inner_text("#touch") == "0 message(s) in 2 room(s)"  # idle rooms: nothing held, both paused
    page.screenshot(path=str(shots / "bulk-confirm.png"), full_page=True)
    page.click("#confirm")
    page.wait_for_selector("#bulk")
    assert operator in page.inner_text("#touch")

    # Both are on the paused list now; tick them there and resume them.
    page.goto(stack.console_url + "rooms?kind=paused&fresh=1")
    for room in rooms:
        page.locator("#rooms tr", has_text=room).locator("input[type=checkbox]").check()
    form = page.locator("form#bulk")
    form.locator("select[name=bulk_action]").select_option("resume")
    form.locator("input[name=reason]").fill("console test: release both")
    page.click("#bulk-preview")
    page.wait_for_selector("#confirm")
    assert page.inner_text("#touch") == "0 message(s) in 2 room(s)"
    page.click("#confirm")
    page.wait_for_selector("#bulk")
    for room in rooms:  # each room's timeline has both actions, with the operator's identity and reason
        kinds = {e["event"]: e for e in room_events(stack, room) if e.get("actor")}
        assert kinds["paused"]["actor"] == operator and kinds["paused"]["reason"] == "console test: hold both"
        assert kinds["resumed"]["actor"] == operator
    page.close()
