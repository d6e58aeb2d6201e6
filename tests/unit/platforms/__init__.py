"""The platforms' side: parsing their payloads, signatures, media bodies, the push contract, the webhook's choice of platform."""
