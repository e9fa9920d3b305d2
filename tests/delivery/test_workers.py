"""Worker processes: killed mid-job, expired leases, two workers sharing one queue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from largesse import db
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.orders.models import rewards
from largesse.timeutil import utcnow
from tests.delivery.conftest import Sink, job_rows, reward_row, set_job, tagged, wait_for
from tests.factories import many_rewards_body, ok, order_body, place


def _start_worker(database_url: str, smtp_url: str, log: Path, *args: str, lease: float = 300) -> subprocess.Popen:
    env = {**os.environ, "LARGESSE_DATABASE_URL": database_url, "LARGESSE_SMTP_URL": smtp_url,
           "LARGESSE_WORKER_POLL_SECONDS": "0.05", "LARGESSE_JOB_LEASE_SECONDS": str(lease),
           "LARGESSE_JOB_RETRY_BASE_SECONDS": "0.05", "LARGESSE_JOB_RETRY_MAX_SECONDS": "0.2",
           "LARGESSE_ENVIRONMENT": "sandbox"}
    command = [str(Path(sys.executable).parent / "largesse"), "worker", *args]
    return subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=log.parent)


def _wait_started(log: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while "started" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "worker did not start"
        time.sleep(0.05)


def test_expired_lease_is_reclaimed_and_the_job_runs_once(org, http, sink, fast, drain, engine):
    reward_id = place(http, org.member_email)["rewards"][0]["id"]
    set_job(engine, reward_id, status="running", locked_by="ghost:1:dead", attempts=1,
            locked_until=utcnow().replace(year=2000))
    drain(fast(smtp_url=sink.url))
    assert len(sink.handler.to(org.member_email)) == 1
    [job] = job_rows(engine, reward_id)
    assert (job.status, job.attempts, job.locked_by) == ("done", 2, None)
    with db.write(engine) as conn:  # the ghost waking up cannot overwrite the outcome
        assert not job_queue.mark_done(conn, SimpleNamespace(id=job.id), "ghost:1:dead")
    drain(fast(smtp_url=sink.url))
    assert len(sink.handler.to(org.member_email)) == 1


def test_worker_killed_mid_send_loses_nothing(org, http, sink, fast, engine, database_url, tmp_path):
    stuck = Sink().start()  # accepts the connection, never answers DATA for "+hold" recipients
    sink.handler.hold = False
    address = tagged(org.member_email, "hold")
    try:
        reward_id = place(http, address)["rewards"][0]["id"]
        log = tmp_path / "worker.log"
        proc = _start_worker(database_url, stuck.url, log, "--concurrency", "1", lease=2)
        try:
            assert stuck.handler.holding.wait(30), log.read_text()
            job = job_rows(engine, reward_id)[0]
            assert job.status == "running" and job.locked_by
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        assert reward_row(engine, reward_id).delivery_status == "PENDING"
        settings = fast(smtp_url=sink.url, job_lease_seconds=2)
        wait_for(lambda: reward_row(engine, reward_id).delivery_status == "SUCCEEDED", settings=settings,
                 engine=engine, timeout=30)
        assert len(sink.handler.to(address)) == 1 and not stuck.handler.to(address)
        [job] = job_rows(engine, reward_id)
        # Claimed at least twice (the killed worker, then the drain); a loaded machine may add a
        # retry after a timeout, never a second email.
        assert job.status == "done" and job.attempts >= 2
    finally:
        stuck.stop()


def test_two_worker_processes_send_each_email_exactly_once(org, http, sink, engine, database_url, backend,
                                                           tmp_path):
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    procs = [_start_worker(database_url, sink.url, log, "--concurrency", "2") for log in logs]
    try:
        for log, proc in zip(logs, procs, strict=True):
            _wait_started(log, proc)
        addresses = [tagged(org.member_email, f"r{i}") for i in range(200)]
        order = ok(http.post("/orders", json={"payment": {"funding_source_id": "balance"}, "rewards": [
            {"value": {"denomination": 5}, "recipient": {"name": "R", "email": a}, "delivery": {"method": "EMAIL"},
             "products": ["PGCNWBOOKS01US"]} for a in addresses]}))["order"]
        ids = [r["id"] for r in order["rewards"]]

        def delivered() -> bool:
            with db.read(engine) as conn:
                return conn.execute(select(func.count()).select_from(rewards).where(
                    rewards.c.id.in_(ids), rewards.c.delivery_status == "SUCCEEDED")).scalar_one() == len(ids)

        wait_for(delivered, timeout=180)  # the queue also holds earlier tests' emails
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
    assert [len(sink.handler.to(a)) for a in addresses] == [1] * len(addresses)
    with db.read(engine) as conn:
        rows = conn.execute(select(jobs.c.status, jobs.c.attempts).where(jobs.c.reward_id.in_(ids))).all()
    assert len(rows) == 200 and {(r.status, r.attempts) for r in rows} == {("done", 1)}  # none claimed twice
    counts = [int(log.read_text().rsplit("processed ", 1)[1].split()[0]) for log in logs]
    assert all(proc.returncode == 0 for proc in procs)
    if backend == "postgresql":
        assert all(count > 0 for count in counts), counts  # both took a share of the queue


def test_each_environments_worker_takes_its_own_environments_jobs(org, http, prod_org, sink, fast, drain, engine):
    """Sandbox and production servers may share a database: a worker delivers its own
    environment's rewards only, with its rules and its links (a sandbox worker sent production
    emails with links to the sandbox server, and a production worker ignored the sandbox's
    test recipients)."""
    stranger = "someone@elsewhere.example"
    with prod_org.http() as prod:
        prod_reward = ok(prod.post("/orders", json=order_body(stranger)))["order"]["rewards"][0]["id"]
    failing = place(http, org.member_email.replace("@", "+fail@"))["rewards"][0]["id"]
    place(http, org.member_email)
    drain(fast(smtp_url=sink.url))  # a sandbox worker
    assert len(sink.handler.to(org.member_email)) == 1 and not sink.handler.to(stranger)
    assert [job.status for job in job_rows(engine, prod_reward)] == ["queued"]
    with db.read(engine) as conn:
        assert conn.execute(select(rewards.c.delivery_status).where(rewards.c.id == failing)).scalar() == "FAILED"

    production_url = prod_org.base_url
    drain(fast(smtp_url=sink.url, environment="production", public_url=production_url))
    [message] = sink.handler.to(stranger)
    assert f"{production_url}/redeem/" in message.get_body(("plain",)).get_content()
    assert [job.status for job in job_rows(engine, prod_reward)] == ["done"]
    assert len(sink.handler.to(org.member_email)) == 1  # the sandbox's jobs were not taken again


def test_a_slow_relay_completes_emails_as_they_go(org, http, fast, engine):
    """A batch's sent emails are completed every ~0.1 s while a slow relay makes it long, so a
    crash can send again only the last of them (docs/delivery.md, "At-least-once")."""
    import threading

    from largesse.delivery.worker import Worker
    from tests.delivery.procs import Smtp, StallHandler

    smtp = Smtp(StallHandler(pattern="@", stall=0.3))
    try:
        ids = [place(http, org.member_email)["rewards"][0]["id"] for _ in range(6)]
        worker = Worker(engine, fast(smtp_url=smtp.url, worker_concurrency=1))
        draining = threading.Thread(target=worker.drain)
        draining.start()

        def delivered() -> int:
            with db.read(engine) as conn:
                return conn.execute(select(func.count()).where(
                    rewards.c.id.in_(ids), rewards.c.delivery_status == "SUCCEEDED")).scalar()

        # The first completion is seen while the batch still runs (0.3 s an email); a fixed
        # 1.2 s wait saw none on a loaded machine, before the worker had sent its first.
        deadline, seen = time.monotonic() + 20, 0
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = delivered()
        draining.join(30)
        assert 1 <= seen < 6, seen
        assert delivered() == 6
    finally:
        smtp.stop()


def test_retried_jobs_are_not_reported_as_lost_leases(org, http, fast, drain, engine, caplog):
    """A job requeued for a retry within a batch is no longer in the worker's hands: the
    heartbeat neither renews it nor warns that its lease was taken over."""
    from tests.conftest import free_port

    ok(http.post("/orders", json=many_rewards_body(org.member_email, [5] * 200)))
    with caplog.at_level("WARNING", logger="largesse.delivery"):
        drain(fast(smtp_url=f"smtp://127.0.0.1:{free_port()}", job_lease_seconds=1.0,  # refused: retried later
                   job_retry_base_seconds=60, job_retry_max_seconds=60))
    assert "lost the lease" not in caplog.text
    with db.read(engine) as conn:
        assert conn.execute(select(func.count()).where(jobs.c.status == "queued", jobs.c.attempts == 1)).scalar() >= 200


def test_a_webhook_only_worker_starts_as_documented(cli, tmp_path, backend):
    """docs/delivery.md: `--concurrency 0 --webhook-concurrency 4` runs a webhook-only worker
    (the option's minimum of 1 refused it)."""
    if backend != "sqlite":
        pytest.skip("a command-line check on its own database file: one backend is enough")
    env = {"LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'webhooks-only.sqlite3'}"}
    done = cli("worker", "--concurrency", "0", "--webhook-concurrency", "4", "--once", env=env)
    assert "processed 0 jobs" in done.stdout, done
