"""Supervised delivery defers to a busy API for a bounded time (delivery/yielding.py).

The API is stood in for by real processes: one that keeps a core busy, one that sleeps; the
deferral logic reads their CPU time from /proc as it reads the server's."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from largesse.config import Settings
from largesse.delivery.yielding import _TICKS as TICKS
from largesse.delivery.yielding import ApiLoad

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

SPIN = "import time\nwhile True:\n    pass\n"
SLEEP = "import time\ntime.sleep(60)\n"


def _process(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class Counters:
    """A server's CPU counters as /proc shows them (PID/stat), advanced by a thread at `share` of
    a core of wall time: the budget's timing is tested against a load that a loaded test
    machine cannot starve (a real spinning process got under 0.25 of a core in some 0.1 s
    windows while three test processes shared two cores, and the deferral ended after 0.06 s).
    Whether a real busy process is seen busy is test_a_spinning_process_is_seen_busy's."""

    PID = 4242

    def __init__(self, root: Path, share: float):
        self.dir = root / str(self.PID)
        self.dir.mkdir(parents=True)
        (self.dir / "cmdline").write_bytes(b"largesse\0serve\0")
        self.share, self.started, self.stopping = share, time.monotonic(), threading.Event()
        self._write()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        ticks = int((time.monotonic() - self.started) * TICKS * self.share)
        tmp = self.dir / "stat.tmp"
        tmp.write_text(f"{self.PID} (api) R 1 " + "0 " * 9 + f"{ticks} 0 0 0 20 0 1 0\n")
        tmp.replace(self.dir / "stat")

    def _run(self) -> None:
        while not self.stopping.wait(0.01):
            self._write()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()


def test_a_spinning_process_is_seen_busy():
    server = _process(SPIN)
    try:
        assert _until(ApiLoad(server.pid, budget=0.6).busy), "a process spinning a core was not seen busy"
    finally:
        server.kill()
        server.wait()


def test_delivery_defers_to_a_busy_api_for_its_budget_then_catches_up(tmp_path):
    counters = Counters(tmp_path, share=0.9)
    try:
        load = ApiLoad(Counters.PID, budget=0.6, proc=tmp_path)
        assert _until(load.busy), "an API at 0.9 of a core was not seen busy"
        stopping = threading.Event()
        started = time.monotonic()
        load.wait_while_busy(stopping)
        waited = time.monotonic() - started
        assert 0.5 <= waited < 5, waited  # deferred, for about its budget
        # The budget is spent: emails go at full speed, however busy the API, until the queue
        # has caught up.
        started = time.monotonic()
        load.wait_while_busy(stopping)
        assert time.monotonic() - started < 0.3
        load.claimed(3, full=False)  # its queue ran empty: it may defer again
        started = time.monotonic()
        load.wait_while_busy(stopping)
        assert time.monotonic() - started >= 0.5
        # Stopping ends a wait at once.
        load.claimed(0, full=False)
        stopping.set()
        started = time.monotonic()
        load.wait_while_busy(stopping)
        assert time.monotonic() - started < 0.3
    finally:
        counters.stop()


def test_an_idle_api_never_makes_delivery_wait():
    server = _process(SLEEP)
    try:
        load = ApiLoad(server.pid, budget=5)
        time.sleep(0.5)
        for _ in range(3):
            started = time.monotonic()
            load.wait_while_busy(threading.Event())
            assert time.monotonic() - started < 0.3
            time.sleep(0.25)
        assert not load.busy()
    finally:
        server.kill()
        server.wait()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return out


@pytest.mark.parametrize("command, counted", [("largesse worker", False), ("api worker", True)])
def test_the_servers_children_count_as_the_api_but_its_delivery_processes(command, counted):
    """A server's API may be its children (`serve --workers N`); its children whose command is
    `largesse worker` are its delivery, whose own CPU must not make it defer."""
    args = ", ".join(repr(a) for a in command.split())
    parent = _process(
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'while True: pass', {args}])\n"
        "time.sleep(60)\n")
    try:
        assert _until(lambda: _children(parent.pid))
        load = ApiLoad(parent.pid, budget=5)
        load.busy()
        assert _until(load.busy, timeout=2) is counted
    finally:
        for child in _children(parent.pid):
            subprocess.run(["kill", "-9", str(child)], check=False)
        parent.kill()
        parent.wait()


def test_only_a_supervised_child_defers_and_zero_turns_it_off(monkeypatch):
    monkeypatch.delenv("LARGESSE_SUPERVISOR_PID", raising=False)
    assert ApiLoad.for_supervised_child(10) is None  # a standalone `largesse worker`
    monkeypatch.setenv("LARGESSE_SUPERVISOR_PID", "1")
    assert ApiLoad.for_supervised_child(10) is not None
    assert ApiLoad.for_supervised_child(0) is None
    assert Settings.from_env({}).delivery_yield_seconds == 10
    assert Settings.from_env({"LARGESSE_DELIVERY_YIELD_SECONDS": "0"}).delivery_yield_seconds == 0


def test_a_lone_email_is_not_deferred_however_busy_the_api(org, engine, database_url, fast, tmp_path):
    """Deferring is for bursts (a claim that fills its batch): one order's email goes out at once
    while a client polls its reward as fast as it can, which keeps the API's core busy."""
    from tests.delivery.conftest import tagged
    from tests.delivery.procs import Smtp, StallHandler, env_for, start_serve
    from tests.delivery.test_recovery import order, settle

    smtp = Smtp(StallHandler(stall=0))
    proc = None
    try:
        settle(engine, fast, smtp.url)
        # A deferral would last 30 s: the email must not wait for it.
        proc, base = start_serve(env_for(database_url, smtp.url, delivery_yield_seconds=30), tmp_path / "serve.log")
        with httpx.Client(base_url=f"{base}/api/v2", timeout=30,
                          headers={"Authorization": f"Bearer {org.api_key}"}) as client:
            for n in range(3):
                [reward_id] = order(client, [tagged(org.member_email, f"lone{n}")])
                started = time.monotonic()
                while client.get(f"/rewards/{reward_id}").json()["reward"]["delivery"]["status"] != "SUCCEEDED":
                    assert time.monotonic() - started < 15, "a lone email waited for the busy API"
        assert proc.terminate() in (0, -signal.SIGTERM), proc.text()
    finally:
        if proc is not None:
            proc.kill()
        smtp.stop()


def test_a_burst_is_a_full_claim_or_BURST_emails_within_a_window(monkeypatch):
    """A fast worker keeps up with a burst of orders in claims that never fill their batch: the
    emails claimed over the last window count, a trickle never makes a burst."""
    from largesse.delivery import yielding

    clock = [1000.0]
    monkeypatch.setattr(yielding.time, "monotonic", lambda: clock[0])
    load = ApiLoad(1, budget=5)
    for _ in range(30):  # one email a second: a trickle
        assert load.claimed(1, full=False) is False
        clock[0] += 1.0
    assert load.claimed(20, full=True) is True  # a full batch, whatever came before
    clock[0] += 5.0
    claims = []
    for _ in range(6):  # 4 emails every 0.1 s: 40 a second
        claims.append(load.claimed(4, full=False))
        clock[0] += 0.1
    assert claims == [False, False, False, False, True, True]
    clock[0] += yielding.BURST_WINDOW + 0.01  # the window moved past them
    assert load.claimed(0, full=False) is False
