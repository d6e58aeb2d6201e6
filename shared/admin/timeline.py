"""Where a room's delivery events are read from: one small port, two readers.

The delivery event log (docs/event-log.md) holds every transition of every
room, operator actions included (with the verified `actor`); it never holds
message text. The console's room timeline and its search by message id read
it through `EventLogReader`:

- `LocalEventLog`: the local stack's EVENT_LOG_PATH (JSON lines). It keeps a
  small index (room id -> byte offsets of its lines; message id -> room ids)
  that it extends from where it stopped at each call, so a lookup reads only
  the lines written since the last one, then the room's own lines.
- `CloudLoggingEventLog`: Cloud Logging's entries.list
  (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list)
  over the project's `baton.delivery` lines (roles/logging.viewer, granted
  to the admin function in infra/admin.tf). Thin: one request per call.

Both also answer `last_events`, so either is the `EventSource` of
`shared.operators.Operators` (`baton rooms show`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from shared.admin.recent import LATEST, OUTCOMES, WINDOW_S, RecentActivity
from shared.operators import LOGGING_LIST_URL

DELIVERY_LOG_TYPE = "baton.delivery"
# The cloud reader's last hour: at most this many entries.list pages of 1,000 lines.
RECENT_PAGES = 5


class EventLogReader(Protocol):
    """The port: a room's last events, and the rooms a message id was seen in."""

    def last_events(self, room_id: str, n: int) -> list[dict[str, Any]]:
        """The room's last `n` delivery events (dicts as logged), oldest first."""
        ...

    def rooms_with_message(self, message_id: str, n: int) -> list[str]:
        """Ids of at most `n` rooms whose events name `message_id` (a
        message id is unique per room only), most recent first."""
        ...

    def recent(self, now_us: int) -> dict[str, Any]:
        """The last hour before `now_us` (epoch us): outcomes and hand-over
        latency per bucket (`RecentActivity.summary`), with `sampled`."""
        ...

    def ended(self, outcome: str, now_us: int, provider: str | None = None) -> list[dict[str, Any]]:
        """The last hour's newest endings with `outcome`, newest first (`RecentActivity.latest`)."""
        ...


@dataclass
class LocalEventLog:
    """The local stack's event log file, indexed as it grows (module docstring).

    Args:
        path: EVENT_LOG_PATH. A file that shrank (rewritten) is indexed anew.
    """

    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _offset: int = 0
    _by_room: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _by_message: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _recent: RecentActivity = field(default_factory=RecentActivity, repr=False)

    def _catch_up(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < self._offset:
            self._offset, self._by_room, self._by_message, self._recent = 0, {}, {}, RecentActivity()
        if size == self._offset:
            return
        with self.path.open("rb") as fh:
            fh.seek(self._offset)
            pos = self._offset
            for line in fh:
                if not line.endswith(b"\n"):  # a line still being written: next time
                    break
                start, pos = pos, pos + len(line)
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                room = event.get("room_id") if isinstance(event, dict) else None
                if not isinstance(room, str):
                    continue
                self._by_room.setdefault(room, []).append(start)
                self._recent.add(event)
                message = event.get("message_id")
                if isinstance(message, str):
                    rooms = self._by_message.setdefault(message, [])
                    if room in rooms:
                        rooms.remove(room)
                    rooms.append(room)
            self._offset = pos

    def last_events(self, room_id: str, n: int) -> list[dict[str, Any]]:
        with self._lock:
            self._catch_up()
            offsets = self._by_room.get(room_id, [])[-n:] if n > 0 else []
        out: list[dict[str, Any]] = []
        if offsets:
            with self.path.open("rb") as fh:
                for off in offsets:
                    fh.seek(off)
                    try:
                        out.append(json.loads(fh.readline()))
                    except ValueError:
                        continue
        out.sort(key=lambda e: e.get("ts") or "")
        return out

    def rooms_with_message(self, message_id: str, n: int) -> list[str]:
        with self._lock:
            self._catch_up()
            return list(reversed(self._by_message.get(message_id, [])))[:n]

    def recent(self, now_us: int) -> dict[str, Any]:
        """The last hour's outcomes and hand-over latency (shared/admin/recent.py), every line counted."""
        with self._lock:
            self._catch_up()
            return {**self._recent.summary(now_us), "sampled": False}

    def ended(self, outcome: str, now_us: int, provider: str | None = None) -> list[dict[str, Any]]:
        """The last hour's newest endings with `outcome` (`RecentActivity.latest`)."""
        with self._lock:
            self._catch_up()
            return self._recent.latest(outcome, now_us, provider)


@dataclass
class CloudLoggingEventLog:
    """The delivery events in Cloud Logging (module docstring).

    Raises (from each call): google.auth.exceptions.DefaultCredentialsError
    without credentials; requests.HTTPError when Cloud Logging refuses.
    """

    project: str
    _session: Any = field(default=None, repr=False)

    def _entries(self, flt: str, n: int, page_token: str | None = None) -> list[dict[str, Any]]:
        return self._page(flt, n, page_token)[0]

    def _page(self, flt: str, n: int, page_token: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/logging.read"])
            self._session = AuthorizedSession(credentials)
        body = {"resourceNames": [f"projects/{self.project}"], "orderBy": "timestamp desc", "pageSize": n,
                "filter": f'jsonPayload.log_type="{DELIVERY_LOG_TYPE}" AND {flt}',
                **({"pageToken": page_token} if page_token else {})}
        r = self._session.post(LOGGING_LIST_URL, json=body, timeout=30)
        r.raise_for_status()
        answer = r.json()
        return [e["jsonPayload"] for e in answer.get("entries", []) if "jsonPayload" in e], answer.get("nextPageToken")

    def last_events(self, room_id: str, n: int) -> list[dict[str, Any]]:
        if n <= 0:
            return []
        return list(reversed(self._entries(f"jsonPayload.room_id={json.dumps(room_id)}", n)))

    def rooms_with_message(self, message_id: str, n: int) -> list[str]:
        rooms: list[str] = []
        for e in self._entries(f"jsonPayload.message_id={json.dumps(message_id)}", 100):
            room = e.get("room_id")
            if isinstance(room, str) and room not in rooms:
                rooms.append(room)
        return rooms[:n]

    def recent(self, now_us: int) -> dict[str, Any]:
        """The last hour's outcomes and hand-over latency (shared/admin/recent.py)
        from the newest RECENT_CAP terminal and hand-over lines (RECENT_PAGES
        requests of 1,000); `sampled` when there were more (then the older
        buckets are short)."""
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_us / 1e6 - WINDOW_S))
        outcomes = " OR ".join(f'"{o}"' for o in OUTCOMES)
        flt = (f'timestamp>="{since}" AND (jsonPayload.event=({outcomes}) OR '
               f'(jsonPayload.event="sent" AND jsonPayload.trigger_to_send_ms>=0))')
        activity, token, pages = RecentActivity(), None, 0
        while pages < RECENT_PAGES:
            entries, token = self._page(flt, 1000, token)
            pages += 1
            for e in entries:
                activity.add(e)
            if not token:
                break
        return {**activity.summary(now_us), "sampled": bool(token)}

    def ended(self, outcome: str, now_us: int, provider: str | None = None) -> list[dict[str, Any]]:
        """The last hour's newest endings with `outcome` (at most LATEST), of `provider` if given."""
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_us / 1e6 - WINDOW_S))
        flt = f'timestamp>="{since}" AND jsonPayload.event={json.dumps(outcome)}'
        if provider is not None:
            flt += f" AND jsonPayload.provider={json.dumps(provider)}"
        activity = RecentActivity()
        for e in reversed(self._entries(flt, LATEST)):
            activity.add(e)
        return activity.latest(outcome, now_us, provider)


