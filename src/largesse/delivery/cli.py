"""Operator commands of the delivery domain: `largesse worker`, `largesse jobs ...`,
`largesse org settings`. Registered by largesse.cli when this module exists."""

from __future__ import annotations

import json
import logging
import os
from typing import Annotated

import typer

from largesse import db
from largesse.cli_common import (
    check_mail_transport,
    emit,
    fail,
    load_settings,
    open_engine,
    require_org,
    shown,
    warn_of_a_missing_key_file,
    warn_without_public_url,
)
from largesse.config import MAX_EXPIRY_DAYS, MAX_THREADS_OR_PROCESSES

jobs_app = typer.Typer(help="The delivery job queue (emails, expiry sweeps).", no_args_is_help=True)


def worker(
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=0, max=MAX_THREADS_OR_PROCESSES, help=(
        "Email threads (default LARGESSE_WORKER_CONCURRENCY; 0 with webhook threads: a webhook-only worker)"))] = None,
    webhook_concurrency: Annotated[int | None, typer.Option(
        "--webhook-concurrency", min=0, max=MAX_THREADS_OR_PROCESSES,
        help="Webhook threads (default LARGESSE_WEBHOOK_CONCURRENCY; 0: no webhooks)")] = None,
    once: Annotated[bool, typer.Option("--once", help="Run the jobs due now, then exit")] = False,
):
    """Deliver rewards, webhooks and periodic jobs until stopped (Ctrl-C / SIGTERM finish the jobs
    in hand and hand the unstarted ones back)."""
    import signal

    from largesse.delivery.supervisor import SUPERVISOR_ENV, bind_to_supervisor, lower_priority
    from largesse.delivery.worker import Worker

    settings = load_settings()
    mail = settings.worker_concurrency if concurrency is None else concurrency
    webhook = settings.webhook_concurrency if webhook_concurrency is None else webhook_concurrency
    if mail == 0 and webhook == 0:
        webhook_from = "--webhook-concurrency" if webhook_concurrency is not None else "LARGESSE_WEBHOOK_CONCURRENCY"
        fail(f"--concurrency 0 with {webhook_from} 0 leaves the worker no thread to deliver with: "
             "give either at least 1")
    check_mail_transport(settings)
    lower_priority(settings)  # a child of `largesse serve` yields the CPU to it (first: threads inherit it)
    bind_to_supervisor()  # ... and dies with it
    from largesse.ops import logs

    logs.configure(settings.log_format, settings.log_level)  # same redacting text/JSON lines as `serve`
    # (a child of `serve` inherits serve's LARGESSE_PUBLIC_URL, so serve alone warns then)
    warn_without_public_url(settings, bool(os.environ.get("LARGESSE_PUBLIC_URL")), "delivery")
    engine = open_engine(settings, create=True)  # a worker may be the first process on a new database
    if not os.environ.get(SUPERVISOR_ENV):  # a child of `serve`: serve has warned
        warn_of_a_missing_key_file(engine, settings, "delivery")
    w = Worker(engine, settings, concurrency=concurrency, webhook_concurrency=webhook_concurrency)
    if once:
        count = w.drain()
        typer.echo(f"processed {count} jobs")
        return
    signal.signal(signal.SIGTERM, lambda *_: w.stopping.set())
    try:
        w.run_forever()
    except KeyboardInterrupt:
        w.stop()
    # Through the log (LARGESSE_LOG_FORMAT=json: a JSON line, as the worker's others), not a
    # bare print: under `largesse serve` this is a supervised child's last line.
    logging.getLogger("largesse.delivery").info("delivery worker %s stopped; processed %s jobs", w.id, w.processed)


