"""The two signatures every delivery carries, over the same raw body and the same key bytes.

- Tremendous' scheme (API.md §8): `Tremendous-Webhook-Signature: sha256=<hex HMAC-SHA256 of
  the raw body>`, keyed with the UTF-8 bytes of the webhook's `private_key` (64 hex digits).
- Standard Webhooks (https://www.standardwebhooks.com): `webhook-id` (the event's uuid, the
  same on every attempt), `webhook-timestamp` (unix seconds of this attempt) and
  `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`. Its secret is
  given to receivers as `whsec_<base64 of the key bytes>`, and the key bytes are the same as
  above: `signing_secret == "whsec_" + base64(private_key)`, so either can be derived from the other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

SIGNATURE_HEADER = "Tremendous-Webhook-Signature"
STANDARD_SECRET_PREFIX = "whsec_"


def tremendous_signature(private_key: str, raw_body: bytes) -> str:
    return "sha256=" + hmac.new(private_key.encode(), raw_body, hashlib.sha256).hexdigest()


def standard_secret(private_key: str) -> str:
    return STANDARD_SECRET_PREFIX + base64.b64encode(private_key.encode()).decode("ascii")


def standard_signature(private_key: str, message_id: str, timestamp: int, raw_body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + raw_body
    return "v1," + base64.b64encode(hmac.new(private_key.encode(), signed, hashlib.sha256).digest()).decode("ascii")


def headers(private_key: str, message_id: str, timestamp: int, raw_body: bytes) -> dict[str, str]:
    return {
        SIGNATURE_HEADER: tremendous_signature(private_key, raw_body),
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_signature(private_key, message_id, timestamp, raw_body),
    }
