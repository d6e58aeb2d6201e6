"""The console's bulk form, read into a `rooms.bulk` request and written
back as the confirm form's hidden fields (shared/console/app.py,
POST /console/bulk; the action itself: shared/admin/bulk.py).

The form is plain HTML, no script: each room ticked on a list page is a
checkbox `pick.N` whose value is the room id (distinct names, as the
function hands the console a form of single values), rooms may also be
pasted one a line into `rooms`, or a whole listing named by `kind` (with
`limit`). The confirm form carries the rooms as `rooms` lines and, for a
skip, the seqs the dry run showed as `seqs` lines (`room id<TAB>seq`), so
the confirmed run skips what the operator saw.
"""

from __future__ import annotations

from typing import Any

from shared.admin.bulk import BULK_ACTIONS, BULK_MAX

LISTINGS = ("stuck", "lag", "paused", "parked")


def bulk_request(form: dict[str, str]) -> dict[str, Any] | str:
    """The `rooms.bulk` arguments of a bulk form (without `dry_run`), or
    what is wrong with it (a sentence for the operator)."""
    action = form.get("bulk_action") or ""
    if action not in BULK_ACTIONS:
        return f"choose an action: one of {', '.join(BULK_ACTIONS)}"
    reason = (form.get("reason") or "").strip()
    if not reason:
        return "every action asks why: fill in the reason"
    picked = [v.strip() for k, v in sorted(form.items()) if k.startswith("pick.") and v.strip()]
    pasted = [line.strip() for line in (form.get("rooms") or "").splitlines() if line.strip()]
    rooms = list(dict.fromkeys(picked + pasted))
    kind = (form.get("kind") or "").strip()
    request: dict[str, Any] = {"action": action, "reason": reason}
    if rooms and kind:
        return "either tick or paste rooms, or name a whole list, not both"
    if kind:
        if kind not in LISTINGS:
            return f"kind must be one of {', '.join(LISTINGS)}"
        limit = form.get("limit") or "100"
        if not limit.isdigit() or not 1 <= int(limit) <= BULK_MAX:
            return f"limit must be a whole number from 1 to {BULK_MAX}"
        request.update(kind=kind, limit=int(limit))
    elif rooms:
        if len(rooms) > BULK_MAX:
            return f"at most {BULK_MAX} rooms at once"
        request["rooms"] = rooms
    else:
        return "tick some rooms, paste their ids, or name a list"
    seqs: dict[str, int] = {}
    for line in (form.get("seqs") or "").splitlines():
        room, _, seq = line.rpartition("\t")
        if room and seq.isdigit():
            seqs[room] = int(seq)
    if seqs:
        request["seqs"] = seqs
    return request


def bulk_hidden(request: dict[str, Any], result: dict[str, Any]) -> dict[str, str]:
    """The confirm form's fields for `request` after its dry run `result`:
    the rooms the dry run listed (a listing becomes its rooms as they were
    then), and for a skip each room's seq."""
    rows = result.get("per_room") or []
    hidden = {"bulk_action": str(request["action"]), "reason": str(request["reason"]),
              "rooms": "\n".join(str(r["room_id"]) for r in rows)}
    if request["action"] == "skip":
        hidden["seqs"] = "\n".join(f"{r['room_id']}\t{r['seq']}" for r in rows if r.get("seq") is not None)
    return hidden
