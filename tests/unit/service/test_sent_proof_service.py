"""WHATSAPP_SENT_PROOF through the webhook over the in-memory fakes (issue 31,
item 2): when on, a `sent` status of one of our numbers records its attempt
as taken (one read of its room, then one blind write with the number it
names) when the attempt's send outcome is not known to be accepted, so an
attempt whose send outcome was unknown is held as sent; for an attempt whose
send returned accepted (the normal path), when off, or from a number this
deployment does not send from, nothing is written; a read or write that
fails costs the proof only, never the other statuses of the same post."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from shared import config
from shared.providers.whatsapp import sign
from shared.room import Phase, make_delivery_id
from shared.senders import rendezvous_sender
from shared.service import DeliveryService, ServiceCore
from shared.service.core import TimerArmFailed
from shared.service.webhook import SENT_PROOF_CALL_S
from tests.fakes import FakeStatusQueue
from tests.unit.service.test_faults import SECRET, push_body, timer_body
from tests.unit.service.test_sender_service import NUMBERS, three_numbers


def statuses(*items: tuple[str, str, str]) -> bytes:
    """A WhatsApp webhook with one change per (delivery id, status, number)."""
    changes = [{"field": "messages", "value": {
        "messaging_product": "whatsapp", "metadata": {"display_phone_number": "15550000000", "phone_number_id": number},
        "statuses": [{"id": f"wamid.{i}", "status": status, "timestamp": "1700000000", "recipient_id": "15550001",
                      "biz_opaque_callback_data": delivery_id}]}} for i, (delivery_id, status, number) in enumerate(items)]
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": changes}]}).encode()


def rooms_with_a_send(proof: str, outcomes: dict[str, str | None]):
    """Rooms each with its first send made: `outcomes[room]` is the fake
    platform's fault for it ("unknown_reached": the platform took it, the
    answer was lost; None: accepted); the world, service, platforms and each
    room's delivery id."""
    world, service, platforms = three_numbers()
    world.settings = dataclasses.replace(world.settings, whatsapp_sent_proof=proof)
    service.core.settings = world.settings
    ids = {}
    for i, (room, outcome) in enumerate(outcomes.items()):
        if outcome is not None:
            platforms[rendezvous_sender(room, NUMBERS)].fail_next_send(outcome)
        assert service.handle_push(push_body(room, "m1", "15550001", "hi", f"p{i}",
                                             world.clock.now_us())).status == 200
        state = world.store.load_room(room)
        # Accepted: SENDING until its timer, which carries the acceptance, fires (issue 46).
        assert state.in_flight.phase is (Phase.SENDING if outcome is None else Phase.UNKNOWN)
        ids[room] = make_delivery_id(room, state.incarnation, 1, 1, state.in_flight.started_at_us)
    return world, service, platforms, ids


def unknown_room(proof: str, room: str = "room-p", outcome: str | None = "unknown_reached"):
    """A room whose first send had an unknown outcome, the platform having
    taken it (`outcome=None`: the send returned accepted); the world,
    service and its delivery id."""
    world, service, _, ids = rooms_with_a_send(proof, {room: outcome})
    return world, service, ids[room]


