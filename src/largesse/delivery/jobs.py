"""The jobs outbox as a queue: claim with a lease, renew it, finish, retry with backoff, reclaim.

A claim is one short write transaction. On PostgreSQL it selects due rows with
FOR UPDATE SKIP LOCKED, so concurrent workers take disjoint sets without waiting for each
other; on SQLite the whole claim runs under BEGIN IMMEDIATE (db.write), which serialises
claimers on the database lock instead. Either way a claimed row is marked `running` with
`locked_by` and `locked_until` (the lease) before the transaction commits.

Lanes and fairness. Every job belongs to a lane (LANES: webhook POSTs in "webhook", everything
else in "mail") and a worker thread claims from one lane only, so a slow webhook receiver can
never occupy the threads that send emails. Within a lane, a claim takes the oldest due job of
each organization in turn, continuing after the organization the previous claim ended with
(round-robin), and fills the rest of the batch in plain due order: an organization with
10,000 queued jobs delays another organization's job by at most one batch per thread.

Leases are short (LARGESSE_JOB_LEASE_SECONDS, 10 s) and the worker's heartbeat renews the
lease of every job it still works on (`renew`). A worker that dies stops renewing; once
its leases pass, `reclaim_expired` puts its jobs back in the queue. Every state change after
the claim is conditional on `locked_by`: a worker whose lease was taken over cannot overwrite
the new owner's result.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

from sqlalchemy import Connection, Engine, delete, func, or_, select, update

from largesse import db
from largesse.delivery.models import jobs
from largesse.orgs.models import organizations
from largesse.timeutil import utcnow

QUEUED, RUNNING, DONE, DEAD = "queued", "running", "done", "dead"
STATUSES = (QUEUED, RUNNING, DONE, DEAD)
# Kinds that are one row rescheduling itself forever (never "done", never "dead").
PERIODIC = ("expire_rewards",)
# Lanes: separate worker threads (and so separate capacity) per kind of work. A kind not
# listed here runs in the mail lane.
MAIL, WEBHOOK = "mail", "webhook"
LANES = {"deliver_webhook": WEBHOOK}
# prune_finished deletes finished jobs in transactions of PRUNE_BATCH rows, at most PRUNE_LIMIT
# per call (the housekeeping sweep calls it every LARGESSE_EXPIRE_INTERVAL_SECONDS).
PRUNE_BATCH, PRUNE_LIMIT = 250, 50_000


# pg_advisory_xact_lock key of claims with a per-organization cap ("LRGSJOBS" in ASCII).
_CAP_LOCK_KEY = 0x4C5247534A4F4253


def lane_of(kind: str) -> str:
    return LANES.get(kind, MAIL)


class Cursor:
    """Where a lane's round-robin over organizations continues: the organization that the
    previous claim served last. Shared by a worker's threads of one lane (a plain attribute:
    a lost update between two threads only changes who is served first)."""

    def __init__(self) -> None:
        self.after: str | None = None


def backoff_seconds(attempts: int, base: float, cap: float) -> float:
    """base * 2^(attempts-1), capped: 30 s, 60 s, 120 s ... 1 h with the defaults."""
    exponent = min(max(attempts - 1, 0), 30)
    return min(cap, base * (2 ** exponent))


def queued_row(*, kind: str, organization_id: str | None = None, reward_id: str | None = None,
               payload: dict | None = None, run_after=None, max_attempts: int = 8, now=None) -> dict:
    """A new job, due at run_after (default now): the one shape every producer inserts."""
    now = now or utcnow()
    return {"kind": kind, "lane": lane_of(kind), "organization_id": organization_id, "reward_id": reward_id,
            "payload": payload, "status": QUEUED, "attempts": 0, "max_attempts": max_attempts,
            "run_after": run_after or now, "created_at": now, "updated_at": now}


def enqueue(conn: Connection, **job) -> None:
    """Insert one job (queued_row's arguments) in the caller's transaction."""
    conn.execute(jobs.insert(), queued_row(**job))


def ensure_periodic(engine: Engine, kind: str) -> None:
    """Create the singleton row of a periodic job unless it exists (safe from any number
    of workers at once: the unique dedupe_key turns the losers' inserts into no-ops)."""
    now = utcnow()
    values = dict(kind=kind, lane=lane_of(kind), status=QUEUED, attempts=0, max_attempts=1_000_000, run_after=now,
                  created_at=now, updated_at=now, dedupe_key=kind)
    insert = db.upsert_insert(engine)
    with db.write(engine) as conn:
        exists = conn.execute(select(jobs.c.id).where(jobs.c.dedupe_key == kind)).first()
        if exists is None:
            conn.execute(insert(jobs).values(**values).on_conflict_do_nothing(index_elements=["dedupe_key"]))


def claim(engine: Engine, worker_id: str, *, limit: int, lease_seconds: float, prepare=None,
          lane: str | None = None, cursor: Cursor | None = None, org_cap: int | None = None,
          environment: str | None = None) -> list:
    """Take up to `limit` due jobs of `lane` (None: any lane) for this worker; returns their rows
    (attempts counted), oldest first.

    Fair share: first the oldest due job of each organization after `cursor` in turn (one
    each, wrapping around once, at most limit - 1 of them), then the oldest due jobs of the
    lane whatever their organization (jobs of no organization, like the expiry sweep, come
    through here; one slot is always left for them when limit > 1). `cursor` moves to the
    last organization served.

    `org_cap`: skip organizations whose customer (the organization and its sub-organizations)
    already has that many jobs of the lane running (in any worker), so that a slow customer
    cannot occupy every thread (the webhook lane).

    `environment` ("sandbox", "production"; None: any): only jobs of that environment's
    organizations, and jobs of none. Servers of both environments may share a database, and a
    job is done with its environment's rules and links (the sandbox's test recipients, each
    environment's LARGESSE_PUBLIC_URL): a worker takes its own environment's jobs only. The
    organizations of the environment are one set per statement (IN a sub-select, hashed once).

    `prepare(conn, rows)`, when given, runs inside the claim transaction and its result is
    returned instead: the worker uses it to check and set up a whole batch in one commit.
    """
    now = utcnow()
    cursor = cursor if cursor is not None else Cursor()
    due = [jobs.c.status == QUEUED, jobs.c.run_after <= now]
    if lane is not None:
        due.append(jobs.c.lane == lane)
    if environment is not None:
        ours = select(organizations.c.id).where(organizations.c.environment == environment)
        due.append(or_(jobs.c.organization_id.is_(None), jobs.c.organization_id.in_(ours)))
    if org_cap is not None:
        # Counted per customer: the organization with every sub-organization of its line (the
        # same root_organization_id), since any key may create sub-organizations; counted apart,
        # one customer's eight held all eight webhook threads.
        running, running_org, job_org = jobs.alias("running_jobs"), organizations.alias("running_org"), \
            organizations.alias("job_org")
        customer = (select(func.coalesce(job_org.c.root_organization_id, job_org.c.id))
                    .where(job_org.c.id == jobs.c.organization_id).correlate(jobs).scalar_subquery())
        busy = (select(func.count()).select_from(
                    running.join(running_org, running_org.c.id == running.c.organization_id))
                .where(running.c.status == RUNNING, running.c.lane == jobs.c.lane,
                       func.coalesce(running_org.c.root_organization_id, running_org.c.id) == customer,
                       # a job whose lease ran out is its dead worker's, not a thread in use: counted,
                       # it held the organization's other webhooks until the heartbeat requeued it
                       running.c.locked_until > now)
                .correlate(jobs).scalar_subquery())
        due.append(or_(jobs.c.organization_id.is_(None), busy < org_cap))
    skip_locked = engine.dialect.name == "postgresql"

    def pick(query):
        return query.with_for_update(skip_locked=True) if skip_locked else query

    with db.write(engine) as conn:
        if org_cap is not None and skip_locked:
            # Counting running jobs and claiming must not interleave between workers, or two of
            # them could both see an organization under its cap; a transaction-scoped advisory
            # lock serialises this lane's claims (SQLite's BEGIN IMMEDIATE already does).
            conn.execute(select(func.pg_advisory_xact_lock(_CAP_LOCK_KEY)))
        taken: list[int] = []
        after, wrapped, served = cursor.after, cursor.after is None, set()
        fair_share = max(1, limit - 1)
        while len(taken) < fair_share:
            query = (select(jobs.c.id, jobs.c.organization_id)
                     .where(*due, jobs.c.organization_id.is_not(None), jobs.c.id.not_in(taken))
                     .order_by(jobs.c.organization_id, jobs.c.run_after).limit(1))
            if after is not None:
                query = query.where(jobs.c.organization_id > after)
            row = conn.execute(pick(query)).first()
            if row is None:
                if wrapped:
                    break
                wrapped, after = True, None
                continue
            if row.organization_id in served:  # around once: every organization had its turn
                break
            served.add(row.organization_id)
            taken.append(row.id)
            after = row.organization_id
        if served:
            cursor.after = after
        if len(taken) < limit:
            rest = (select(jobs.c.id).where(*due, jobs.c.id.not_in(taken))
                    .order_by(jobs.c.run_after, jobs.c.id).limit(limit - len(taken)))
            taken.extend(conn.execute(pick(rest)).scalars())
        if not taken:
            return []
        # By id alone: the rows were read as queued in this transaction, which holds them (FOR
        # UPDATE on PostgreSQL, SQLite's write lock), so they still are. A `status = 'queued'`
        # condition here let PostgreSQL, whose statistics lag a fast-moving queue, walk every
        # queued job for the 20 it takes (6 ms at 19,000 queued; docs/benchmarks.md).
        rows = conn.execute(
            update(jobs).where(jobs.c.id.in_(taken))
            .values(status=RUNNING, locked_by=worker_id, locked_until=now + timedelta(seconds=lease_seconds),
                    attempts=jobs.c.attempts + 1, updated_at=now)
            .returning(*jobs.c)
        ).all()
        rows.sort(key=lambda r: (r.run_after, r.id))
        return prepare(conn, rows) if prepare is not None else rows


def renew(engine: Engine, worker_id: str, job_ids, lease_seconds: float) -> set[int]:
    """The heartbeat: extend the lease of jobs this worker still works on. Returns the ids it
    still holds (a job missing from the answer was taken over after its lease ran out)."""
    ids = list(job_ids)
    if not ids:
        return set()
    now = utcnow()
    with db.write(engine) as conn:
        return set(conn.execute(
            update(jobs).where(jobs.c.id.in_(ids), jobs.c.status == RUNNING, jobs.c.locked_by == worker_id)
            .values(locked_until=now + timedelta(seconds=lease_seconds))
            .returning(jobs.c.id)
        ).scalars())


def release(engine: Engine, worker_id: str, job_ids) -> int:
    """Hand claimed but unstarted jobs back (a stopping worker), due now, their attempt uncounted."""
    ids = list(job_ids)
    if not ids:
        return 0
    with db.write(engine) as conn:
        return conn.execute(
            update(jobs).where(jobs.c.id.in_(ids), jobs.c.locked_by == worker_id, jobs.c.status == RUNNING)
            .values(status=QUEUED, locked_by=None, locked_until=None, updated_at=utcnow(),
                    attempts=jobs.c.attempts - 1)
        ).rowcount


def reclaim_expired(engine: Engine) -> int:
    """Requeue jobs whose worker's lease ran out (the process was killed, hung, or lost the
    database for longer than a lease). A read first: no write lock when there is nothing to do."""
    now = utcnow()
    expired = select(jobs.c.id).where(jobs.c.status == RUNNING, jobs.c.locked_until < now).limit(1)
    with db.read(engine) as conn:
        if conn.execute(expired).first() is None:
            return 0
    with db.write(engine) as conn:
        return conn.execute(
            update(jobs).where(jobs.c.status == RUNNING, jobs.c.locked_until < now)
            .values(status=QUEUED, locked_by=None, locked_until=None, run_after=now, updated_at=now,
                    last_error="lease expired: the worker stopped or hung before finishing")
        ).rowcount


def prune_finished(engine: Engine, *, ran_before, limit: int = PRUNE_LIMIT) -> int:
    """Delete done and dead jobs whose last run was due before `ran_before`; returns how many.

    Without it the table gains a row per email and per webhook event forever, and every index
    an order and a claim write grows with it. Each batch is a short transaction over one range
    of the claim index (status, lane, run_after), so it never walks the jobs it keeps, and
    holds SQLite's write lock about 2 ms (docs/delivery.md). Queued and running jobs, and the
    periodic sweep (always queued or running), are never touched.
    """
    deleted = 0
    for status, lane in itertools.product((DONE, DEAD), (MAIL, WEBHOOK)):
        while deleted < limit:
            batch = min(PRUNE_BATCH, limit - deleted)
            # Held until the delete (FOR UPDATE on PostgreSQL, SQLite's write lock): a `jobs
            # retry` of one of them waits, then finds it gone. The delete names the rows by id
            # alone: with a status condition SQLite walked every done job.
            oldest = (select(jobs.c.id)
                      .where(jobs.c.status == status, jobs.c.lane == lane, jobs.c.run_after < ran_before)
                      .order_by(jobs.c.run_after, jobs.c.id).limit(batch).with_for_update(skip_locked=True))
            with db.write(engine) as conn:
                ids = list(conn.execute(oldest).scalars())
                if ids:
                    conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
            deleted += len(ids)
            if len(ids) < batch:
                break
    return deleted


def _owned(job, worker_id: str):
    return (jobs.c.id == job.id, jobs.c.status == RUNNING, jobs.c.locked_by == worker_id)


def mark_done(conn: Connection, job, worker_id: str, note: str | None = None) -> bool:
    """Finish a job; False when this worker no longer holds it (its lease was taken over)."""
    return conn.execute(
        update(jobs).where(*_owned(job, worker_id))
        .values(status=DONE, locked_by=None, locked_until=None, last_error=note, updated_at=utcnow())
    ).rowcount == 1


def mark_done_many(conn: Connection, job_ids: list[int], worker_id: str) -> int:
    """Finish the jobs this worker still holds among job_ids (one statement); returns how many."""
    return conn.execute(
        update(jobs).where(jobs.c.id.in_(job_ids), jobs.c.status == RUNNING, jobs.c.locked_by == worker_id)
        .values(status=DONE, locked_by=None, locked_until=None, last_error=None, updated_at=utcnow())
    ).rowcount


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


def requeue(conn: Connection, job_ids: list[int]) -> list[int]:
    """Give the dead (or done) jobs among job_ids a fresh set of attempts, due now; returns
    their ids. Read, then written, by id alone: with `id IN (...)` next to a status condition
    SQLite walked the status index's every done job instead (212 ms for 20 jobs among 100,000
    done, holding the write lock). On PostgreSQL the read locks the rows until the caller's
    transaction ends."""
    if not job_ids:
        return []
    read = select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(job_ids)).with_for_update()
    ids = [row.id for row in conn.execute(read) if row.status in (DEAD, DONE)]
    if ids:
        now = utcnow()
        conn.execute(update(jobs).where(jobs.c.id.in_(ids)).values(
            status=QUEUED, attempts=0, run_after=now, locked_by=None, locked_until=None, updated_at=now))
    return ids
