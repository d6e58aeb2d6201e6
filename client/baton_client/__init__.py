"""baton-client: publish chat messages to baton from your own code.

    from baton_client import Message, Publisher, Template, Text
    pub = Publisher("my-project", "baton-outbound")
    pub.publish(Message("room-42", "whatsapp", "15551234567", "msg-1", Text("Hello!"))).result()

Every message is checked against baton's message contract
(`baton_client/contract/message.v1.schema.json`, the same file baton's
functions check pushes with) before it is published: an invalid one raises
`InvalidMessage` with every error at once, and nothing is published.
"""

from baton_client.contract import SCHEMA, SCHEMA_PATH, VERSION, InvalidMessage
from baton_client.messages import (
    Audio,
    Button,
    Buttons,
    Contacts,
    Content,
    Document,
    File,
    Image,
    ListMessage,
    Location,
    Message,
    QuickReply,
    Raw,
    Reaction,
    Row,
    Section,
    Sticker,
    Template,
    Text,
    Video,
)
from baton_client.publisher import InvalidBatch, OutcomesUnavailable, Publisher, PublishReport, subscribe_outcomes

__all__ = ["SCHEMA", "SCHEMA_PATH", "VERSION", "Audio", "Button", "Buttons", "Contacts", "Content", "Document",
           "File", "Image", "InvalidBatch", "InvalidMessage", "ListMessage", "Location", "Message",
           "OutcomesUnavailable", "PublishReport", "Publisher", "QuickReply", "Raw", "Reaction", "Row", "Section",
           "Sticker", "Template", "Text", "Video", "subscribe_outcomes"]
