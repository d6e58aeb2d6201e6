"""The fake platform enforces a WhatsApp number's throughput (issue 33,
item 5): past `number_rate_per_s` sends in one second, 130429 and nothing
sent, per number; the limit of another number is its own."""

from __future__ import annotations

import time

from tools.sim.fake_platform.config import FakeConfig
from tools.sim.fake_platform.platform import FakeGraphApi

TOKEN = "t"


def send(fake: FakeGraphApi, phone_id: str, n: int) -> tuple[int | None, dict]:
    body = {"messaging_product": "whatsapp", "to": f"1555000{n:04d}", "type": "text", "text": {"body": "hi"},
            "biz_opaque_callback_data": f"{n}.1.0.k.room"}
    return fake.handle_send(phone_id, f"Bearer {TOKEN}", body)


def test_sends_past_a_numbers_rate_in_one_second_are_refused_with_130429_and_not_sent():
    fake = FakeGraphApi("http://127.0.0.1:9/", "secret", TOKEN,
                        FakeConfig(number_rate_per_s=3, ack_prob=0.0, fail_prob=0.0, duplicate_prob=0.0))
    answers = [send(fake, "PHONE-A", n) for n in range(5)]
    codes = [a[1].get("error", {}).get("code") if a[0] != 200 else 200 for a in answers]
    assert codes == [200, 200, 200, 130429, 130429]
    assert send(fake, "PHONE-B", 9)[0] == 200  # another number, its own second
    assert len(fake.sends) == 4 and fake.faults["throughput_error"] == 2


def test_a_send_is_counted_at_its_arrival_not_when_the_fakes_thread_gets_to_it():
    # Rate 1: two calls that arrived 1.05 s apart both go, whenever the fake's
    # threads handle them (the check once stamped its own now: a first call
    # handled 60 ms late made the second, handled at once, look 0.99 s after
    # it: 130429 for calls that were a second apart, `make demo-senders`).
    fake = FakeGraphApi("http://127.0.0.1:9/", "secret", TOKEN,
                        FakeConfig(number_rate_per_s=1, ack_prob=0.0, fail_prob=0.0, duplicate_prob=0.0))

    def at(n: int, received: float) -> int | None:
        body = {"messaging_product": "whatsapp", "to": f"1555000{n:04d}", "type": "text", "text": {"body": "hi"},
                "biz_opaque_callback_data": f"{n}.1.0.k.room"}
        return fake.handle_send("PHONE-A", f"Bearer {TOKEN}", body, received=received)[0]

    t0 = time.time()
    assert at(1, t0 - 1.05) == 200 and at(2, t0) == 200
    # One that arrived between them, handled last: a second holding it holds another.
    assert at(3, t0 - 0.5) == 400 and fake.faults["throughput_error"] == 1
    assert [round(r["received"] - t0, 2) for r in fake.throughput_refusals] == [-0.5]
    assert [s.received for s in fake.sends] == [t0 - 1.05, t0]
