"""`largesse serve` delivers through supervised child processes (delivery/supervisor.py), never
through threads of the API process: one delivery process per server whatever its number of API
processes, restarted when it dies, stopped with the server, never left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from tests.delivery.conftest import tagged
from tests.delivery.procs import (
    Smtp,
    StallHandler,
    alive,
    delivery_children,
    delivery_statuses,
    env_for,
    start_serve,
    wait_until,
)
from tests.delivery.test_recovery import order, settle


def _niceness(pid: int) -> list[int]:
    """The niceness of each thread of process pid (field 19 of /proc/<pid>/task/<tid>/stat)."""
    found = []
    for task in (Path(f"/proc/{pid}/task")).iterdir():
        found.append(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
    return found


def _delivered(engine, ids) -> bool:
    return set(delivery_statuses(engine, ids).values()) == {"SUCCEEDED"}


def test_serve_delivers_from_a_child_process_restarted_when_it_dies(org, engine, database_url, fast, tmp_path):
    smtp = Smtp(StallHandler(stall=0))
    proc = None
    try:
        settle(engine, fast, smtp.url)
        proc, base = start_serve(env_for(database_url, smtp.url), tmp_path / "serve.log")
        children = delivery_children(proc.pid)
        assert len(children) == 1, proc.text()
        first = children[0]
        with httpx.Client(base_url=f"{base}/api/v2", timeout=30,
                          headers={"Authorization": f"Bearer {org.api_key}"}) as client:
            before = order(client, [tagged(org.member_email, "sup1")])
            wait_until(lambda: _delivered(engine, before), 30, message="serve did not deliver")
            # The worker that sent it ran in the child, not in the server process.
            assert "started with" in proc.text()

            os.kill(first, signal.SIGKILL)
            replaced = wait_until(lambda: [p for p in delivery_children(proc.pid) if p != first], 15,
                                  message="the delivery process was not restarted")
            assert len(replaced) == 1 and not alive(first)
            after = order(client, [tagged(org.member_email, "sup2")])
            wait_until(lambda: _delivered(engine, after), 30, message="the restarted process did not deliver")
        assert "restarting it" in proc.text()
        assert proc.terminate() in (0, -signal.SIGTERM), proc.text()
        assert not alive(replaced[0]), "the delivery process outlived the server"
        assert len(smtp.handler.to(tagged(org.member_email, "sup1"))) == 1
        assert len(smtp.handler.to(tagged(org.member_email, "sup2"))) == 1
    finally:
        if proc is not None:
            proc.kill()
        smtp.stop()


def test_serve_with_several_api_processes_runs_one_delivery_process(org, engine, database_url, fast, tmp_path):
    smtp = Smtp(StallHandler(stall=0))
    proc = None
    try:
        settle(engine, fast, smtp.url)
        proc, base = start_serve(env_for(database_url, smtp.url), tmp_path / "serve.log", "--workers", "2")
        children = delivery_children(proc.pid)
        assert len(children) == 1, proc.text()
        with httpx.Client(base_url=f"{base}/api/v2", timeout=30,
                          headers={"Authorization": f"Bearer {org.api_key}"}) as client:
            ids = order(client, [tagged(org.member_email, f"multi{i}") for i in range(3)])
        wait_until(lambda: _delivered(engine, ids), 30, message="serve --workers 2 did not deliver")
        assert proc.text().count("started with") == 1, proc.text()  # not one per API process
        # Delivery yields the CPU to the API (LARGESSE_DELIVERY_NICE, default 10): every thread
        # of the delivery process runs at that niceness; the server's processes do not.
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert set(_niceness(children[0])) == {min(19, own + 10)}
        assert set(_niceness(proc.pid)) == {own}
        assert proc.terminate() in (0, -signal.SIGTERM), proc.text()
        assert not alive(children[0]), "the delivery process outlived the server"
    finally:
        if proc is not None:
            proc.kill()
        smtp.stop()


def test_run_worker_0_starts_no_delivery(engine, database_url, fast, tmp_path):
    smtp = Smtp(StallHandler(stall=0))
    proc = None
    try:
        env = env_for(database_url, smtp.url)
        from tests.conftest import free_port
        from tests.delivery.procs import Proc

        port = free_port()
        proc = Proc(["serve", "--port", str(port)], {**env, "LARGESSE_RUN_WORKER": "0"}, tmp_path / "serve.log")
        wait_until(lambda: _healthy(port), 60, message="serve did not start")
        assert delivery_children(proc.pid) == []
        assert "started with" not in proc.text()
    finally:
        if proc is not None:
            proc.kill()
        smtp.stop()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_worker_process_that_cannot_start_is_tried_again(base_settings, caplog):
    """A first start that failed (a fork refused: EAGAIN, ENOMEM, a permission) ended the
    supervising thread: no delivery ever ran, and nothing said it would be tried again."""
    import logging
    import time

    from largesse.delivery.supervisor import DeliverySupervisor

    class FirstStartFails(DeliverySupervisor):
        attempts = 0

        def command(self):
            self.attempts += 1
            return ["/nonexistent/python"] if self.attempts == 1 else super().command()

    supervisor = FirstStartFails(base_settings, processes=1, stop_timeout=10)
    with caplog.at_level(logging.ERROR, logger="largesse"):
        supervisor.start()
        try:
            deadline = time.monotonic() + 15
            while not supervisor.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert supervisor.pids() and supervisor.attempts == 2
        finally:
            supervisor.stop()
    assert "cannot start a worker process" in caplog.text and "trying again in 1 s" in caplog.text
    assert not supervisor.pids()
