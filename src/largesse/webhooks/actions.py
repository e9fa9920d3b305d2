"""What an organization does with its webhook: set its URL, simulate an event, resend a
failed delivery, read its signing key. POST /webhooks... and the dashboard's Developers
page both call these, so the address guard and the rules live in one place."""

from __future__ import annotations

from sqlalchemy import Engine

from largesse import crypto, db
from largesse.config import Settings
from largesse.errors import BadRequest, Conflict, Unprocessable
from largesse.webhooks import addresses, deliveries, service


def guard(url: str, settings: Settings, organization_id: str, payload_key: str = "url", status=BadRequest) -> None:
    """Refuse URLs that reach internal addresses (unless LARGESSE_WEBHOOK_ALLOW_PRIVATE)."""
    try:
        addresses.check_for_create(url, settings.webhook_allow_private, organization_id)
    except addresses.UnsafeURL as exc:
        raise status(f"Invalid request: url {exc}", {payload_key: [str(exc)]}) from None


def set_url(engine: Engine, settings: Settings, organization_id: str, url: str):
    """Create the organization's webhook or point it at a new URL; returns its row."""
    try:
        addresses.parse(url)
    except ValueError as exc:
        raise BadRequest(f"Invalid request: url {exc}", {"url": [str(exc)]}) from None
    guard(url, settings, organization_id)
    box = crypto.keybox(settings)
    with db.write(engine) as conn:
        return service.upsert(conn, organization_id, url, box)


def signing_key(engine: Engine, settings: Settings, row) -> str:
    try:
        return service.signing_key(engine, settings, row)
    except crypto.KeyUnavailable as exc:
        raise Conflict(str(exc), {"private_key": ["cannot be decrypted"]}) from None


def simulate(engine: Engine, settings: Settings, organization_id: str, webhook_id: str, event: str) -> None:
    """Queue a delivery of a sample event (its resource id a placeholder)."""
    if event not in service.SIMULATED_EVENTS:
        raise Unprocessable(f"Unknown event {event}; the events are those of GET /webhooks/{{id}}/events "
                            "and the others of Tremendous' list", {"event": ["is not a webhook event"]})
    with db.read(engine) as conn:
        hook = service.get_or_404(conn, organization_id, webhook_id)
    guard(hook.url, settings, organization_id, status=Unprocessable)
    with db.write(engine) as conn:
        service.get_or_404(conn, organization_id, webhook_id)
        service.emit(conn, organization_id, [(event, "SIMULATED000000")])


def resend(engine: Engine, settings: Settings, organization_id: str, webhook_id: str, delivery_id: str) -> dict:
    """Queue the event of a failed delivery again (deliveries.resend has the rules)."""
    with db.read(engine) as conn:
        hook = service.get_or_404(conn, organization_id, webhook_id)
        deliveries.get_or_404(conn, organization_id, webhook_id, delivery_id)
    guard(hook.url, settings, organization_id, status=Unprocessable)
    with db.write(engine) as conn:
        service.get_or_404(conn, organization_id, webhook_id)
        return deliveries.resend(conn, organization_id, webhook_id, delivery_id, max_attempts=service.MAX_ATTEMPTS)
