"""The counting wrappers of the calls that are not Firestore's or Cloud
Tasks': each Pub/Sub publish of the status queue and of inbound
forwarding (`status_publishes`), each call of a platform's send
(`send_calls`), counted in the request's operation counts
(shared/opcounts.py) where it leaves baton. Firestore's calls are counted
by shared/firestore_calls.py, Cloud Tasks' by shared/tasks.py
`CountedTasks`.
"""

from __future__ import annotations

from typing import Any

from shared.opcounts import op_counts
from shared.providers.base import Sender, SendResult


class CountedPublisher:
    """A Pub/Sub publisher client (`google.cloud.pubsub_v1.PublisherClient`,
    or a test's) whose publishes are counted: one `status_publishes` per
    message handed to it, counted when it is handed over, whatever Pub/Sub
    answers then (what the status queue and inbound forwarding publish:
    the status topic, its error queue, the inbound topic)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def topic_path(self, project: str, topic: str) -> str:
        return str(self._client.topic_path(project, topic))

    def publish(self, topic: str, data: bytes, **attributes: Any) -> Any:
        """Publish one message (`ordering_key` and attributes as keywords);
        returns the client's future."""
        op_counts().status_publishes += 1
        return self._client.publish(topic, data, **attributes)

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        self._client.resume_publish(topic, ordering_key)


def counted_publisher(client: Any) -> CountedPublisher:
    """`client`, its publishes counted (one already counted is returned as it is)."""
    return client if isinstance(client, CountedPublisher) else CountedPublisher(client)


class CountedSender:
    """A platform client (`shared.providers.Sender`) whose send calls are
    counted: one `send_calls` per call, made or not (a client never raises
    for a platform's or the network's errors)."""

    def __init__(self, sender: Sender) -> None:
        self._sender = sender

    def send(self, recipient: str, text: str, delivery_id: str, **kind: Any) -> SendResult:
        """`Sender.send`; `media` (a `Media`) and `payload` passed on only when given."""
        op_counts().send_calls += 1
        return self._sender.send(recipient, text, delivery_id, **kind)