@jobs_app.command("list")
def jobs_list(
    status: Annotated[str | None, typer.Option(help="queued, running, done or dead")] = None,
    kind: Annotated[str | None, typer.Option(help="deliver_reward, expire_rewards ...")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
):
    """List jobs, newest first, with a count per status."""
    from largesse.delivery import jobs as job_queue
    from largesse.delivery.tasks import KINDS

    if status is not None and status not in job_queue.STATUSES:
        fail(f"--status must be one of {', '.join(job_queue.STATUSES)}")
    if kind is not None and kind not in KINDS:
        fail(f"--kind must be one of {', '.join(KINDS)}")
    with db.read(open_engine()) as conn:
        rows = job_queue.list_jobs(conn, status=status, kind=kind, limit=limit)
        counts = job_queue.counts(conn)
    data = {"counts": counts, "jobs": [
        {"id": r.id, "kind": r.kind, "status": r.status, "reward_id": r.reward_id, "attempts": r.attempts,
         "max_attempts": r.max_attempts, "run_after": str(r.run_after), "locked_by": r.locked_by,
         "last_error": r.last_error} for r in rows]}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    lines = ["  ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no jobs"]
    lines += [f"{r.id:>8}  {r.kind:<15} {r.status:<8} {r.reward_id or '-':<20} {r.attempts}/{r.max_attempts}  "
              f"{r.run_after:%Y-%m-%d %H:%M:%S}  {shown(r.last_error)[:80]}" for r in rows]
    emit(data, False, "\n".join(lines))


@jobs_app.command("retry")
def jobs_retry(
    job_id: Annotated[int | None, typer.Argument(help="The job's ID (from `jobs list`)")] = None,
    all_dead: Annotated[bool, typer.Option("--all-dead", help="Retry every dead job")] = False,
):
    """Give a dead job (or every dead job) a fresh set of attempts, due now. A reward whose
    delivery FAILED goes back to PENDING when its job is retried."""
    from sqlalchemy import select, update

    from largesse.delivery import jobs as job_queue
    from largesse.delivery.models import jobs
    from largesse.orders.models import rewards

    if job_id is not None and all_dead:
        fail("give either a JOB_ID or --all-dead, not both")
    if job_id is None and not all_dead:
        fail("give a JOB_ID or --all-dead")
    with db.write(open_engine()) as conn:
        if all_dead:
            ids = list(conn.execute(select(jobs.c.id).where(jobs.c.status == job_queue.DEAD)).scalars())
        else:
            row = job_queue.get(conn, job_id)
            if row is None:
                fail(f"no job {job_id}")
            if row.status != job_queue.DEAD:
                fail(f"job {job_id} is {row.status}; only dead jobs are retried")
            ids = [job_id]
        requeued = job_queue.requeue(conn, ids)
        reward_ids = list(conn.execute(
            select(jobs.c.reward_id).where(jobs.c.id.in_(requeued), jobs.c.kind == "deliver_reward",
                                           jobs.c.reward_id.is_not(None))).scalars()) if requeued else []
        if reward_ids:  # their FAILED rewards are PENDING again
            conn.execute(update(rewards)
                         .where(rewards.c.id.in_(reward_ids), rewards.c.status == "ACTIVE",
                                rewards.c.delivery_status == "FAILED")
                         .values(delivery_status="PENDING", delivery_error=None))
    count = len(requeued)
    typer.echo(f"requeued {count} job{'s' if count != 1 else ''}")


def org_settings(
    org: Annotated[str, typer.Option("--org", help="Organization ID")],
    reward_expiry_days: Annotated[int | None, typer.Option(
        "--reward-expiry-days", help="Days until an unredeemed reward expires and is refunded")] = None,
    no_expiry: Annotated[bool, typer.Option("--no-reward-expiry", help=(
        "Back to the default: for a campaign the organization's expiry, for an organization the "
        "server's LARGESSE_REWARD_EXPIRY_DAYS"))] = False,
    campaign: Annotated[str | None, typer.Option("--campaign", help="Set it on this campaign instead")] = None,
):
    """Show an organization's (or one campaign's) reward expiry, or set it; applies to new rewards."""
    from largesse.delivery import service

    where = f"campaign {campaign}" if campaign else f"organization {org}"
    if reward_expiry_days is not None and no_expiry:
        fail("give either --reward-expiry-days N or --no-reward-expiry, not both")
    if reward_expiry_days is None and not no_expiry:  # nothing to change: show it
        with db.read(open_engine()) as conn:
            require_org(conn, org)
            found, days = service.expiry_days_of(conn, org=org, campaign_id=campaign)
            org_days = service.expiry_days_of(conn, org=org, campaign_id=None)[1] if campaign else None
        if not found:
            fail(f"no campaign {campaign} in {org}")
        default = load_settings().reward_expiry_days
        server = (f"LARGESSE_REWARD_EXPIRY_DAYS: {f'{default} days' if default else 'never'}, as this command "
                  "sees it; the server's own setting applies")
        if days:
            typer.echo(f"reward expiry of {where}: {days} days")
        elif org_days:  # a campaign without its own falls back to the organization's (orders/service._plan)
            typer.echo(f"reward expiry of {where}: not set, so the organization's {org_days} days apply")
        else:
            typer.echo(f"reward expiry of {where}: not set, so the server's default applies ({server})")
        return
    if reward_expiry_days is not None and not 1 <= reward_expiry_days <= MAX_EXPIRY_DAYS:
        fail(f"--reward-expiry-days must be between 1 and {MAX_EXPIRY_DAYS}")
    with db.write(open_engine()) as conn:
        require_org(conn, org)
        if not service.set_expiry_days(conn, org=org, days=reward_expiry_days, campaign_id=campaign):
            fail(f"no campaign {campaign} in {org}")
    typer.echo(f"reward expiry of {where}: "
               f"{f'{reward_expiry_days} days' if reward_expiry_days else 'default'} (new rewards)")


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
    app.add_typer(jobs_app, name="jobs")
    for group in app.registered_groups:
        if group.name == "org" and group.typer_instance is not None:
            group.typer_instance.command("settings")(org_settings)
