"""Crash recovery: a SIGKILLed `largesse worker` or `largesse serve` holds emails stuck at a
stalled SMTP relay; after a restart (default lease, 10 s) every one of them leaves PENDING
within 5 s of the lease running out or of the new process being up, whichever comes last, each
sent once. And the heartbeat: a job that runs longer than its lease keeps it while another
worker polls the same queue, so it never runs twice."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import httpx
import pytest

from largesse.delivery.jobs import MAIL
from largesse.delivery.worker import BATCH, Worker
from tests.delivery.conftest import tagged
from tests.delivery.procs import (
    Smtp,
    StallHandler,
    alive,
    delivery_children,
    delivery_statuses,
    env_for,
    job_states,
    running_count,
    start_serve,
    start_worker,
    wait_until,
)
from tests.factories import ok

HELD = BATCH[MAIL] + 3  # two email threads: one holds a full batch, the other the last 3


def settle(engine, fast, smtp_url: str) -> None:
    """Deliver what earlier tests left due in the shared queue, so that the process under test
    claims this test's jobs."""
    settings = fast(smtp_url=smtp_url)
    for _ in range(50):
        if Worker(engine, settings).drain() == 0:
            return


def order(client: httpx.Client, addresses: list[str]) -> list[str]:
    body = {"payment": {"funding_source_id": "balance"}, "rewards": [
        {"value": {"denomination": 5}, "recipient": {"name": "R", "email": a}, "delivery": {"method": "EMAIL"},
         "products": ["PGCNWBOOKS01US"]} for a in addresses]}
    return [r["id"] for r in ok(client.post("/orders", json=body))["order"]["rewards"]]


@pytest.mark.parametrize("kind", ["worker", "serve"])
def test_killed_process_jobs_leave_pending_within_15_s_of_the_restart(kind, org, engine, database_url, backend,
                                                                         fast, tmp_path):
    stuck, good = Smtp(StallHandler("hold", stall=120)), Smtp(StallHandler(stall=0))
    procs = []
    try:
        settle(engine, fast, good.url)
        env = env_for(database_url, stuck.url)
        if kind == "worker":
            first = start_worker(env, tmp_path / "first.log")
            base = org.base_url
        else:
            first, base = start_serve(env, tmp_path / "first.log")
        procs.append(first)
        addresses = [tagged(org.member_email, f"hold{i}") for i in range(HELD)]
        with httpx.Client(base_url=f"{base}/api/v2", timeout=30,
                          headers={"Authorization": f"Bearer {org.api_key}"}) as client:
            ids = order(client, addresses)
        wait_until(lambda: running_count(engine, ids) == HELD and stuck.handler.stalled >= 2, 30,
                   message="the first process did not take every job")
        # The jobs are held by the worker process itself, or by the one delivery process that serve supervises.
        holders = [first.pid] if kind == "worker" else delivery_children(first.pid)
        assert len(holders) == 1
        assert {j.locked_by.split(":")[1] for j in job_states(engine, ids)} == {str(holders[0])}

        first.kill()
        killed = time.monotonic()
        # SIGKILLing serve takes its delivery process with it: no orphan keeps the jobs' leases alive.
        wait_until(lambda: not alive(holders[0]), 5, message="the delivery process outlived its server")
        restart_env = env_for(database_url, good.url)
        restarted = time.monotonic()
        if kind == "worker":
            second = start_worker(restart_env, tmp_path / "second.log")
        else:
            second, _ = start_serve(restart_env, tmp_path / "second.log")
        procs.append(second)
        up = time.monotonic() - restarted
        wait_until(lambda: "PENDING" not in delivery_statuses(engine, ids).values(), 30, interval=0.1,
                   message="rewards still PENDING")
        done = time.monotonic()
        print(f"\nRECOVERY {kind} {backend}: {HELD} rewards left PENDING {done - restarted:.1f} s after the restart "
              f"(process up in {up:.1f} s), {done - killed:.1f} s after the kill")
        # What recovery waits for is the lease (10 s, renewed until the kill) and the new process
        # being up; starting a process on a loaded test machine took from 1 to over 5 s, which is
        # not recovery's to answer for. From whichever comes last, every job goes within 5 s on
        # an idle machine (the 15 s after the restart of docs/delivery.md); 8 s is allowed here,
        # as the whole suite on a 2-core VM half as fast took 5.9 s (twentieth pass).
        due = max(restarted + up, killed + 10)
        assert done - due <= 8, f"{done - restarted:.1f} s after the restart, {done - due:.1f} s after the lease"
        assert set(delivery_statuses(engine, ids).values()) == {"SUCCEEDED"}
        assert [len(good.handler.to(a)) for a in addresses] == [1] * HELD  # each sent once
        assert not any(stuck.handler.to(a) for a in addresses)  # the stuck relay never accepted one
        assert {(j.status, j.attempts) for j in job_states(engine, ids)} == {("done", 2)}
        # uvicorn re-raises the SIGTERM it handled once its shutdown is complete: -15 is a clean exit
        assert second.terminate() in (0, -signal.SIGTERM), second.text()
    finally:
        for proc in procs:
            proc.kill()
        stuck.stop()
        good.stop()


