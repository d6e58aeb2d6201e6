"""Inbound forwarding: what a signed webhook holds that baton does not
consume goes, unchanged, to the `inbound` topic (issue 44, item 4).

Meta allows one callback URL per app
(https://developers.facebook.com/docs/graph-api/webhooks/getting-started), and
baton's webhook takes it; the company's existing webhook consumer subscribes
to INBOUND_TOPIC instead (docs/deploy.md, "Moving a webhook consumer").

What is forwarded: the whole signed body of a post, byte for byte as Meta
sent it, once per post that holds at least one item baton does not consume
(`inbound_items` of shared/providers/whatsapp.py and meta_messaging.py:
messages people wrote, reactions, postbacks, other fields). The whole body,
not each item re-serialised: bytes that are Meta's own, which the consumer's
existing parser reads as before and whose signature it can still check
(attribute `signature`, the post's X-Hub-Signature-256, keyed by the app
secret it already has). A post that mixes statuses with such items is
forwarded whole, statuses too; a post of statuses and receipts only is not
forwarded. Attributes (each at most 1,024 bytes, Pub/Sub's limit,
https://cloud.google.com/pubsub/quotas#resource_limits):

- `provider` (whatsapp, messenger, instagram), `object` (the payload's),
- `field`: the unconsumed items' fields, distinct, comma-separated,
- `account_id`: their `entry[].id`s, distinct, comma-separated,
- `user_id`: the person, when the post's unconsumed items are from one,
- `signature`, `received_at_us` (epoch us), `items` (how many unconsumed).

Ordering key: `{provider}:{user}` when the unconsumed items are from one
person (the usual post: Meta sends one message per post at ordinary
rates), else `{provider}:{first account id}`; so one person's posts reach the
consumer in the order baton received them.

If Pub/Sub does not take it: `direct` mode raises InboundPublishFailed before
any status of the post is applied (the entry point answers 503 and Meta sends
the post again, for up to 7 days; its statuses are applied then, and a status
applied twice changes its room once: shared/room/ fences and de-duplicates);
`queued` mode puts the body in the status error queue (STATUS_TOPIC-dead-letter,
attribute `kind` = `inbound` with the same attributes and a `reason`), where
`baton statuses replay` publishes it to INBOUND_TOPIC again; if that fails
too, InboundPublishFailed (503). Never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.counted import counted_publisher
from shared.providers import registry
from shared.providers.base import InboundItem
from shared.status_queue import PUBLISH_TIMEOUT_S, StatusPublishFailed

KIND_INBOUND = "inbound"
ATTRIBUTE_MAX_BYTES = 1024


class InboundPublishFailed(StatusPublishFailed):
    """The inbound topic (and, in queued mode, the error queue) did not take
    a post: the webhook answers 503 and Meta sends it again."""


def _clip(value: str) -> str:
    data = value.encode()
    return value if len(data) <= ATTRIBUTE_MAX_BYTES else data[:ATTRIBUTE_MAX_BYTES].decode("utf-8", "ignore")


def _distinct(values: list[str]) -> str:
    return _clip(",".join(dict.fromkeys(v for v in values if v)))


@dataclass(frozen=True)
class InboundPost:
    """One post to forward: its raw body, ordering key and attributes."""

    data: bytes
    ordering_key: str
    attributes: dict[str, str]

    @classmethod
    def of(cls, raw: bytes, items: list[InboundItem], signature: str | None, received_at_us: int) -> InboundPost:
        """From a post's body and its unconsumed items (at least one)."""
        first = items[0]
        users = {i.user_id for i in items if i.user_id}
        attrs = {"provider": first.provider, "object": first.object, "field": _distinct([i.field for i in items]),
                 "account_id": _distinct([i.account_id for i in items]), "signature": _clip(signature or ""),
                 "received_at_us": str(received_at_us), "items": str(len(items))}
        if len(users) == 1:
            attrs["user_id"] = _clip(next(iter(users)))
            key = f"{first.provider}:{attrs['user_id']}"
        else:
            key = f"{first.provider}:{first.account_id}"
        return cls(raw, _clip(key), attrs)


class InboundPublisher:
    """Publishes forwarded posts to INBOUND_TOPIC (ordered), or to the status
    error queue when that fails and `error_topic` is given.

    Args:
        project: GCP project id.
        topic: INBOUND_TOPIC.
        error_topic: STATUS_TOPIC-dead-letter (queued mode), or None (direct
            mode: a failure raises).
        client: a pubsub_v1.PublisherClient with message ordering (tests pass their own).
        timeout_s: how long one publish may take, s.
    """

    def __init__(self, project: str, topic: str, error_topic: str | None, client: Any = None,
                 timeout_s: float = PUBLISH_TIMEOUT_S) -> None:
        if client is None:
            import google.cloud.pubsub_v1 as pubsub_v1
            from google.cloud.pubsub_v1.types import BatchSettings, PublisherOptions

            client = pubsub_v1.PublisherClient(
                batch_settings=BatchSettings(max_latency=0.001),
                publisher_options=PublisherOptions(enable_message_ordering=True, timeout=timeout_s))
        self._client = counted_publisher(client)  # each publish counted (shared/counted.py)
        self.topic = client.topic_path(project, topic)
        self._error_topic = None if error_topic is None else client.topic_path(project, error_topic)
        self._timeout_s = timeout_s

    def forward(self, post: InboundPost) -> str:
        """Publish `post`; returns `inbound` (on the topic) or `error_queue`.

        Raises:
            InboundPublishFailed: Pub/Sub did not take it (and, with an error
                topic, did not take it there either).
        """
        try:
            self._client.publish(self.topic, post.data, ordering_key=post.ordering_key,
                                 **post.attributes).result(timeout=self._timeout_s)
            return "inbound"
        except Exception as exc:  # noqa: BLE001 - any failure: the error queue, or a retry by Meta
            try:
                self._client.resume_publish(self.topic, post.ordering_key)
            except Exception:  # noqa: BLE001, S110 - a key that was not paused
                pass
            error = f"{type(exc).__name__}: {exc}"[:300]
        if self._error_topic is None:
            raise InboundPublishFailed(f"the inbound topic did not take a post: {error}")
        try:
            self._client.publish(self._error_topic, post.data, kind=KIND_INBOUND, reason=_clip(
                f"the inbound topic did not take it: {error}"), ordering_key_wanted=post.ordering_key,
                **post.attributes).result(timeout=self._timeout_s)
        except Exception as exc2:  # noqa: BLE001
            raise InboundPublishFailed(f"neither the inbound topic nor the error queue took a post: {error}; "
                                       f"{type(exc2).__name__}: {exc2}"[:400]) from exc2
        return "error_queue"


def forward_inbound(publisher: InboundPublisher | None, provider: str, payload: Any, raw: bytes,
                    signature: str | None, received_at_us: int) -> int:
    """Forward a signed post's unconsumed items (module docstring); returns
    how many there were (0: nothing forwarded). Without a publisher
    (INBOUND_TOPIC empty) nothing is forwarded.

    Raises:
        ValueError: the payload is not the provider's webhook shape.
        InboundPublishFailed: not forwarded (module docstring).
    """
    if publisher is None:
        return 0
    items = registry.inbound_items(registry.platform(provider), payload)
    if items:
        publisher.forward(InboundPost.of(raw, items, signature, received_at_us))
    return len(items)
