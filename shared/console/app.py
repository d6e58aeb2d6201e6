"""The console's pages: server-rendered HTML over the admin API's actions.

Every page and every action is one or more calls of
`shared.admin.service.AdminService.run` (the actions of
shared/admin/actions.py, audited like the CLI's), for the caller that
`AdminService.verify` verified from the request's `Authorization` header:
the console is a face of the admin API, never a second path to the data.

Routes (all under `PREFIX`; GET unless said):

- `/console/`: the overview (`status` and the last hour, `activity.recent`,
  with its chart; kept OVERVIEW_TTL_S), each count linking to its list;
- `/console/rooms?q=ID`: a room by its id, else the rooms whose events name
  message id ID (`rooms.find`); `?kind=stuck|lag|paused|parked&cursor=C`:
  one page of a listing (`rooms.list`, PAGE rooms), with a link to the next;
  `?number=N&cursor=C`: the rooms sending from WhatsApp number N (`rooms.from`);
- `/console/ended?outcome=O&provider=P`: the last hour's newest messages
  that ended with outcome O (of provider P) (`activity.ended`);
- `/console/room?id=ROOM`: the room's state (`rooms.show`), its timeline
  (`rooms.timeline`), its dead letters, and the action forms;
- `/console/list/NAME`: dead letters, scheduled messages, the status error
  queue, rejected pushes (their `*.list` actions);
- POST `/console/act`: fields `action`, `reason`, `step` (`preview`: the
  action's dry run and a confirm form; `confirm`: the action itself, then
  303 to the room or the overview) and `csrf` (shared/console/csrf.py);
- POST `/console/bulk`: one action on many rooms (`rooms.bulk`): fields
  `bulk_action` (pause, resume, skip, redrive), the rooms ticked on a list
  (`pick.N`, each a room id) or pasted (`rooms`, one id a line) or a whole
  listing (`kind`, first `limit` rooms), `reason`, `step` and `csrf` as for
  `act`; the confirm page shows each room's dry run, the result each
  room's outcome (shared/console/bulk.py);
- POST `/console/find`: field `recipient` (and `provider`): the rooms with a
  message in flight to it (`rooms.to`); a POST, so the recipient, a phone
  number or a platform's user id, stays out of URLs and access logs.

Answers: 200 HTML; 303 after an action; 400 a bad form or action; 401/403
no or a refused identity, or a POST without a valid CSRF token; 404 no such
room or page; 405 another method. A transient failure raises (the entry
point answers 503). Pages hold no secret and no message text (the event
log has none); URLs carry only room ids, message ids and listing cursors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from shared.admin.identity import Caller, Forbidden, Unauthenticated
from shared.console.bulk import bulk_hidden, bulk_request
from shared.console.chart import activity_chart
from shared.console.csrf import FIELD, Csrf, CsrfRefused
from shared.console.kept import KeptAnswers

PREFIX = "/console"
PAGE = 50
# The overview's counts are Firestore count aggregations over every index
# shard (shared/admin/overview.py), and its last hour is read from the event
# log: kept this long (s) per instance, then served stale while one thread
# counts again (shared/console/kept.py); `?fresh=1` (the page's "count
# again" link) and the page after an action wait for new ones.
OVERVIEW_TTL_S = 10.0
# A room list's page is kept as long, the same way (shared/console/kept.py;
# `?fresh=1` asks anew, and each action's page after it links there).
LIST_TTL_S = 10.0
TIMELINE_EVENTS = 200
LISTS = {"kind": ("stuck", "lag", "paused", "parked")}
LIST_TITLES = {"stuck": "Overdue rooms (stuck)", "lag": "Rooms holding messages (lagging: oldest head of line first)",
               "paused": "Paused rooms", "parked": "Rooms with parked messages"}
OTHER_LISTS = {"dead-letters": ("dead_letters.list", "Dead letters (parked and kept)"),
               "scheduled": ("scheduled.list", "Scheduled messages waiting"),
               "error-queue": ("statuses.list", "The status error queue"),
               "rejects": ("rejects.list", "Rejected pushes kept")}
# Fields of the *.list rows that may hold message content or secrets: never shown.
HIDDEN_FIELDS = frozenset({"data", "text", "body", "attributes", "message"})
# The console's actions: (admin action, the form fields it takes, whether it is about one room).
ACTIONS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "pause": ("rooms.pause", ("room",), True),
    "resume": ("rooms.resume", ("room",), True),
    "skip": ("rooms.skip", ("room", "seq"), True),
    "redrive": ("dead_letters.redrive", ("room",), True),
    "cancel-scheduled": ("scheduled.cancel", ("room_id", "message_id"), True),
    "replay-statuses": ("statuses.replay", ("room",), True),
    "replay-all-statuses": ("statuses.replay", (), False),
    "replay-reject": ("rejects.replay", ("id",), False),
    "incident-on": ("pause.all", (), False),
    "incident-off": ("resume.all", (), False),
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


@dataclass
class Page:
    """One answer: HTTP status, HTML body, headers."""

    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)


class Console:
    """The console over one `AdminService`.

    Args:
        admin: the admin function's `AdminService` (its `verify` and `run`).
        csrf: the token maker (default: a random key of this instance).
    """

    def __init__(self, admin: Any, csrf: Csrf | None = None) -> None:
        self.admin = admin
        self.csrf = csrf or Csrf()
        # The overview's counts per error-queue choice, and the room lists' pages per (kind, cursor).
        self._overviews = KeptAnswers(OVERVIEW_TTL_S)
        self._lists = KeptAnswers(LIST_TTL_S)
        self.templates = Environment(loader=FileSystemLoader(Path(__file__).with_name("templates")),
                                     autoescape=select_autoescape(default=True), trim_blocks=True,
                                     lstrip_blocks=True)

    # ------------------------------------------------------------ entry

    def handle(self, method: str, path: str, query: dict[str, str], form: dict[str, str],
               authorization: str | None, own_url: str) -> Page:
        """Answer one console request (module docstring). Raises what the
        actions raise on a transient failure (Firestore, Pub/Sub, Tasks)."""
        try:
            caller = self.admin.verify(authorization, own_url)
        except Unauthenticated as exc:
            return self._error(401, "Not signed in", f"unauthenticated: {exc}. Open the console through "
                                                     "`baton console` (docs/console.md).")
        except Forbidden as exc:
            return self._error(403, "Not an operator", f"forbidden: {exc}")
        route = path[len(PREFIX):].strip("/") if path.startswith(PREFIX) else None
        if method == "POST":
            if route not in ("act", "bulk", "find"):
                return self._error(405, "Not here", "only /console/act, /console/bulk and /console/find take a POST")
            try:
                self.csrf.check(form.get(FIELD), caller.identity)
            except CsrfRefused as exc:
                return self._error(403, "Refused", str(exc))
            if route == "find":
                return self._find_recipient(caller, form)
            return self._bulk(caller, form) if route == "bulk" else self._act(caller, form)
        if method != "GET":
            return self._error(405, "Not here", f"{method} is not a console method")
        if route == "":
            return self._overview(caller, query)
        if route == "rooms":
            return self._rooms(caller, query)
        if route == "room":
            return self._room(caller, query)
        if route == "ended":
            return self._ended(caller, query)
        if route is not None and route.startswith("list/") and route[5:] in OTHER_LISTS:
            return self._list(caller, route[5:])
        return self._error(404, "No such page", f"no console page {path!r}")

    # ------------------------------------------------------------ helpers

    def _render(self, caller: Caller, template: str, status: int = 200, **values: Any) -> Page:
        body = self.templates.get_template(template).render(
            prefix=PREFIX, actor=caller.identity, verified_by=caller.verified_by,
            csrf_field=FIELD, csrf=self.csrf.token(caller.identity), **values)
        return Page(status, body, {"Content-Type": "text/html; charset=utf-8", **SECURITY_HEADERS})

    def _error(self, status: int, title: str, detail: str) -> Page:
        body = self.templates.get_template("error.html").render(prefix=PREFIX, title=title, detail=detail,
                                                                 status=status, actor=None)
        return Page(status, body, {"Content-Type": "text/html; charset=utf-8", **SECURITY_HEADERS})

    def _call(self, caller: Caller, action: str, **args: Any) -> tuple[int, Any]:
        reply = self.admin.run(action, {k: v for k, v in args.items() if v is not None}, caller)
        return reply.status, (reply.body.get("result") if reply.status == 200 else reply.body.get("error"))

    # ------------------------------------------------------------ pages

    def _overview(self, caller: Caller, query: dict[str, str]) -> Page:
        with_queue = query.get("error_queue") == "1"

        def ask() -> tuple[int, Any]:
            status, overview = self._call(caller, "status", skip_error_queue=not with_queue)
            if status != 200:
                return status, overview
            status, recent = self._call(caller, "activity.recent")
            return (200, (overview, recent)) if status == 200 else (status, recent)

        status, kept = self._overviews.get(with_queue, ask, fresh=query.get("fresh") == "1" or bool(query.get("done")))
        if status != 200:
            return self._error(status, "Overview unavailable", str(kept))
        o, recent = kept.answer
        return self._render(caller, "overview.html", o=o, recent=recent, chart=activity_chart(recent),
                            done=query.get("done"), as_of=kept.as_of, ttl_s=self._overviews.ttl_s,
                            recounting=self._overviews.asking(with_queue), with_error_queue=with_queue)

    def _rooms(self, caller: Caller, query: dict[str, str]) -> Page:
        q = (query.get("q") or "").strip()
        if q:
            status, info = self._call(caller, "rooms.show", room=q, events=0)
            if status == 200:
                return Page(303, "", {"Location": f"{PREFIX}/room?{urlencode({'id': q})}"})
            status, found = self._call(caller, "rooms.find", message_id=q)
            if status != 200:
                return self._error(status, "Search failed", str(found))
            if len(found["rooms"]) == 1:
                return Page(303, "", {"Location": f"{PREFIX}/room?{urlencode({'id': found['rooms'][0]})}"})
            return self._render(caller, "rooms.html", q=q, found=found["rooms"], kind=None, rows=None)
        if query.get("number"):
            return self._rooms_from(caller, query["number"], query)
        kind = query.get("kind") or "lag"
        if kind not in LISTS["kind"]:
            return self._error(400, "No such list", f"kind must be one of {', '.join(LISTS['kind'])}")
        cursor = query.get("cursor") or None
        status, kept = self._lists.get((kind, cursor), lambda: self._call(caller, "rooms.list", kind=kind, limit=PAGE,
                                                                          cursor=cursor),
                                       fresh=query.get("fresh") == "1")
        if status != 200:
            return self._error(status, "List unavailable", str(kept))
        page = kept.answer
        next_url = f"{PREFIX}/rooms?{urlencode({'kind': kind, 'cursor': page['next']})}" if page["next"] else None
        return self._render(caller, "rooms.html", q=None, found=None, kind=kind, title=LIST_TITLES[kind],
                            rows=page["rooms"], next_url=next_url, kinds=LIST_TITLES, as_of=kept.as_of,
                            ttl_s=self._lists.ttl_s, again=self._lists.asking((kind, cursor)),
                            fresh_url=f"{PREFIX}/rooms?{urlencode({'kind': kind, **({'cursor': cursor} if cursor else {}), 'fresh': '1'})}")

    def _rooms_from(self, caller: Caller, number: str, query: dict[str, str]) -> Page:
        """One page of the rooms sending from WhatsApp number `number` (`rooms.from`), kept like the listings."""
        cursor = query.get("cursor") or None
        status, kept = self._lists.get((f"number:{number}", cursor),
                                       lambda: self._call(caller, "rooms.from", number=number, limit=PAGE,
                                                          cursor=cursor),
                                       fresh=query.get("fresh") == "1")
        if status != 200:
            return self._error(status, "List unavailable", str(kept))
        page = kept.answer
        next_url = f"{PREFIX}/rooms?{urlencode({'number': number, 'cursor': page['next']})}" if page["next"] else None
        again_args = {"number": number, **({"cursor": cursor} if cursor else {}), "fresh": "1"}
        return self._render(caller, "rooms.html", q=None, found=None, kind=None, number=number,
                            title=f"Rooms sending from WhatsApp number {number}", rows=page["rooms"],
                            next_url=next_url, kinds=LIST_TITLES, as_of=kept.as_of, ttl_s=self._lists.ttl_s,
                            again=self._lists.asking((f"number:{number}", cursor)),
                            fresh_url=f"{PREFIX}/rooms?{urlencode(again_args)}")

    def _room(self, caller: Caller, query: dict[str, str]) -> Page:
        room = (query.get("id") or "").strip()
        if not room:
            return self._error(400, "No room", "give ?id=ROOM")
        status, info = self._call(caller, "rooms.show", room=room, events=0)
        if status != 200:
            return self._error(status, "No such room", str(info))
        _, tl = self._call(caller, "rooms.timeline", room=room, limit=TIMELINE_EVENTS)
        _, dead = self._call(caller, "dead_letters.list", room=room, limit=100)
        return self._render(caller, "room.html", room=room, r=info, tl=tl, dead=dead if isinstance(dead, list) else [],
                            done=query.get("done"))

    def _ended(self, caller: Caller, query: dict[str, str]) -> Page:
        status, found = self._call(caller, "activity.ended", outcome=query.get("outcome") or "",
                                   provider=query.get("provider") or None)
        if status != 200:
            return self._error(status, "List unavailable", str(found))
        return self._render(caller, "ended.html", found=found)

    def _list(self, caller: Caller, name: str) -> Page:
        action, title = OTHER_LISTS[name]
        status, rows = self._call(caller, action, limit=PAGE)
        if status != 200:
            return self._error(status, "List unavailable", str(rows))
        rows = [{k: v for k, v in r.items() if k not in HIDDEN_FIELDS} for r in rows]
        columns = list(rows[0]) if rows else []
        return self._render(caller, "list.html", title=title, rows=rows, columns=columns, name=name)

    def _find_recipient(self, caller: Caller, form: dict[str, str]) -> Page:
        recipient = (form.get("recipient") or "").strip()
        if not recipient:
            return self._error(400, "No recipient", "give the recipient to look for")
        status, found = self._call(caller, "rooms.to", recipient=recipient, provider=form.get("provider") or None)
        if status != 200:
            return self._error(status, "Search failed", str(found))
        if len(found["rooms"]) == 1:
            return Page(303, "", {"Location": f"{PREFIX}/room?{urlencode({'id': found['rooms'][0]})}"})
        return self._render(caller, "rooms.html", q=None, recipient_search=True, found=found["rooms"], kind=None,
                            rows=None)

    def _bulk(self, caller: Caller, form: dict[str, str]) -> Page:
        request = bulk_request(form)
        if isinstance(request, str):
            return self._error(400, "Cannot run that", request)
        confirm = form.get("step") == "confirm"
        reply = self.admin.run("rooms.bulk", {"dry_run": not confirm, **request}, caller)
        status, result = reply.status, reply.body.get("result") if reply.status == 200 else reply.body.get("error")
        if status != 200:
            return self._error(status, "The action failed" if confirm else "Cannot preview", str(result))
        return self._render(caller, "bulk.html", r=result, hidden=bulk_hidden(request, result), done=confirm)

    # ------------------------------------------------------------ actions

    def _act(self, caller: Caller, form: dict[str, str]) -> Page:
        name = form.get("action") or ""
        if name not in ACTIONS:
            return self._error(400, "No such action", f"action must be one of {', '.join(ACTIONS)}")
        admin_action, fields, about_room = ACTIONS[name]
        reason = (form.get("reason") or "").strip()
        if not reason:
            return self._error(400, "A reason is needed", "every action asks why: fill in the reason")
        args: dict[str, Any] = {"reason": reason}
        for f in fields:
            value = (form.get(f) or "").strip()
            if not value:
                return self._error(400, "Missing field", f"`{f}` is required for {name}")
            args[f] = int(value) if f == "seq" and value.isdigit() else value
        room = args.get("room") or args.get("room_id")
        if form.get("step") != "confirm":
            status, preview = self._call(caller, admin_action, dry_run=True, **args)
            if status != 200:
                return self._error(status, "Cannot preview", str(preview))
            hidden = {k: str(v) for k, v in args.items()}
            return self._render(caller, "confirm.html", name=name, admin_action=admin_action, preview=preview,
                                hidden=hidden, room=room)
        status, result = self._call(caller, admin_action, **args)
        if status != 200:
            return self._error(status, "The action failed", str(result))
        back = f"{PREFIX}/room?{urlencode({'id': room, 'done': name})}" if about_room and room else \
            f"{PREFIX}/?{urlencode({'done': name})}"
        return Page(303, "", {"Location": back})
