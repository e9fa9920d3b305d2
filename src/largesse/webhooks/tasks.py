"""Delivering a queued webhook event: one signed POST, retried with the queue's backoff.

An attempt has one deadline (LARGESSE_WEBHOOK_TIMEOUT_SECONDS, default 10 s) covering DNS,
connect, TLS, sending and reading the answer (webhooks/sender.py), and goes only to an
address the guard accepted (webhooks/addresses.py). Every attempt is logged
(webhooks/deliveries.py).
"""

from __future__ import annotations

import base64
import logging
import time
from urllib.parse import unquote, urlsplit

from largesse import db
from largesse.crypto import KeyUnavailable
from largesse.delivery import jobs as job_queue
from largesse.delivery.transport import DeliveryError
from largesse.timeutil import utcnow
from largesse.webhooks import addresses, deliveries, sender, service, signatures

log = logging.getLogger("largesse.webhooks")

USER_AGENT = "Largesse-Webhooks/1"


class _Failed(Exception):
    def __init__(self, message: str, *, permanent: bool, response_status: int | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.response_status = response_status


def deliver_webhook(ctx, job) -> str:
    """POST the event to the organization's current webhook URL; 2xx finishes the job.

    The webhook is read at delivery time, so a replaced URL receives queued events and a
    deleted webhook drops them: its queued events are dropped with it (service.remove), and an
    event that a worker was attempting meanwhile is not retried at a webhook created after it
    happened (another URL, another key). The body is the one stored at emit time (same uuid on
    every attempt, so receivers can dedupe).
    """
    with db.read(ctx.engine) as conn:
        hook = service.for_org(conn, job.organization_id) if job.organization_id else None
    if hook is None or not job.payload or hook.created_at > job.created_at:
        with db.write(ctx.engine) as conn:
            job_queue.mark_done(conn, job, ctx.worker_id, note="no webhook")
        return "skipped"
    settings = ctx.settings
    started_at, started = utcnow(), time.monotonic()
    deadline = started + settings.webhook_timeout_seconds
    try:
        status = _attempt(ctx, hook, job, deadline)
        failure = None
    except _Failed as exc:
        status, failure = exc.response_status, exc
    record = dict(hook=hook, job=job, response_status=status, started_at=started_at, finished_at=utcnow(),
                  duration_ms=int((time.monotonic() - started) * 1000))
    if failure is None:
        with db.write(ctx.engine) as conn:
            deliveries.record(conn, status=deliveries.SUCCEEDED, will_retry=False, error=None, **record)
            job_queue.mark_done(conn, job, ctx.worker_id, note=f"{status}")
        return "done"
    will_retry = not failure.permanent and job.attempts < job.max_attempts
    with db.write(ctx.engine) as conn:
        deliveries.record(conn, status=deliveries.FAILED, will_retry=will_retry, error=str(failure), **record)
    raise DeliveryError(str(failure), permanent=failure.permanent)


def _attempt(ctx, hook, job, deadline: float) -> int:
    """One POST; the 2xx status, or _Failed saying why not and whether to try again."""
    settings = ctx.settings
    try:
        key = service.signing_key(ctx.engine, settings, hook)
    except KeyUnavailable as exc:  # the operator can fix LARGESSE_SECRET_KEY: retry
        log.error("webhook %s: %s", hook.id, exc)
        raise _Failed(str(exc), permanent=False) from None
    try:
        target, resolved = addresses.check_for_send(hook.url, settings.webhook_allow_private, deadline,
                                                     hook.organization_id)
    except addresses.UnsafeURL as exc:  # waiting does not make an internal address acceptable
        # The host only: a URL path or query may carry the receiver's own secret (Slack-style hooks).
        raise _Failed(f"refused to send to host {urlsplit(hook.url).hostname}: url {exc}", permanent=True) from None
    except addresses.ResolutionFailed as exc:
        raise _Failed(str(exc), permanent=False) from None
    raw = service.encode(job.payload)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
               **signatures.headers(key, str(job.payload.get("uuid") or f"job-{job.id}"), int(time.time()), raw)}
    if target.username is not None:  # credentials in the URL: HTTP Basic, as httpx sent them
        credentials = f"{unquote(target.username)}:{unquote(target.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode("ascii")
    try:
        answer = sender.post(target, resolved, raw, headers, deadline)
    except sender.SendFailed as exc:
        raise _Failed(f"webhook POST failed: {exc}", permanent=False) from None
    if not 200 <= answer.status < 300:
        raise _Failed(f"webhook endpoint answered {answer.status}", permanent=False, response_status=answer.status)
    return answer.status