def counting(monkeypatch, store, name: str) -> list[tuple]:
    """Record each call of `store.name` (args), still calling it."""
    calls: list[tuple] = []
    real = getattr(store, name)

    def wrapper(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(store, name, wrapper)
    return calls


def post(world, service, body: bytes) -> int:
    return service.handle_status_webhook(body, sign(body, SECRET)).status


@pytest.mark.parametrize("proof, phase", [("on", Phase.SENT), ("off", Phase.UNKNOWN)])
def test_a_sent_status_holds_an_unknown_attempt_as_sent_only_when_the_switch_is_on(proof, phase):
    world, service, delivery_id = unknown_room(proof)
    number = rendezvous_sender("room-p", NUMBERS)
    assert post(world, service, statuses((delivery_id, "sent", number))) == 200
    assert world.store.load_room("room-p").in_flight.phase is phase
    echoes = world.store.docs["room-p"].get("echoes") or {}
    assert [e.get("num") for e in echoes.values()] == ([number] if proof == "on" else [])


def seams_of(service: DeliveryService) -> dict[str, Any]:
    """`service`'s clock, arm-retry sleep and rules: another instance of the
    same world (`DeliveryService`'s keyword arguments)."""
    core = service.core
    return {"clock": core.clock, "sleep": core.sleep, "decide": core.decide}


def another_instance(service: DeliveryService) -> DeliveryService:
    """A second function instance of the same deployment: same store,
    timers, platforms and log, its own memory."""
    return DeliveryService(ServiceCore(service.settings, service.policy, service.store, service.timers,
                                       service.senders, service.events, **seams_of(service)))


def test_a_sent_status_of_an_attempt_whose_send_returned_accepted_costs_another_instance_a_read_and_its_echo(
        monkeypatch):
    """The acceptance rides on the attempt's timer (issue 46): until it fires
    the room shows the attempt SENDING, so another instance's unsettled
    `sent` proof writes its echo (the platform's record: it also covers a
    crash between the send and the arm). The room stays SENDING."""
    world, service, delivery_id = unknown_room("on", outcome=None)
    reads = counting(monkeypatch, world.store, "read_room")
    assert post(world, another_instance(service),
                statuses((delivery_id, "sent", rendezvous_sender("room-p", NUMBERS)))) == 200
    assert reads == [("room-p",)]  # the proof's one read
    assert len(world.store.docs["room-p"].get("echoes") or {}) == 1
    state = world.store.load_room("room-p")
    assert state.in_flight.phase is Phase.SENDING and state.in_flight.platform_ts_us is not None


def test_a_sent_status_of_an_attempt_this_instance_saw_accepted_writes_its_echo_too(monkeypatch):
    """The instance that made the send does not settle it either: its timer,
    carrying the acceptance, may be lost or late, and the watchdog then
    wakes the attempt SENDING; only the echo makes that a timeout, not a
    resend (with the attempt settled at its arm, `make chaos` counted 188
    duplicates in 10,188 sends, 185 after a status of the earlier attempt)."""
    world, service, delivery_id = unknown_room("on", outcome=None)
    reads = counting(monkeypatch, world.store, "read_room")
    assert post(world, service, statuses((delivery_id, "sent", rendezvous_sender("room-p", NUMBERS)))) == 200
    assert reads == [("room-p",)]
    assert len(world.store.docs["room-p"].get("echoes") or {}) == 1
    state = world.store.load_room("room-p")
    assert state.in_flight.phase is Phase.SENDING and state.in_flight.platform_ts_us is not None


def busy_instance(world, service) -> DeliveryService:
    """Another instance that has just had a post: its next `sent` proofs wait."""
    other = another_instance(service)
    assert post(world, other, statuses()) == 200
    return other


def test_while_posts_keep_coming_a_sent_status_waits_and_its_ack_settles_it_without_a_read(monkeypatch):
    world, service, delivery_id = unknown_room("on")
    reads = counting(monkeypatch, world.store, "read_room")
    number = rendezvous_sender("room-p", NUMBERS)
    other = busy_instance(world, service)
    assert post(world, other, statuses((delivery_id, "sent", number))) == 200
    assert reads == [] and other.sent_proofs.pending() == 1
    assert post(world, other, statuses((delivery_id, "delivered", number))) == 200
    world.clock.advance_to_us(world.clock.now_us() + world.policy.send_timeout_ms * 1000)
    assert post(world, other, statuses()) == 200
    assert reads == [] and other.sent_proofs.pending() == 0
    assert world.store.load_room("room-p").counts == {"acked": 1}


def queued_instance(service: DeliveryService) -> DeliveryService:
    """A webhook instance of the same deployment in WEBHOOK_MODE=queued: it
    publishes the statuses to a status queue no `status` function reads yet
    (an ack queued, not applied), and has just had a post (its `sent`
    proofs wait)."""
    settings = dataclasses.replace(service.settings, webhook_mode="queued")
    queue = FakeStatusQueue()
    other = DeliveryService(ServiceCore(settings, service.policy, service.store, service.timers,
                                        service.senders, service.events, status_queue=lambda: queue, **seams_of(service)))
    other.published = queue.published  # type: ignore[attr-defined]
    return other


@pytest.mark.parametrize("ack", ["delivered", "read", "failed"])
def test_in_queued_mode_a_status_only_queued_does_not_settle_the_sent_proof_of_its_attempt(ack):
    # The `delivered` is published, not applied: until the `status` function
    # applies it (seconds later, or much later if its push is redelivered),
    # the room still holds the attempt as UNKNOWN and would resend it at its
    # ack deadline. The `sent` proof must still reach the room before that.
    world, service, delivery_id = unknown_room("on")
    number = rendezvous_sender("room-p", NUMBERS)
    webhook = queued_instance(service)
    assert post(world, webhook, statuses()) == 200  # busy: the next `sent` waits
    assert post(world, webhook, statuses((delivery_id, "sent", number))) == 200
    assert post(world, webhook, statuses((delivery_id, ack, number))) == 200
    assert [[s.status for s in b.statuses] for b in webhook.published] == [[ack]]  # queued only
    flight = world.store.load_room("room-p").in_flight
    assert flight.message.seq == 1 and world.store.load_room("room-p").counts == {}  # not applied
    world.clock.advance_to_us(flight.started_at_us + world.policy.send_timeout_ms * 1000)
    assert world.clock.now_us() < flight.deadline_us  # before the resend
    assert post(world, webhook, statuses()) == 200
    # Proven in the room before its deadline: held as sent, not resent.
    assert world.store.load_room("room-p").in_flight.platform_ts_us is not None
    assert webhook.sent_proofs.pending() == 0


def test_in_direct_mode_an_ack_whose_post_failed_does_not_settle_the_sent_proof_of_its_attempt(monkeypatch):
    # The `delivered` post answers 503 (its room's transaction failed): the
    # platform sends it again later, maybe past the room's ack deadline. The
    # waiting `sent` proof must still reach the room before that deadline.
    world, service, delivery_id = unknown_room("on")
    number = rendezvous_sender("room-p", NUMBERS)
    other = busy_instance(world, service)
    assert post(world, other, statuses((delivery_id, "sent", number))) == 200
    assert other.sent_proofs.pending() == 1  # waits for its ack

    def unavailable(*args, **kwargs):
        raise gexc.ServiceUnavailable("Firestore is away")
    with monkeypatch.context() as m:
        m.setattr(world.store, "apply", unavailable)
        with pytest.raises(gexc.ServiceUnavailable):
            post(world, other, statuses((delivery_id, "delivered", number)))
    flight = world.store.load_room("room-p").in_flight
    assert flight.phase is Phase.UNKNOWN  # the ack was not applied
    world.clock.advance_to_us(flight.started_at_us + world.policy.send_timeout_ms * 1000)
    assert world.clock.now_us() < flight.deadline_us
    assert post(world, other, statuses()) == 200
    assert world.store.load_room("room-p").in_flight.platform_ts_us is not None  # proven before the resend


def test_a_waiting_sent_status_still_unsettled_is_proven_by_the_first_post_after_its_due_time(monkeypatch):
    world, service, delivery_id = unknown_room("on")
    number = rendezvous_sender("room-p", NUMBERS)
    other = busy_instance(world, service)
    assert post(world, other, statuses((delivery_id, "sent", number))) == 200
    assert world.store.load_room("room-p").in_flight.phase is Phase.UNKNOWN  # not yet
    started = world.store.load_room("room-p").in_flight.started_at_us
    due = started // 1000 * 1000 + world.policy.send_timeout_ms * 1000
    # Before the earliest resend: ACK_TIMEOUT_MS after the send returned.
    assert due < world.store.load_room("room-p").in_flight.deadline_us
    world.clock.advance_to_us(due)
    assert post(world, other, statuses()) == 200
    assert world.store.load_room("room-p").in_flight.phase is Phase.SENT


def test_a_sent_status_repeated_in_one_post_reads_and_writes_its_room_once(monkeypatch):
    world, service, delivery_id = unknown_room("on")
    reads = counting(monkeypatch, world.store, "read_room")
    writes = counting(monkeypatch, world.store, "record_echo")
    number = rendezvous_sender("room-p", NUMBERS)
    assert post(world, service, statuses((delivery_id, "sent", number), (delivery_id, "sent", number))) == 200
    assert (len(reads), len(writes)) == (1, 1)
    assert world.store.load_room("room-p").in_flight.phase is Phase.SENT


def test_a_sent_status_while_the_send_has_no_recorded_outcome_makes_it_time_out_not_resend():
    # The send was accepted but its timer, which would carry the acceptance,
    # could not be armed (the push answers 503), and the blind write of the
    # acceptance that replaces it (`accept_blind`) failed too; Pub/Sub's
    # redelivery re-arms the timer by the same name, without the acceptance
    # (issue 46). The room holds the attempt as SENDING; its `sent` status,
    # which no instance settles, proves it, and past its hold it times out.
    world, service, platforms = three_numbers()
    number = rendezvous_sender("room-s", NUMBERS)
    world.timers.fail_next_arm(times=3)
    world.store.fail_next_accept()
    body = push_body("room-s", "m1", "15550001", "hi", "p1", world.clock.now_us())
    with pytest.raises(TimerArmFailed):
        service.handle_push(body)
    assert not world.timers.tasks
    assert service.handle_push(body).status == 200  # the redelivery re-arms
    assert [t.timer.accepted_deadline_us for t in world.timers.tasks] == [None]
    state = world.store.load_room("room-s")
    assert state.in_flight.phase is Phase.SENDING
    delivery_id = make_delivery_id("room-s", state.incarnation, 1, 1, state.in_flight.started_at_us)
    assert post(world, service, statuses((delivery_id, "sent", number))) == 200
    assert world.store.load_room("room-s").in_flight.platform_ts_us is not None
    policy = world.policy
    hold_until = state.in_flight.started_at_us + (policy.send_window_ms + policy.ack_timeout_ms) * 1000
    world.clock.advance_to_us(hold_until + 1000)
    for task in world.timers.due():
        service.handle_timer(json.dumps(timer_body(task.timer)).encode())
    assert world.store.load_room("room-s").counts == {"timed_out": 1}
    assert len(platforms[number].calls) == 1  # not sent a second time


def test_a_sent_status_of_a_number_we_do_not_send_from_writes_nothing():
    world, service, delivery_id = unknown_room("on")
    assert post(world, service, statuses((delivery_id, "sent", "2009"))) == 200
    assert not world.store.docs["room-p"].get("echoes")
    assert world.store.load_room("room-p").in_flight.phase is Phase.UNKNOWN


@pytest.mark.parametrize("failing", ["read_room", "record_echo"])
def test_a_proof_that_cannot_be_read_or_written_does_not_hold_back_the_other_statuses_of_the_post(monkeypatch,
                                                                                                   failing):
    world, service, platforms, ids = rooms_with_a_send("on", {"room-p": "unknown_reached",
                                                              "room-q": "unknown_reached"})
    calls = []

    def unavailable(*args, **kwargs):
        calls.append(kwargs["deadline_s"])
        raise gexc.ServiceUnavailable("Firestore is away")
    monkeypatch.setattr(world.store, failing, unavailable)
    body = statuses((ids["room-p"], "sent", rendezvous_sender("room-p", NUMBERS)),
                    (ids["room-q"], "sent", rendezvous_sender("room-q", NUMBERS)),
                    (ids["room-q"], "delivered", rendezvous_sender("room-q", NUMBERS)))
    assert post(world, service, body) == 200
    assert world.store.load_room("room-q").counts == {"acked": 1}
    assert world.store.load_room("room-p").in_flight.phase is Phase.UNKNOWN  # only the proof was lost
    # One try within the proof's budget, and no further proof in this post:
    # a webhook's answer must not wait out Firestore's outage once per room.
    assert calls == [SENT_PROOF_CALL_S]


def test_a_room_document_that_does_not_parse_costs_its_proof_not_a_500_for_the_post():
    world, service, platforms, ids = rooms_with_a_send("on", {"room-p": "unknown_reached", "room-q": None})
    world.store.docs["room-p"]["in_flight"] = {"phase": "sending"}  # no message: room_as_read raises
    body = statuses((ids["room-p"], "sent", rendezvous_sender("room-p", NUMBERS)),
                    (ids["room-q"], "delivered", rendezvous_sender("room-q", NUMBERS)))
    assert post(world, service, body) == 200
    assert world.store.load_room("room-q").counts == {"acked": 1}
    assert not world.store.docs["room-p"].get("echoes")


def test_the_switch_takes_only_on_or_off(monkeypatch):
    monkeypatch.setenv("WHATSAPP_SENT_PROOF", "yes")
    with pytest.raises(ValueError, match="WHATSAPP_SENT_PROOF"):
        config.load()


def test_the_deployed_default_holds_an_unknown_attempt_as_sent():
    """The default configuration, not a switch set here: flipping the
    default of WHATSAPP_SENT_PROOF fails this (issue 43)."""
    world, service, delivery_id = unknown_room(config.ENV_VARS["WHATSAPP_SENT_PROOF"][0])
    assert post(world, service, statuses((delivery_id, "sent", rendezvous_sender("room-p", NUMBERS)))) == 200
    assert world.store.load_room("room-p").in_flight.phase is Phase.SENT
