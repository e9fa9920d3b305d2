"""What a claimed job does. Each handler is idempotent: a job may run twice (a lease taken
over, a crash after sending but before the commit), so it first checks that the work is
still to be done, and its final write is conditional on the state it expects.

deliver_reward, in three steps, each done for a whole claimed batch at once:
1. after the claim (prepare_batch): in a read transaction, the reward must still be ACTIVE
   with delivery PENDING/SCHEDULED and its email's data is gathered; then one short write
   transaction issues the fresh redemption tokens (committed before the email carries them,
   so the link in any email that went out always works) and finishes the jobs with nothing
   to send. The reads hold no write lock: on SQLite a worker's write transactions are what
   API requests wait for.
2. render and send each email, outside any transaction;
3. complete_sent, once per batch: one write transaction marks every sent reward's delivery
   SUCCEEDED (conditional) and their jobs done.
A process that dies between the SMTP server's acceptance and step 3 sends the email again
when the job is reclaimed: delivery is at-least-once (docs/delivery.md); a batch is up to 20 emails (worker.BATCH).

Job kinds are dispatched by `job.kind` in run_claimed: a new kind is a function of
(ctx, job) added there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select, update

from largesse import db
from largesse.campaigns import service as campaigns_service
from largesse.config import Settings
from largesse.dashboard import bulk as dashboard_bulk
from largesse.dashboard import signin as dashboard_signin
from largesse.delivery import compose, service
from largesse.delivery import jobs as job_queue
from largesse.delivery.transport import DeliveryError, sandbox_outcome
from largesse.fields import service as fields_service
from largesse.ops import metrics
from largesse.orders import lifecycle
from largesse.orders.models import reward_field_values, rewards
from largesse.orgs.models import organizations
from largesse.redemption import tokens
from largesse.reports.generate import generate_report
from largesse.timeutil import utcnow
from largesse.webhooks import service as webhooks
from largesse.webhooks.tasks import deliver_webhook

log = logging.getLogger("largesse.delivery")

SMS_NOT_IMPLEMENTED = ("SMS delivery is not implemented in this version of Largesse: no text message was sent. "
                       "Cancel the reward, or order it again with EMAIL or LINK delivery")


@dataclass
class Context:
    engine: object
    settings: Settings
    worker_id: str
    transport: object
    # deliver_reward jobs whose email went out and whose completion is still to be written.
    sent: list = field(default_factory=list)


@dataclass
class Claimed:
    """A claimed job and what the claim transaction prepared for it."""

    job: object
    mail: compose.RewardMail | None = None
    token: str | None = None
    error: DeliveryError | None = None
    skipped: bool = False
    note: str | None = None


def prepare_batch(ctx: Context, rows) -> list[Claimed]:
    """Step 1 for a claimed batch: checks and data in a read transaction, then the tokens and
    the skipped jobs in one short write transaction."""
    items, seen = [], set()
    with db.read(ctx.engine) as conn:
        batch = _Reads(conn, [job.reward_id for job in rows if job.kind == "deliver_reward" and job.reward_id])
        for job in rows:
            item = Claimed(job)
            items.append(item)
            if job.kind != "deliver_reward":
                continue
            try:
                item.mail, item.note = _check(batch, job, ctx.settings)
                if item.mail is None or job.reward_id in seen:
                    item.mail = None
                    item.note = item.note or "skipped: duplicate job"
                    item.skipped = True
            except DeliveryError as exc:
                item.error = exc
            except Exception as exc:
                if db.is_unavailable(exc):
                    raise
                log.exception("job %s: preparing the delivery failed", job.id)
                item.error = DeliveryError(f"{type(exc).__name__}: {exc}", permanent=False)
            seen.add(job.reward_id)
    sending = [i for i in items if i.mail is not None]
    skipped = [i for i in items if i.skipped]
    if sending or skipped:
        with db.write(ctx.engine) as conn:
            issued = tokens.issue_many(conn, [i.job.reward_id for i in sending])
            for item in skipped:
                job_queue.mark_done(conn, item.job, ctx.worker_id, item.note)
    for item in sending:
        item.token = issued[item.job.reward_id]
    return items


def run_claimed(ctx: Context, item: Claimed) -> str:
    """Steps 2 and 3 of a prepared job, or the whole of any other kind; records the outcome."""
    job = item.job
    if item.skipped:
        metrics.delivery("skipped")
        return "skipped"
    try:
        if item.error is not None:
            raise item.error
        handler = HANDLERS.get(job.kind)
        if handler is None:
            raise DeliveryError(f"unknown job kind {job.kind!r}", permanent=True)
        return handler(ctx, item)
    except DeliveryError as exc:
        return fail(ctx, job, str(exc), permanent=exc.permanent)
    except Exception as exc:  # a bug or the database: retry with backoff, keep the worker alive
        if db.is_unavailable(exc):
            # The database is out of reach: recording a failure would fail too. The job stays
            # `running`; the worker stops renewing its lease and backs off, and the job is
            # reclaimed once the lease runs out (worker.py).
            raise
        log.exception("job %s (%s) raised", job.id, job.kind)
        return fail(ctx, job, f"{type(exc).__name__}: {exc}", permanent=False)


def fail(ctx: Context, job, error: str, *, permanent: bool) -> str:
    settings = ctx.settings
    with db.write(ctx.engine) as conn:
        status = job_queue.mark_failed(conn, job, ctx.worker_id, error, permanent=permanent,
                                       base=settings.job_retry_base_seconds, cap=settings.job_retry_max_seconds)
        if status == job_queue.DEAD and job.kind == "deliver_reward" and job.reward_id:
            failed = conn.execute(
                update(rewards)
                .where(rewards.c.id == job.reward_id, rewards.c.delivery_status.in_(("PENDING", "SCHEDULED")))
                .values(delivery_status="FAILED", delivery_error=error[:2000])
            ).rowcount
            if failed:
                webhooks.emit(conn, job.organization_id, [("REWARDS.DELIVERY.FAILED", job.reward_id)])
    log.info("job %s (%s) attempt %s failed (%s): %s", job.id, job.kind, job.attempts,
             status or "lease lost", error)
    metrics.job_failed(job.kind, status or "lost")
    return status or "lost"


class _Reads:
    """What the checks of a claimed batch read, in a few statements for the whole batch: the
    rewards (with their organization's name) and their custom field values by id, each
    organization's fields and each campaign once."""

    def __init__(self, conn, reward_ids: list[str]):
        self.conn = conn
        self.rewards, self.values = {}, {}
        self.fields: dict[str, list[str]] = {}
        self.campaigns: dict[tuple[str, str], object] = {}
        if not reward_ids:
            return
        self.rewards = {r.id: r for r in conn.execute(
            select(rewards, organizations.c.name.label("organization_name"))
            .join(organizations, organizations.c.id == rewards.c.organization_id)
            .where(rewards.c.id.in_(reward_ids)))}
        for row in conn.execute(select(reward_field_values.c.reward_id, reward_field_values.c.label,
                                       reward_field_values.c.value)
                                .where(reward_field_values.c.reward_id.in_(reward_ids))):
            self.values.setdefault(row.reward_id, []).append((row.label, row.value))

    def field_labels(self, organization_id: str) -> list[str]:
        if organization_id not in self.fields:
            self.fields[organization_id] = [f.label for f in fields_service.list_for(self.conn, organization_id)]
        return self.fields[organization_id]

    def campaign(self, organization_id: str, campaign_id: str):
        key = (organization_id, campaign_id)
        if key not in self.campaigns:
            self.campaigns[key] = campaigns_service.get(self.conn, organization_id, campaign_id)
        return self.campaigns[key]


def _check(batch: _Reads, job, settings: Settings) -> tuple[compose.RewardMail | None, str | None]:
    """Is there still an email to send? (mail, None) if so, (None, why not) otherwise."""
    reward = batch.rewards.get(job.reward_id)
    if reward is None:
        return None, "skipped: reward not found"
    # lifecycle.status: a reward past its expiry is expired even before the sweep has run, and
    # a link that opens an "expired" page is no email to send.
    status = lifecycle.status(reward, at=utcnow())
    if status != "ACTIVE" or reward.delivery_status not in ("PENDING", "SCHEDULED"):
        return None, f"skipped: reward {status}, delivery {reward.delivery_status}"
    if reward.delivery_method == "PHONE":
        raise DeliveryError(SMS_NOT_IMPLEMENTED, permanent=True)
    if reward.delivery_method != "EMAIL" or not reward.recipient_email:
        raise DeliveryError(f"nothing to deliver for a {reward.delivery_method} reward", permanent=True)
    if settings.sandbox:
        sandbox_outcome(reward.recipient_email, job.attempts)
    return _gather(batch, reward), None


def _send(ctx: Context, item: Claimed) -> str:
    settings = ctx.settings
    try:
        message = compose.build(item.mail, link=tokens.link(settings.public_url, item.token),
                                mail_from=settings.mail_from, mail_from_name=settings.mail_from_name, now=utcnow())
    except (ValueError, TypeError) as exc:  # e.g. an address the email library cannot encode
        raise DeliveryError(f"cannot build the message: {exc}", permanent=True) from None
    ctx.transport.send(message)
    ctx.sent.append(item.job)  # step 3 follows for the whole batch: complete_sent
    return "sent"


def complete_sent(ctx: Context) -> int:
    """Step 3 for every email sent since the last call: one write transaction."""
    sent, ctx.sent = ctx.sent, []
    if not sent:
        return 0
    try:
        _complete_in_one_transaction(ctx, sent)
    except BaseException:
        ctx.sent = sent + ctx.sent  # still to complete: the caller may try again
        raise
    for _ in sent:
        metrics.delivery("sent")
    return len(sent)


def _complete_in_one_transaction(ctx: Context, sent: list) -> None:
    """Idempotent: a reward already SUCCEEDED and a job no longer this worker's running one are
    left alone, so running it again after a commit whose answer was lost changes nothing."""
    with db.write(ctx.engine) as conn:
        if conn.dialect.name == "postgresql":
            # Losing this commit in a server crash only means sending the emails again, which
            # the at-least-once contract allows; not waiting for the WAL flush halves the cost.
            conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
        delivered = conn.execute(
            update(rewards)
            .where(rewards.c.id.in_([job.reward_id for job in sent]),
                   rewards.c.delivery_status.in_(("PENDING", "SCHEDULED")))
            .values(delivery_status="SUCCEEDED", delivered_at=utcnow(), delivery_error=None)
            .returning(rewards.c.id, rewards.c.organization_id)
        ).all()
        by_org: dict[str, list] = {}
        for row in delivered:
            by_org.setdefault(row.organization_id, []).append(("REWARDS.DELIVERY.SUCCEEDED", row.id))
        for org, events in by_org.items():
            webhooks.emit(conn, org, events)
        job_queue.mark_done_many(conn, [job.id for job in sent], ctx.worker_id)


def _gather(batch: _Reads, reward) -> compose.RewardMail:
    campaign = batch.campaign(reward.organization_id, reward.campaign_id) if reward.campaign_id else None
    values = compose.placeholder_values(batch.field_labels(reward.organization_id), batch.values.get(reward.id, ()))
    return compose.RewardMail(
        reward_id=reward.id, recipient_name=reward.recipient_name, recipient_email=reward.recipient_email,
        denomination_cents=reward.denomination_cents, currency_code=reward.currency_code,
        expires_at=reward.expires_at, language=reward.language, delivery_meta=reward.delivery_meta,
        email_style=campaign.email_style if campaign else None,
        webpage_style=campaign.webpage_style if campaign else None, field_values=values,
        organization_name=reward.organization_name,  # read with the batch's rewards
    )


def expire_rewards(ctx: Context, job) -> str:
    """The periodic sweep: expire and refund overdue rewards, then delete finished jobs past
    their retention (LARGESSE_JOB_RETENTION_DAYS) and the dashboard's uploaded files past theirs.
    Rewards that could not be expired (each logged) are tried again at the next run, at the
    sweep's interval: the clean-up and the schedule do not wait for them."""
    try:
        count = service.expire_due(ctx.engine)
    except service.ExpiryFailed as exc:
        count = exc.expired
        log.error("%s rewards could not be expired this run (first: %s); the next run tries them again",
                  len(exc.failed), exc.failed[0])
    if count:
        log.info("expired and refunded %s rewards", count)
    if ctx.settings.job_retention_days:
        pruned = job_queue.prune_finished(
            ctx.engine, ran_before=utcnow() - timedelta(days=ctx.settings.job_retention_days))
        if pruned:
            log.info("deleted %s finished jobs older than %s days", pruned, ctx.settings.job_retention_days)
    with db.write(ctx.engine) as conn:  # the dashboard's uploaded CSV files past their days
        uploads_pruned = dashboard_bulk.prune_uploads(conn, now=utcnow())
    if uploads_pruned:
        log.info("deleted %s uploaded CSV files older than %s days", uploads_pruned, dashboard_bulk.UPLOAD_DAYS)
    with db.write(ctx.engine) as conn:
        job_queue.reschedule(conn, job, ctx.worker_id, ctx.settings.expire_interval_seconds)
    return "swept"


# Every job kind and what runs it (run_claimed); `largesse jobs list --kind` takes these.
HANDLERS = {
    "deliver_reward": _send,
    "expire_rewards": lambda ctx, item: expire_rewards(ctx, item.job),
    "deliver_webhook": lambda ctx, item: deliver_webhook(ctx, item.job),
    "generate_report": lambda ctx, item: generate_report(ctx, item.job),
    dashboard_signin.JOB_KIND: lambda ctx, item: dashboard_signin.send_signin_email(ctx, item.job),  # sign-in email
}
KINDS = tuple(HANDLERS)