def _one_thread_worker(database_url: str, smtp_url: str, tmp_path):
    """A `largesse worker` process with one email thread, no webhook thread and a 1.5 s lease."""
    return start_worker(env_for(database_url, smtp_url, job_lease_seconds=1.5), tmp_path / "first.log",
                        "--concurrency", "1", "--webhook-concurrency", "0")


def test_a_job_running_longer_than_its_lease_keeps_it(org, http, engine, database_url, fast, tmp_path):
    """The first worker's SMTP send takes 6 s, four leases of 1.5 s; a second worker polls the
    queue (and requeues expired leases) all along. The heartbeat keeps the job: one email."""
    slow = Smtp(StallHandler("slow", stall=6))
    first = second = None
    try:
        settle(engine, fast, slow.url)
        first = _one_thread_worker(database_url, slow.url, tmp_path)
        address = tagged(org.member_email, "slow")
        [reward_id] = order(http, [address])
        wait_until(lambda: slow.handler.stalled == 1, 30, message="the first worker did not start sending")
        second = Worker(engine, fast(smtp_url=slow.url, job_lease_seconds=1.5)).start()
        wait_until(lambda: delivery_statuses(engine, [reward_id])[reward_id] == "SUCCEEDED", 30)
        time.sleep(2)  # a duplicate, had the second worker taken the job, would be stalled by now
        assert slow.handler.stalled == 1 and len(slow.handler.to(address)) == 1
        [job] = job_states(engine, [reward_id])
        assert (job.status, job.attempts, job.last_error) == ("done", 1, None)
    finally:
        if second is not None:
            second.stop()
        if first is not None:
            first.kill()
        slow.stop()


def test_a_paused_worker_does_not_resend_what_was_taken_over(org, http, engine, database_url, fast, tmp_path):
    """A worker paused (SIGSTOP: a VM freeze, a stalled host) longer than its lease loses its
    batch to another worker, which sends it. Resumed, it finishes at most the email it was in
    the middle of (the documented at-least-once window) and leaves the rest: it used to send
    the rest of its batch again, each a second email."""
    relay = Smtp(StallHandler("slow", stall=0.3))
    first = second = None
    try:
        settle(engine, fast, relay.url)
        first = _one_thread_worker(database_url, relay.url, tmp_path)
        addresses = [tagged(org.member_email, f"slow{i}") for i in range(12)]
        reward_ids = order(http, addresses)
        wait_until(lambda: relay.handler.stalled >= 2, 30, message="the first worker did not start sending")
        os.kill(first.pid, signal.SIGSTOP)
        paused = relay.handler.stalled
        second = Worker(engine, fast(smtp_url=relay.url, job_lease_seconds=1.5, worker_concurrency=1,
                                     webhook_concurrency=0)).start()
        wait_until(lambda: set(delivery_statuses(engine, reward_ids).values()) == {"SUCCEEDED"}, 60,
                   message="the second worker did not deliver the paused worker's batch")
        os.kill(first.pid, signal.SIGCONT)
        time.sleep(4)  # the resumed worker's chance to send again
        copies = [len(relay.handler.to(a)) for a in addresses]
        assert all(n >= 1 for n in copies) and sum(copies) - len(addresses) <= 1, (paused, copies, first.text())
        assert alive(first.pid)
    finally:
        if second is not None:
            second.stop()
        if first is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(first.pid, signal.SIGCONT)
            first.kill()
        relay.stop()