# ---------------------------------------------------------------- the timeline

# Events that end a message (its outcome).
ENDING = ("acked", "failed", "timed_out", "dead_lettered", "skipped")


def timeline(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A room's events as the console shows them: `events` in time order
    (each with `ts`, `event`, `seq`, `attempt`, `message_id`, `detail`,
    `actor`), and `messages`: one row per seq (message id, published, first
    sent, ended with what and when, publish-to-send and send-to-ack ms)."""
    rows: list[dict[str, Any]] = []
    messages: dict[int, dict[str, Any]] = {}
    for e in sorted(events, key=lambda e: e.get("ts") or ""):
        detail = [f"{k} {e[k]}" for k in ("status", "trigger", "reason", "error_title") if e.get(k)]
        detail += [f"{k.removesuffix('_ms').replace('_', ' ')} {e[k]:.0f} ms"
                   for k in ("publish_to_send_ms", "send_to_ack_ms", "trigger_to_send_ms")
                   if isinstance(e.get(k), int | float)]
        rows.append({"ts": e.get("ts"), "event": e.get("event"), "seq": e.get("seq"), "attempt": e.get("attempt"),
                     "message_id": e.get("message_id"), "actor": e.get("actor"), "detail": "; ".join(detail)})
        seq = e.get("seq")
        if not isinstance(seq, int):
            continue
        m = messages.setdefault(seq, {"seq": seq, "message_id": e.get("message_id"), "published": None,
                                      "first_sent": None, "outcome": None, "ended": None,
                                      "publish_to_send_ms": None, "send_to_ack_ms": None})
        m["message_id"] = m["message_id"] or e.get("message_id")
        m["published"] = m["published"] or e.get("published_at")
        if e.get("event") == "sent" and m["first_sent"] is None:
            m["first_sent"], m["publish_to_send_ms"] = e.get("ts"), e.get("publish_to_send_ms")
        if e.get("event") in ENDING and m["outcome"] is None:
            m["outcome"], m["ended"] = e.get("event"), e.get("ts")
            m["send_to_ack_ms"] = e.get("send_to_ack_ms")
    return {"events": rows, "messages": [messages[s] for s in sorted(messages)]}
