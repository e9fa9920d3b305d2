"""Delivering a queued webhook event: one signed POST, retried with the queue's backoff."""

from __future__ import annotations

import httpx

from largesse import db
from largesse.delivery import jobs as job_queue
from largesse.delivery.transport import DeliveryError
from largesse.webhooks import service

TIMEOUT_SECONDS = 10.0
USER_AGENT = "Largesse-Webhooks/1"


def deliver_webhook(ctx, job) -> str:
    """POST the event to the organization's current webhook URL; 2xx finishes the job.

    The webhook is read at delivery time, so a replaced URL receives queued events and a
    deleted webhook drops them. The body is the one stored at emit time (same uuid on every
    attempt, so receivers can dedupe).
    """
    with db.read(ctx.engine) as conn:
        hook = service.for_org(conn, job.organization_id) if job.organization_id else None
    if hook is None or not job.payload:
        with db.write(ctx.engine) as conn:
            job_queue.mark_done(conn, job, ctx.worker_id, note="no webhook")
        return "skipped"
    raw = service.encode(job.payload)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
               service.SIGNATURE_HEADER: service.sign(hook.private_key, raw)}
    try:
        response = httpx.post(hook.url, content=raw, headers=headers, timeout=TIMEOUT_SECONDS,
                              follow_redirects=False)
    except httpx.HTTPError as exc:
        raise DeliveryError(f"webhook POST failed: {type(exc).__name__}", permanent=False) from None
    if not 200 <= response.status_code < 300:
        raise DeliveryError(f"webhook endpoint answered {response.status_code}", permanent=False)
    with db.write(ctx.engine) as conn:
        job_queue.mark_done(conn, job, ctx.worker_id, note=f"{response.status_code}")
    return "done"
