"""/webhooks: the organization's endpoint, its event names, simulated deliveries, the delivery log."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import PlainTextResponse, Response

from largesse import db
from largesse.auth import Caller, CallerDep
from largesse.errors import BadRequest
from largesse.schemas import Out, Text, Wire
from largesse.web import EngineDep, Paging, SettingsDep, clean_text, json_response, q_str, query_doc
from largesse.webhooks import actions, deliveries, service

router = APIRouter(tags=["webhooks"])


class CreateWebhookIn(Wire):
    """The URL's form and address are checked by actions.set_url (as the dashboard's are), so
    that every refusal reads "Invalid request: url must …" (docs/webhooks.md)."""

    url: Text(2000, 1)


class SimulateIn(Wire):
    event: Text(100, 1)


class WebhookOut(Out):
    id: str
    url: str
    private_key: str | None = None
    signing_secret: str | None = None


class WebhookEnvelope(Out):
    webhook: WebhookOut


def _wire(engine, settings, caller: Caller, row) -> dict:
    """The webhook as this caller may see it: read-only keys never see the signing key."""
    if caller.permission == "read_only":
        return service.to_wire(row, None)
    return service.to_wire(row, actions.signing_key(engine, settings, row))


@router.post("/webhooks", response_model=WebhookEnvelope)
def create_webhook(body: CreateWebhookIn, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    """Create the organization's webhook, or replace its URL (one webhook per organization).
    URLs that reach loopback, private, link-local or other internal addresses are refused (400)
    unless LARGESSE_WEBHOOK_ALLOW_PRIVATE is set. Deliveries are signed twice, see docs/webhooks.md."""
    row = actions.set_url(engine, settings, caller.organization_id, body.url)
    return json_response({"webhook": _wire(engine, settings, caller, row)})


@router.get("/webhooks")
def list_webhooks(caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    with db.read(engine) as conn:
        row = service.for_org(conn, caller.organization_id)
    return json_response({"webhooks": [_wire(engine, settings, caller, row)] if row else []})


@router.get("/webhooks/{webhook_id}", response_model=WebhookEnvelope)
def get_webhook(webhook_id: str, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    clean_text(webhook_id, "id", max_length=200)
    with db.read(engine) as conn:
        row = service.get_or_404(conn, caller.organization_id, webhook_id)
    return json_response({"webhook": _wire(engine, settings, caller, row)})


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


@router.post("/webhooks/{webhook_id}/simulate", response_class=PlainTextResponse, responses={
    200: {"description": "The sample event is queued (the body is the text OK, as API.md has it)",
          "content": {"text/plain": {"schema": {"type": "string", "example": "OK"}}}}})
def simulate_webhook(webhook_id: str, body: SimulateIn, caller: CallerDep, engine: EngineDep,
                     settings: SettingsDep):
    """Queue a delivery of a sample event (its resource id is a placeholder) to the webhook.
    422 when the webhook's URL is one the address guard refuses."""
    clean_text(webhook_id, "id", max_length=200)
    actions.simulate(engine, settings, caller.organization_id, webhook_id, body.event)
    return PlainTextResponse("OK")


DELIVERIES_PAGING = Paging(limit=50, high=500)


@router.get("/webhooks/{webhook_id}/deliveries", openapi_extra=query_doc(
    DELIVERIES_PAGING.doc(), q_str("status", "SUCCEEDED or FAILED", enum=(deliveries.SUCCEEDED, deliveries.FAILED)),
    q_str("event_uuid", "one event's attempts")))
def list_deliveries(webhook_id: str, request: Request, caller: CallerDep, engine: EngineDep):
    """The webhook's delivery attempts, newest first: `offset`, `limit` (default 50, max 500),
    optional `status` (SUCCEEDED/FAILED) and `event_uuid` filters, and `total_count`."""
    clean_text(webhook_id, "id", max_length=200)
    offset, limit = DELIVERIES_PAGING.read(request)
    status = request.query_params.get("status") or None
    if status is not None and status not in (deliveries.SUCCEEDED, deliveries.FAILED):
        raise BadRequest("status must be SUCCEEDED or FAILED", {"status": ["must be SUCCEEDED or FAILED"]})
    event_uuid = request.query_params.get("event_uuid") or None
    if event_uuid is not None:
        clean_text(event_uuid, "event_uuid", max_length=64)
    with db.read(engine) as conn:
        service.get_or_404(conn, caller.organization_id, webhook_id)
        rows, total = deliveries.page(conn, webhook_id, limit=limit, offset=offset, status=status,
                                      event_uuid=event_uuid)
    redact = caller.permission == "read_only"
    return json_response({"deliveries": [deliveries.to_wire(r, redact_url=redact) for r in rows],
                          "total_count": total})


@router.get("/webhooks/{webhook_id}/deliveries/{delivery_id}")
def get_delivery(webhook_id: str, delivery_id: str, caller: CallerDep, engine: EngineDep):
    clean_text(webhook_id, "id", max_length=200)
    clean_text(delivery_id, "delivery_id", max_length=200)
    with db.read(engine) as conn:
        service.get_or_404(conn, caller.organization_id, webhook_id)
        row = deliveries.get_or_404(conn, caller.organization_id, webhook_id, delivery_id)
    return json_response({"delivery": deliveries.to_wire(row, redact_url=caller.permission == "read_only")})


@router.post("/webhooks/{webhook_id}/deliveries/{delivery_id}/resend")
def resend_delivery(webhook_id: str, delivery_id: str, caller: CallerDep, engine: EngineDep,
                    settings: SettingsDep):
    """Queue the event of a failed delivery again (same body and uuid). 422 when the event was
    delivered or the webhook's URL is refused by the address guard; 409 while the event is
    still queued for a retry."""
    clean_text(webhook_id, "id", max_length=200)
    clean_text(delivery_id, "delivery_id", max_length=200)
    queued = actions.resend(engine, settings, caller.organization_id, webhook_id, delivery_id)
    return json_response({"status": "QUEUED", **queued})
