"""The delivery log: one row per attempt to deliver an event, and resending a failed event.

The worker writes a row after every attempt (webhooks/tasks.py): for a success in the same
transaction that finishes the job, for a failure just before the queue records it. Rows are
read through `GET /webhooks/{id}/deliveries` and belong to the webhook's organization.
A resend is a new `deliver_webhook` job with the event's original body (same uuid, so a
receiver that did get it after all dedupes it), queued through the outbox like any event.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection, bindparam, delete, select

from largesse import db, paging
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.errors import Conflict, NotFound, Unprocessable
from largesse.ids import new_id
from largesse.ops import logs
from largesse.timeutil import iso
from largesse.webhooks.models import webhook_deliveries, webhooks

SUCCEEDED, FAILED = "SUCCEEDED", "FAILED"
MAX_ERROR_CHARS = 1000
# The log keeps 30 days per webhook: each new row removes its webhook's older ones (an
# index range on (webhook_id, started_at)), so the table cannot grow without bound.
RETENTION = timedelta(days=30)


def record(conn: Connection, *, hook, job, status: str, will_retry: bool, response_status: int | None,
           started_at, finished_at, duration_ms: int, error: str | None) -> str | None:
    """Log an attempt, unless its webhook was deleted meanwhile ("deleting the webhook deletes
    its log", URL and all): the webhook's row is locked until the commit, so a deletion either
    ran before (nothing is logged) or waits and deletes this row too (service.remove)."""
    if conn.execute(select(webhooks.c.id).where(webhooks.c.id == hook.id).with_for_update()).first() is None:
        return None
    payload = job.payload or {}
    delivery_id = new_id()
    conn.execute(webhook_deliveries.insert().values(
        id=delivery_id, organization_id=hook.organization_id, webhook_id=hook.id, job_id=job.id,
        event=str(payload.get("event", ""))[:100], event_uuid=str(payload.get("uuid", ""))[:64], url=hook.url,
        attempt=job.attempts, status=status, will_retry=will_retry, response_status=response_status,
        duration_ms=duration_ms, error=error[:MAX_ERROR_CHARS] if error else None,
        started_at=started_at, finished_at=finished_at,
    ))
    conn.execute(delete(webhook_deliveries).where(webhook_deliveries.c.webhook_id == hook.id,
                                                  webhook_deliveries.c.started_at < started_at - RETENTION))
    return delivery_id


def to_wire(row, *, redact_url: bool = False) -> dict:
    """One attempt; redact_url: its URL without secrets (read-only keys, as service.to_wire)."""
    return {
        "id": row.id, "webhook_id": row.webhook_id, "event": row.event, "event_uuid": row.event_uuid,
        "url": logs.redact_url(row.url) if redact_url else row.url,
        "attempt": row.attempt, "status": row.status, "will_retry": bool(row.will_retry),
        "response_status": row.response_status, "duration_ms": row.duration_ms, "error": row.error,
        "started_at": iso(row.started_at), "finished_at": iso(row.finished_at),
    }


def page(conn: Connection, webhook_id: str, *, limit: int, offset: int, status: str | None = None,
         event_uuid: str | None = None) -> tuple[list, int]:
    """Newest first; (rows, total_count), counted as every list counts (paging.bounded_count):
    a month of a busy webhook's attempts is not walked for each page."""
    return _LOG.page(conn, {"webhook_id": webhook_id, "status": status, "event_uuid": event_uuid},
                     offset=offset, limit=limit)


_LOG = paging.Listing(
    webhook_deliveries, webhook_deliveries.c.webhook_id == bindparam("webhook_id"), {
        "status": webhook_deliveries.c.status == bindparam("status"),
        "event_uuid": webhook_deliveries.c.event_uuid == bindparam("event_uuid"),
    }, order_by=(webhook_deliveries.c.started_at.desc(), webhook_deliveries.c.id.desc()))


def get_or_404(conn: Connection, organization_id: str, webhook_id: str, delivery_id: str):
    row = db.owned_or_404(conn, webhook_deliveries, organization_id, delivery_id, "Delivery")
    if row.webhook_id != webhook_id:
        raise NotFound(f"Delivery {delivery_id} not found", {"id": ["not found"]})
    return row


def resend(conn: Connection, organization_id: str, webhook_id: str, delivery_id: str, *,
           max_attempts: int) -> dict:
    """Queue the event of a failed delivery again; returns {event, uuid}.

    422 when the event was delivered (some attempt succeeded), 409 while its original job is
    still queued or running (it will be retried anyway), 409 if its body is gone.
    """
    row = get_or_404(conn, organization_id, webhook_id, delivery_id)
    if row.status != FAILED:
        raise Unprocessable(f"Delivery {row.id} succeeded; there is nothing to resend",
                            {"delivery": ["succeeded"]})
    delivered = conn.execute(select(webhook_deliveries.c.id).where(
        webhook_deliveries.c.webhook_id == webhook_id, webhook_deliveries.c.event_uuid == row.event_uuid,
        webhook_deliveries.c.status == SUCCEEDED).limit(1)).first()
    if delivered is not None:
        raise Unprocessable(f"Event {row.event_uuid} was delivered (delivery {delivered.id}); nothing to resend",
                            {"delivery": ["event already delivered"]})
    job = conn.execute(select(jobs.c.status, jobs.c.payload).where(jobs.c.id == row.job_id)).first() \
        if row.job_id is not None else None
    if job is None or not job.payload:
        raise Conflict(f"The body of event {row.event_uuid} is no longer stored; it cannot be resent",
                       {"delivery": ["event body no longer stored"]})
    if job.status in (job_queue.QUEUED, job_queue.RUNNING):
        raise Conflict(f"Event {row.event_uuid} is still queued for another attempt",
                       {"delivery": ["event still being retried"]})
    pending = conn.execute(select(jobs.c.payload).where(
        jobs.c.kind == "deliver_webhook", jobs.c.organization_id == organization_id,
        jobs.c.status.in_((job_queue.QUEUED, job_queue.RUNNING)), jobs.c.id > row.job_id,
    ).order_by(jobs.c.id).limit(1000)).scalars()
    for payload in pending:  # a resend already queued: do not queue the event twice
        if isinstance(payload, dict) and payload.get("uuid") == row.event_uuid:
            raise Conflict(f"Event {row.event_uuid} is already queued to be resent",
                           {"delivery": ["event already queued"]})
    job_queue.enqueue(conn, kind="deliver_webhook", organization_id=organization_id, payload=job.payload,
                      max_attempts=max_attempts)
    return {"event": row.event, "uuid": row.event_uuid}
