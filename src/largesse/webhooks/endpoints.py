"""/webhooks: the organization's endpoint, its event names, and simulated deliveries."""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter
from pydantic import field_validator
from starlette.responses import PlainTextResponse, Response

from largesse import db
from largesse.auth import CallerDep
from largesse.errors import Unprocessable
from largesse.schemas import Out, Text, Wire
from largesse.web import EngineDep, clean_text, json_response
from largesse.webhooks import service

router = APIRouter(tags=["webhooks"])


class CreateWebhookIn(Wire):
    url: Text(2000, 1)

    @field_validator("url")
    @classmethod
    def http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL")
        return value


class SimulateIn(Wire):
    event: Text(100, 1)


class WebhookOut(Out):
    id: str
    url: str
    private_key: str


class WebhookEnvelope(Out):
    webhook: WebhookOut


@router.post("/webhooks", response_model=WebhookEnvelope)
def create_webhook(body: CreateWebhookIn, caller: CallerDep, engine: EngineDep):
    """Create the organization's webhook, or replace its URL (one webhook per organization).
    Deliveries are signed: `Tremendous-Webhook-Signature: sha256=<HMAC-SHA256 of the body, keyed
    with private_key>`."""
    with db.write(engine) as conn:
        row = service.upsert(conn, caller.organization_id, body.url)
    return json_response({"webhook": service.to_wire(row)})


@router.get("/webhooks")
def list_webhooks(caller: CallerDep, engine: EngineDep):
    with db.read(engine) as conn:
        row = service.for_org(conn, caller.organization_id)
    return json_response({"webhooks": [service.to_wire(row)] if row else []})


@router.get("/webhooks/{webhook_id}", response_model=WebhookEnvelope)
def get_webhook(webhook_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(webhook_id, "id", max_length=200)
    with db.read(engine) as conn:
        row = service.get_or_404(conn, caller.organization_id, webhook_id)
    return json_response({"webhook": service.to_wire(row)})


@router.delete("/webhooks/{webhook_id}", status_code=204)
def delete_webhook(webhook_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(webhook_id, "id", max_length=200)
    with db.write(engine) as conn:
        service.remove(conn, caller.organization_id, webhook_id)
    return Response(status_code=204)


@router.get("/webhooks/{webhook_id}/events")
def list_webhook_events(webhook_id: str, caller: CallerDep, engine: EngineDep):
    """The event names this service sends."""
    clean_text(webhook_id, "id", max_length=200)
    with db.read(engine) as conn:
        service.get_or_404(conn, caller.organization_id, webhook_id)
    return json_response({"events": list(service.EVENTS)})


@router.post("/webhooks/{webhook_id}/simulate")
def simulate_webhook(webhook_id: str, body: SimulateIn, caller: CallerDep, engine: EngineDep):
    """Queue a delivery of a sample event (its resource id is a placeholder) to the webhook."""
    clean_text(webhook_id, "id", max_length=200)
    if body.event not in service.EVENTS:
        raise Unprocessable(f"Unknown event {body.event}; see GET /webhooks/{{id}}/events",
                            {"event": ["is not an event this service sends"]})
    with db.write(engine) as conn:
        service.get_or_404(conn, caller.organization_id, webhook_id)
        service.emit(conn, caller.organization_id, [(body.event, "SIMULATED000000")])
    return PlainTextResponse("OK")
