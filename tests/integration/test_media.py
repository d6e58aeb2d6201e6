"""Media preparation and image sends: the WhatsApp adapter against the fake platform.

The fake platform (tools/sim/fake_platform/) runs as a subprocess on a free
port, in its own process group, stopped by its pid; its webhook URL has no
listener (its webhooks fail and are retried in the background). It serves the
files to fetch too (`/assets/...`). Each test uses its own recipients and
asset names; fault knobs are consumed by the upload they are for.

Must hold: an upload's media id is what the platform then takes in a send by
id, for that phone number only; every failure is classified permanent only
when trying again cannot help (missing, too large, wrong type, a Graph 4xx
refusal that is not a rate limit), transient otherwise; the upload waits for
the platform's answer.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.providers import Media, SendOutcome
from shared.providers.whatsapp import WhatsAppClient
from tests.conftest import fake_platform_process
from tools.local.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-access-token"
PHONE = "100000000000001"
OTHER_PHONE = "100000000000009"
QUIET = {"ack_prob": 1.0, "fail_prob": 0.0, "duplicate_prob": 0.0, "reorder_prob": 0.0, "ack_median_ms": 30.0,
         "ack_sigma": 0.0, "media_latency_ms": 0.0}
_numbers = itertools.count(15552000001)
_names = itertools.count(1)


def recipient() -> str:
    return str(next(_numbers))


def name(ext: str, prefix: str = "pic") -> str:
    return f"{prefix}-{next(_names)}.{ext}"


class FakePlatform:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def configure(self, values: dict[str, Any]) -> None:
        requests.post(f"{self.url}/_fake/config", json=values, timeout=5).raise_for_status()

    def stats(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/_fake/stats", timeout=5).json()

    def media(self) -> dict[str, Any]:
        return self.stats()["media"]

    def asset(self, filename: str, size: int | None = None) -> str:
        return f"{self.url}/assets/{filename}" + (f"?bytes={size}" if size is not None else "")

    def client(self, phone: str = PHONE, **kwargs: Any) -> WhatsAppClient:
        return WhatsAppClient(self.url, "v21.0", phone, TOKEN, 1000, **kwargs)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakePlatform]:
    with fake_platform_process(tmp_path_factory.mktemp("fake-media"), TOKEN, QUIET) as port:
        yield FakePlatform(port)


# ---------------------------------------------------------------- the happy path


@pytest.mark.parametrize(("ext", "mime"), [("png", "image/png"), ("jpg", "image/jpeg")])
def test_an_upload_returns_an_id_the_platform_then_takes_in_a_send_by_id(fake, ext, mime):
    before = fake.media()
    prepared = fake.client().prepare_media("image", fake.asset(name(ext)))
    assert prepared.ok and prepared.error is None and not prepared.permanent
    after = fake.media()
    assert after["uploads"] == before["uploads"] + 1
    assert prepared.media_id in after["media_ids"][PHONE]

    to = recipient()
    result = fake.client().send(to, "look at this", "d-1", Media("image", media_id=prepared.media_id))
    assert result.outcome is SendOutcome.ACCEPTED and result.provider_message_id
    sends = [s for s in fake.stats()["sends"] if s["recipient"] == to]
    assert [(s["kind"], s["media_id"], s["wamid"]) for s in sends] == [
        ("image", prepared.media_id, result.provider_message_id)]
    assert fake.media()["sends_by_media_id"] == before["sends_by_media_id"] + 1


def test_an_image_send_is_delivered_and_its_statuses_posted_like_a_text(fake):
    to = recipient()
    posted = fake.stats()["webhooks_posted"]
    result = fake.client().send(to, "", "d-2", Media("image", link=fake.asset(name("png"))))
    assert result.outcome is SendOutcome.ACCEPTED
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = fake.stats()
        on_device = [m["wamid"] for m in stats["device"].get(to, [])]
        if on_device and stats["webhooks_posted"] >= posted + 2:  # `sent`, then `delivered`
            break
        time.sleep(0.05)
    assert on_device == [result.provider_message_id]
    assert stats["webhooks_posted"] >= posted + 2
    assert stats["media"]["sends_by_link"] >= 1


def test_the_upload_waits_for_the_platforms_media_latency(fake):
    fake.configure({"media_latency_ms": 400.0})
    try:
        started = time.monotonic()
        prepared = fake.client().prepare_media("image", fake.asset(name("png")))
        elapsed = time.monotonic() - started
    finally:
        fake.configure({"media_latency_ms": 0.0})
    assert prepared.ok
    assert elapsed >= 0.4


# ---------------------------------------------------------------- sends the platform refuses


def test_a_send_by_an_unknown_media_id_is_refused_for_good(fake):
    before = fake.media()["unknown_media_id"]
    result = fake.client().send(recipient(), "c", "d-3", Media("image", media_id="999999999"))
    assert result.outcome is SendOutcome.REFUSED and result.permanent
    assert result.error_code == 100 and "not a valid whatsapp business account media attachment ID" in result.error_title
    assert fake.media()["unknown_media_id"] == before + 1


def test_a_media_id_works_only_for_the_phone_number_that_uploaded_it(fake):
    prepared = fake.client(OTHER_PHONE).prepare_media("image", fake.asset(name("png")))
    assert prepared.ok
    result = fake.client(PHONE).send(recipient(), "c", "d-4", Media("image", media_id=prepared.media_id))
    assert result.outcome is SendOutcome.REFUSED and result.permanent and result.error_code == 100
    again = fake.client(OTHER_PHONE).send(recipient(), "c", "d-5", Media("image", media_id=prepared.media_id))
    assert again.outcome is SendOutcome.ACCEPTED


# ---------------------------------------------------------------- upload failures


def test_an_upload_answered_500_is_transient_and_the_next_one_works(fake):
    fake.configure({"upload_http_5xx": 1})
    before = fake.media()
    failed = fake.client().prepare_media("image", fake.asset(name("png")))
    assert not failed.ok and not failed.permanent and "HTTP 500" in failed.error
    assert fake.media()["upload_http_5xx"] == before["upload_http_5xx"] + 1
    assert fake.media()["uploads"] == before["uploads"]
    assert fake.client().prepare_media("image", fake.asset(name("png"))).ok


@pytest.mark.parametrize(("code", "permanent"), [(130429, False), (4, False), (80007, False), (131053, True),
                                                 (100, True)])
def test_a_graph_error_on_upload_is_permanent_unless_it_is_a_rate_limit(fake, code, permanent):
    fake.configure({"upload_errors": [code]})
    result = fake.client().prepare_media("image", fake.asset(name("png")))
    assert not result.ok
    assert result.permanent is permanent
    assert f"error {code}" in result.error


def test_an_upload_answered_after_the_budget_is_transient(fake):
    fake.configure({"media_latency_ms": 1500.0})
    try:
        result = fake.client(media_timeout_ms=400).prepare_media("image", fake.asset(name("png")))
    finally:
        fake.configure({"media_latency_ms": 0.0})
    assert not result.ok and not result.permanent
    assert "uploading the media" in result.error


def test_a_file_the_platform_finds_too_large_is_refused_for_good(fake):
    fake.configure({"media_max_bytes": 1000})
    try:
        result = fake.client().prepare_media("image", fake.asset(name("png"), size=5000))
    finally:
        fake.configure({"media_max_bytes": 5 * 1024 * 1024})
    assert not result.ok and result.permanent and "File Too Large" in result.error


# ---------------------------------------------------------------- fetch failures


def test_a_file_over_the_clients_limit_is_refused_for_good_without_an_upload(fake):
    before = fake.media()["uploads"]
    result = fake.client(media_max_bytes=2000).prepare_media("image", fake.asset(name("png"), size=2001))
    assert not result.ok and result.permanent and "too large" in result.error
    assert fake.client(media_max_bytes=2000).prepare_media("image", fake.asset(name("png"), size=2000)).ok
    assert fake.media()["uploads"] == before + 1  # only the one within the limit


@pytest.mark.parametrize("ext", ["gif", "bin"])
def test_a_type_whatsapp_does_not_take_for_images_is_refused_for_good_without_an_upload(fake, ext):
    before = fake.media()
    result = fake.client().prepare_media("image", fake.asset(name(ext)))
    assert not result.ok and result.permanent and "is not one WhatsApp takes" in result.error
    after = fake.media()
    assert after["asset_fetches"] == before["asset_fetches"] + 1  # it was fetched, then refused
    assert after["uploads"] == before["uploads"]


def test_a_link_to_a_missing_file_is_permanent_and_an_unavailable_one_transient(fake):
    missing = fake.client().prepare_media("image", fake.asset(name("png", prefix="missing")))
    assert not missing.ok and missing.permanent and "HTTP 404" in missing.error
    unavailable = fake.client().prepare_media("image", fake.asset(name("png", prefix="unavailable")))
    assert not unavailable.ok and not unavailable.permanent and "HTTP 503" in unavailable.error


def test_a_link_nobody_answers_on_is_transient(fake):
    result = fake.client().prepare_media("image", f"http://127.0.0.1:{free_port()}/a.png")
    assert not result.ok and not result.permanent and "fetching the media failed" in result.error


# ---------------------------------------------------------------- the fake's wire format


def test_the_fake_media_endpoint_answers_graph_errors_for_a_bad_form(fake):
    url = f"{fake.url}/v21.0/{PHONE}/media"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    png = requests.get(fake.asset(name("png")), timeout=5).content
    missing = requests.post(url, headers=auth, data={"type": "image/png"},
                            files={"file": ("a.png", png, "image/png")}, timeout=5)
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == 100 and "messaging_product" in missing.json()["error"]["message"]
    gif = requests.post(url, headers=auth, data={"messaging_product": "whatsapp", "type": "image/gif"},
                        files={"file": ("a.gif", b"GIF87a", "image/gif")}, timeout=5)
    assert gif.status_code == 400 and "Received file of type 'image/gif'" in gif.json()["error"]["message"]
    unauthorized = requests.post(url, data={"messaging_product": "whatsapp", "type": "image/png"},
                                 files={"file": ("a.png", png, "image/png")}, timeout=5)
    assert unauthorized.status_code == 401
    ok = requests.post(url, headers=auth, data={"messaging_product": "whatsapp", "type": "image/png"},
                       files={"file": ("a.png", png, "image/png")}, timeout=5)
    assert ok.status_code == 200 and set(ok.json()) == {"id"}
