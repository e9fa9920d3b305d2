"""Finished jobs are deleted LARGESSE_JOB_RETENTION_DAYS after their last run, by the periodic
sweep (delivery/jobs.prune_finished); queued and running jobs, recent ones and the sweep stay."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from largesse import db
from largesse.config import Settings
from largesse.delivery.jobs import queued_row
from largesse.delivery.models import jobs
from largesse.timeutil import utcnow
from tests.conftest import empty_pg_database
from tests.factories import ok, place


def _job_of(engine, reward_id: str) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(jobs.c.id).where(jobs.c.reward_id == reward_id,
                                                    jobs.c.kind == "deliver_reward")).scalar_one()


def _set(engine, job_id: int, **values) -> None:
    with db.write(engine) as conn:
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))


def _sweep(engine, drain, settings) -> None:
    with db.write(engine) as conn:  # make the periodic sweep due now
        conn.execute(update(jobs).where(jobs.c.dedupe_key == "expire_rewards", jobs.c.status == "queued")
                     .values(run_after=utcnow()))
    drain(settings)


def _existing(engine, ids) -> set[int]:
    with db.read(engine) as conn:
        return set(conn.execute(select(jobs.c.id).where(jobs.c.id.in_(list(ids)))).scalars())


def test_the_sweep_deletes_finished_jobs_past_their_retention(org, http, engine, fast, drain):
    rewards = [place(http, org.member_email)["rewards"][0]["id"] for _ in range(5)]
    drain(fast())
    old_done, old_dead, recent_done, old_running, young_done = (_job_of(engine, r) for r in rewards)
    long_ago, lately = utcnow() - timedelta(days=31), utcnow() - timedelta(days=29)
    _set(engine, old_done, run_after=long_ago)
    _set(engine, old_dead, status="dead", last_error="550 no such user", run_after=long_ago)
    _set(engine, young_done, run_after=lately)
    # Held by a live worker elsewhere (its lease runs for an hour): the sweep must leave it be.
    _set(engine, old_running, status="running", locked_by="elsewhere", run_after=long_ago,
         locked_until=utcnow() + timedelta(hours=1))
    mine = {old_done, old_dead, recent_done, old_running, young_done}

    _sweep(engine, drain, fast(job_retention_days=0))  # 0: keep every job
    assert _existing(engine, mine) == mine

    _sweep(engine, drain, fast(job_retention_days=30))
    assert _existing(engine, mine) == {recent_done, old_running, young_done}
    with db.read(engine) as conn:
        sweep = conn.execute(select(jobs.c.status, jobs.c.run_after).where(jobs.c.dedupe_key == "expire_rewards")).all()
    assert len(sweep) == 1 and sweep[0].status == "queued" and sweep[0].run_after > utcnow()
    # The rewards themselves are untouched: their history is kept, only the queue's rows go.
    for reward_id in rewards:
        assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["delivery"]["status"] == "SUCCEEDED"
    _set(engine, old_running, status="done", locked_by=None, locked_until=None)


def test_job_retention_days_must_be_a_whole_number():
    for bad in ("-1", "thirty", "1.5"):
        try:
            Settings.from_env({"LARGESSE_JOB_RETENTION_DAYS": bad})
        except ValueError as exc:
            assert "LARGESSE_JOB_RETENTION_DAYS" in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")
    assert Settings.from_env({"LARGESSE_JOB_RETENTION_DAYS": "7"}).job_retention_days == 7
    assert Settings.from_env({}).job_retention_days == 30


@pytest.fixture
def empty_database(backend, tmp_path):
    """A database of this backend of its own (`jobs retry --all-dead` takes every dead job of
    the database, the other tests' too)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'retry.sqlite3'}"
        return
    with empty_pg_database("largesse_retry") as url:  # the backend fixture has checked it is reachable
        yield url


def test_retry_all_dead_takes_every_dead_job_and_nothing_else(empty_database, cli):
    """Every dead job, and only those, among done and queued ones (read and requeued by id)."""
    env = {"LARGESSE_DATABASE_URL": empty_database}
    cli("db", "upgrade", env=env)
    engine = db.make_engine(empty_database)
    try:
        long_ago = utcnow() - timedelta(days=2)
        rows = [queued_row(kind="deliver_reward", run_after=long_ago, now=long_ago)
                | {"status": status, "attempts": 8, "last_error": "550"}
                for status in ["dead"] * 1_203 + ["done"] * 7 + ["queued"] * 5]
        with db.write(engine) as conn:
            conn.execute(jobs.insert(), rows)
        assert "requeued 1203 jobs" in cli("jobs", "retry", "--all-dead", env=env).stdout
        with db.read(engine) as conn:
            after = Counter((r.status, r.attempts) for r in conn.execute(select(jobs.c.status, jobs.c.attempts)))
        assert after == {("queued", 0): 1_203, ("done", 8): 7, ("queued", 8): 5}
        assert "requeued 0 jobs" in cli("jobs", "retry", "--all-dead", env=env).stdout
    finally:
        engine.dispose()
