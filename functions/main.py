"""Cloud Functions entry points (2nd gen, HTTP): enqueue, webhook, timeout.

Placeholder while the delivery path is written; the entry point names are final.
"""

import functions_framework


@functions_framework.http
def enqueue(request):
    """Pub/Sub ordered push endpoint."""
    return ("not implemented", 501)


@functions_framework.http
def webhook(request):
    """WhatsApp status webhook endpoint."""
    return ("not implemented", 501)


@functions_framework.http
def timeout(request):
    """Cloud Tasks ack-timeout endpoint."""
    return ("not implemented", 501)
