"""Wires the adapters to the delivery service, in one place.

The entry points (functions/main.py) and the tools call `bootstrap()` (or
`wire()`, which also gives the Firestore store the operators' views read);
unit tests build `DeliveryService(ServiceCore(...))` themselves with
in-memory fakes (tests/fakes.py).
"""

from __future__ import annotations

from google.cloud import firestore

from shared import config, contract
from shared.admin.incident import IncidentSwitch
from shared.clock import SYSTEM_CLOCK
from shared.events import EventLog, quiet_rules
from shared.outcomes import OutcomePublisher
from shared.ports import Clock
from shared.prepare import PrepareScheduler
from shared.providers import make_preparers, make_senders
from shared.room import policy_from_settings
from shared.scheduled import ScheduledHold
from shared.sender_window import SenderWindow
from shared.service import DeliveryService, ServiceCore
from shared.service.inbound import InboundPublisher
from shared.status_queue import StatusQueue
from shared.store import RoomStore
from shared.tasks import TimerScheduler, make_client


def bootstrap(settings: config.Settings | None = None, clock: Clock = SYSTEM_CLOCK) -> DeliveryService:
    """A `DeliveryService` on Firestore, Cloud Tasks and the platform clients,
    configured from `settings` (default: the environment, `config.load()`),
    on `clock` (the time, epoch us).

    Raises:
        ValueError: a setting is invalid (see `config.load`).
    """
    return wire(settings, clock)[0]


def wire(settings: config.Settings | None = None,
         clock: Clock = SYSTEM_CLOCK) -> tuple[DeliveryService, RoomStore]:
    """`bootstrap`'s service, and its store as Firestore's adapter (the
    admin's operators read its records and queries beyond the handlers'
    port, shared/admin/service.py). `clock` is the service's, the store's
    and, through the service, the operators' (shared/operators.py).

    Raises:
        ValueError: a setting is invalid (see `config.load`).
    """
    settings = settings or config.load()
    contract.warm()  # the message contract's validators, before the first push
    db = firestore.Client(project=settings.project, database=settings.firestore_database)
    store = RoomStore(db, settings.retention_hours, index_shards=settings.index_shards, clock=clock)
    tasks = make_client(settings)
    timers = TimerScheduler(tasks, settings)
    core = ServiceCore(settings, policy_from_settings(settings), store, timers, make_senders(settings),
                       EventLog(settings.event_log_path, quiet=quiet_rules(settings.quiet_events)),
                       status_queue=lambda: StatusQueue(settings.project, settings.status_topic,
                                                        settings.status_error_topic, db, settings.retention_hours),
                       scheduled=ScheduledHold(tasks, settings),
                       prepare_tasks=PrepareScheduler(tasks, settings), preparers=make_preparers(settings),
                       sender_window=SenderWindow(db), incident=IncidentSwitch(db),
                       outcomes=OutcomePublisher(settings.project, settings.outcomes_topic, db)
                       if settings.outcomes == "on" else None,
                       inbound=InboundPublisher(settings.project, settings.inbound_topic,
                                                settings.status_error_topic if settings.webhook_mode == "queued"
                                                else None) if settings.inbound_topic else None,
                       clock=clock)
    return DeliveryService(core), store
