"""The outbox never takes a room document past Firestore's 1 MiB limit
(shared/outbox.py `fitted`; the emulator check is
tests/integration/test_store.py's room filled to the limit)."""

from __future__ import annotations

from shared import docsize, outbox

PATH = "rooms/room-1"


def _doc(filler_bytes: int) -> dict[str, object]:
    return {"pending": "x" * filler_bytes, outbox.OUTBOX: {"wabc": [{"event": "enqueued", "seq": 1, "room_id": "room-1"}]}}


def test_a_write_that_fits_keeps_its_outbox_entry():
    doc = _doc(1000)
    assert outbox.fitted(PATH, doc) is doc


def test_a_write_the_entry_would_take_past_1_mib_goes_without_it_and_then_fits():
    without_entry = docsize.document_size(PATH, {**_doc(0), outbox.OUTBOX: {}})
    doc = _doc(docsize.MAX_DOCUMENT_BYTES - without_entry - 1)  # the room alone just fits; with its entry it does not
    assert docsize.document_size(PATH, doc) > docsize.MAX_DOCUMENT_BYTES
    written = outbox.fitted(PATH, doc)
    assert written[outbox.OUTBOX] == {} and written["pending"] == doc["pending"]
    assert docsize.document_size(PATH, written) <= docsize.MAX_DOCUMENT_BYTES
