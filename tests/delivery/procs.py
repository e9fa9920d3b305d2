"""Real `largesse worker` / `largesse serve` processes, SMTP servers that stall, and a TCP proxy
that can cut the database off: the kit of the recovery, shutdown, fairness and outage tests."""

from __future__ import annotations

import asyncio
import email
import email.policy
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from aiosmtpd.controller import Controller
from sqlalchemy import func, select

from largesse import db
from largesse.delivery.models import jobs
from largesse.orders.models import rewards
from tests.conftest import free_port

LARGESSE = str(Path(sys.executable).parent / "largesse")


def env_for(database_url: str, smtp_url: str, **extra: str) -> dict:
    """A process environment: the test database, this SMTP server, webhooks to loopback allowed.
    The lease and heartbeat keep their defaults unless a test says otherwise."""
    values = {"LARGESSE_DATABASE_URL": database_url, "LARGESSE_SMTP_URL": smtp_url,
              "LARGESSE_ENVIRONMENT": "sandbox", "LARGESSE_WORKER_POLL_SECONDS": "0.2",
              "LARGESSE_WEBHOOK_ALLOW_PRIVATE": "1", "LARGESSE_JOB_RETRY_BASE_SECONDS": "0.2",
              "LARGESSE_JOB_RETRY_MAX_SECONDS": "1"}
    values.update({f"LARGESSE_{k.upper()}": str(v) for k, v in extra.items()})
    return {**os.environ, **values}


class Proc:
    """A `largesse ...` process with its output in a log file."""

    def __init__(self, args: list[str], env: dict, log: Path):
        self.log = log
        self.started_at = time.monotonic()
        # The tests' working directory: on PostgreSQL without LARGESSE_SECRET_KEY, webhook signing
        # keys are encrypted under a key file in ./var/, which the process must share with the tests.
        self.popen = subprocess.Popen([LARGESSE, *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                      cwd=os.getcwd())

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text()

    def wait_for_log(self, needle: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert self.popen.poll() is None, f"exited {self.popen.returncode}:\n{self.text()}"
            assert time.monotonic() < deadline, f"{needle!r} not logged:\n{self.text()}"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)


def start_worker(env: dict, log: Path, *args: str) -> Proc:
    proc = Proc(["worker", *args], env, log)
    proc.wait_for_log("started with")
    return proc


def start_serve(env: dict, log: Path, *args: str) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(["serve", "--port", str(port), *args], {**env, "LARGESSE_RUN_WORKER": "1",
                                                   "LARGESSE_PUBLIC_URL": f"http://127.0.0.1:{port}"}, log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.popen.poll() is None, proc.text()
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, proc.text()
        time.sleep(0.1)
    proc.wait_for_log("started with")  # its delivery worker
    return proc, base


def delivery_children(pid: int) -> list[int]:
    """The delivery worker processes (`python -m largesse worker`) that process `pid` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"largesse" in cmdline and b"worker" in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --- SMTP ------------------------------------------------------------------------------------

class RecordingHandler:
    """Accepts every message and keeps it, with its recipients, for the test to read."""

    def __init__(self):
        self.messages: list[tuple[list[str], email.message.EmailMessage]] = []
        self.lock = threading.Lock()

    def record(self, envelope) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.lock:
            self.messages.append((list(envelope.rcpt_tos), message))
        return "250 Message accepted"

    def to(self, address: str) -> list:
        with self.lock:
            return [m for rcpts, m in self.messages if address in rcpts]


class StallHandler(RecordingHandler):
    """Accepts every message; DATA for a recipient containing `pattern` first waits `stall`
    seconds (a stuck mail relay); `stalled` counts those waits."""

    def __init__(self, pattern: str = "hold", stall: float = 60.0):
        super().__init__()
        self.pattern, self.stall = pattern, stall
        self.stalled = 0

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's naming
        if self.stall and any(self.pattern in rcpt for rcpt in envelope.rcpt_tos):
            with self.lock:
                self.stalled += 1
            await asyncio.sleep(self.stall)
        return self.record(envelope)

    def order(self) -> list[str]:
        """Recipients in the order their messages were accepted."""
        with self.lock:
            return [rcpts[0] for rcpts, _ in self.messages]


class Smtp:
    def __init__(self, handler: StallHandler):
        self.handler = handler
        self.port = free_port()
        self.controller = Controller(handler, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.controller.stop()


# --- the database as the tests see it ----------------------------------------------------------

def delivery_statuses(engine, reward_ids) -> dict[str, str]:
    with db.read(engine) as conn:
        return dict(conn.execute(select(rewards.c.id, rewards.c.delivery_status)
                                 .where(rewards.c.id.in_(list(reward_ids)))).all())


def job_states(engine, reward_ids):
    with db.read(engine) as conn:
        return conn.execute(select(jobs).where(jobs.c.reward_id.in_(list(reward_ids)), jobs.c.kind == "deliver_reward")
                            .order_by(jobs.c.id)).all()


def running_count(engine, reward_ids) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.reward_id.in_(list(reward_ids)), jobs.c.status == "running")).scalar_one()


def wait_until(predicate, timeout: float, interval: float = 0.05, message: str = "condition not reached"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} within {timeout} s")
        time.sleep(interval)


# --- a TCP proxy in front of PostgreSQL that can be cut and restored ----------------------------

class CuttableProxy:
    """Forwards 127.0.0.1:port to a target; cut() closes every connection and, until restore(),
    closes each new one at once (the database is unreachable). The port keeps its listener: a
    closed port in the ephemeral range could be picked as a client's own source port, and a
    connection to it would then connect to itself."""

    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.down = False
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.down = True
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self.down = False

    def close(self) -> None:
        self.cut()
        self.listener.close()
