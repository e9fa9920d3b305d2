"""The jobs outbox as a queue: claim with a lease, finish, retry with backoff, reclaim.

A claim is one short write transaction. On PostgreSQL it selects due rows with
FOR UPDATE SKIP LOCKED, so concurrent workers take disjoint sets without waiting for each
other; on SQLite the whole claim runs under BEGIN IMMEDIATE (db.write), which serialises
claimers on the database lock instead. Either way a claimed row is marked `running` with
`locked_by` and `locked_until` (the lease) before the transaction commits.

A worker that dies leaves its rows `running` with a lease in the past; `reclaim_expired`
puts them back in the queue. Every state change after the claim is conditional on
`locked_by`: a worker whose lease was taken over cannot overwrite the new owner's result.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection, Engine, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from largesse import db
from largesse.delivery.models import jobs
from largesse.timeutil import utcnow

QUEUED, RUNNING, DONE, DEAD = "queued", "running", "done", "dead"
STATUSES = (QUEUED, RUNNING, DONE, DEAD)
# Kinds that are one row rescheduling itself forever (never "done", never "dead").
PERIODIC = ("expire_rewards",)


def backoff_seconds(attempts: int, base: float, cap: float) -> float:
    """base * 2^(attempts-1), capped: 30 s, 60 s, 120 s ... 1 h with the defaults."""
    exponent = min(max(attempts - 1, 0), 30)
    return min(cap, base * (2 ** exponent))


def queued_row(*, kind: str, organization_id: str | None = None, reward_id: str | None = None,
               payload: dict | None = None, run_after=None, max_attempts: int = 8, now=None) -> dict:
    """A new job, due at run_after (default now): the one shape every producer inserts."""
    now = now or utcnow()
    return {"kind": kind, "organization_id": organization_id, "reward_id": reward_id, "payload": payload,
            "status": QUEUED, "attempts": 0, "max_attempts": max_attempts, "run_after": run_after or now,
            "created_at": now, "updated_at": now}


def enqueue(conn: Connection, **job) -> None:
    """Insert one job (queued_row's arguments) in the caller's transaction."""
    conn.execute(jobs.insert(), queued_row(**job))


def ensure_periodic(engine: Engine, kind: str) -> None:
    """Create the singleton row of a periodic job unless it exists (safe from any number
    of workers at once: the unique dedupe_key turns the losers' inserts into no-ops)."""
    now = utcnow()
    values = dict(kind=kind, status=QUEUED, attempts=0, max_attempts=1_000_000, run_after=now,
                  created_at=now, updated_at=now, dedupe_key=kind)
    insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert
    with db.write(engine) as conn:
        exists = conn.execute(select(jobs.c.id).where(jobs.c.dedupe_key == kind)).first()
        if exists is None:
            conn.execute(insert(jobs).values(**values).on_conflict_do_nothing(index_elements=["dedupe_key"]))


def claim(engine: Engine, worker_id: str, *, limit: int, lease_seconds: float, prepare=None) -> list:
    """Take up to `limit` due jobs for this worker; returns their rows (attempts counted).

    `prepare(conn, rows)`, when given, runs inside the claim transaction and its result is
    returned instead: the worker uses it to check and set up a whole batch in one commit.
    """
    now = utcnow()
    due = (select(jobs.c.id).where(jobs.c.status == QUEUED, jobs.c.run_after <= now)
           .order_by(jobs.c.run_after, jobs.c.id).limit(limit))
    if engine.dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True)
    with db.write(engine) as conn:
        ids = list(conn.execute(due).scalars())
        if not ids:
            return []
        rows = conn.execute(
            update(jobs).where(jobs.c.id.in_(ids), jobs.c.status == QUEUED)
            .values(status=RUNNING, locked_by=worker_id, locked_until=now + timedelta(seconds=lease_seconds),
                    attempts=jobs.c.attempts + 1, updated_at=now)
            .returning(*jobs.c)
        ).all()
        rows.sort(key=lambda r: (r.run_after, r.id))
        return prepare(conn, rows) if prepare is not None else rows


def reclaim_expired(engine: Engine) -> int:
    """Requeue jobs whose worker's lease ran out (the process was killed or hung)."""
    now = utcnow()
    with db.write(engine) as conn:
        return conn.execute(
            update(jobs).where(jobs.c.status == RUNNING, jobs.c.locked_until < now)
            .values(status=QUEUED, locked_by=None, locked_until=None, run_after=now, updated_at=now,
                    last_error="lease expired: the worker stopped or hung before finishing")
        ).rowcount


def _owned(job, worker_id: str):
    return (jobs.c.id == job.id, jobs.c.status == RUNNING, jobs.c.locked_by == worker_id)


def mark_done(conn: Connection, job, worker_id: str, note: str | None = None) -> bool:
    """Finish a job; False when this worker no longer holds it (its lease was taken over)."""
    return conn.execute(
        update(jobs).where(*_owned(job, worker_id))
        .values(status=DONE, locked_by=None, locked_until=None, last_error=note, updated_at=utcnow())
    ).rowcount == 1


def reschedule(conn: Connection, job, worker_id: str, delay_seconds: float, error: str | None = None) -> bool:
    """Put a periodic job back in the queue for its next run."""
    now = utcnow()
    return conn.execute(
        update(jobs).where(*_owned(job, worker_id))
        .values(status=QUEUED, locked_by=None, locked_until=None, attempts=0 if error is None else jobs.c.attempts,
                run_after=now + timedelta(seconds=delay_seconds), last_error=error, updated_at=now)
    ).rowcount == 1


def mark_failed(conn: Connection, job, worker_id: str, error: str, *, permanent: bool, base: float,
                cap: float) -> str | None:
    """Retry later with backoff, or give up ("dead") when permanent or out of attempts.

    Returns the new status, or None when this worker no longer holds the job.
    """
    now = utcnow()
    error = error[:2000]
    if job.kind in PERIODIC:
        delay = backoff_seconds(job.attempts, base, cap)
        return QUEUED if reschedule(conn, job, worker_id, delay, error) else None
    if permanent or job.attempts >= job.max_attempts:
        values = dict(status=DEAD, run_after=now)
    else:
        values = dict(status=QUEUED, run_after=now + timedelta(seconds=backoff_seconds(job.attempts, base, cap)))
    changed = conn.execute(
        update(jobs).where(*_owned(job, worker_id))
        .values(locked_by=None, locked_until=None, last_error=error, updated_at=now, **values)
    ).rowcount
    return values["status"] if changed else None


def list_jobs(conn: Connection, *, status: str | None = None, kind: str | None = None, limit: int = 50):
    query = select(jobs)
    if status:
        query = query.where(jobs.c.status == status)
    if kind:
        query = query.where(jobs.c.kind == kind)
    return conn.execute(query.order_by(jobs.c.id.desc()).limit(limit)).all()


def counts(conn: Connection) -> dict[str, int]:
    return dict(conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all())


def get(conn: Connection, job_id: int):
    return conn.execute(select(jobs).where(jobs.c.id == job_id)).first()


def requeue(conn: Connection, job_ids: list[int]) -> int:
    """Give dead (or done) jobs a fresh set of attempts, due now."""
    if not job_ids:
        return 0
    now = utcnow()
    return conn.execute(
        update(jobs).where(jobs.c.id.in_(job_ids), jobs.c.status.in_((DEAD, DONE)))
        .values(status=QUEUED, attempts=0, run_after=now, locked_by=None, locked_until=None, updated_at=now)
    ).rowcount
