"""The real parts a simulation runs against: a database, an SMTP server, a webhook receiver,
and the virtual clock. Each can be switched into a failure mode between steps."""

from __future__ import annotations

import email
import email.policy
import http.server
import os
import re
import secrets
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import orjson
import psycopg
from aiosmtpd.controller import Controller

PG_ADMIN_URL = os.environ.get("LARGESSE_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
# A fixed start: the same seed sees the same dates (deliver_at, expiry) on every run.
EPOCH = datetime(2031, 1, 6, 9, 0, 0)
TOKEN_IN_LINK = re.compile(r"/redeem/([A-Za-z0-9_-]{20,})")


class Clock:
    """Virtual time for timeutil.utcnow(): it moves only when the simulation advances it."""

    def __init__(self, start: datetime = EPOCH):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(milliseconds=int(seconds * 1000))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- databases -------------------------------------------------------------------------------

class Database:
    """A brand-new database for one run: a SQLite file in a temporary directory, or a
    throwaway PostgreSQL database (created here, dropped by close())."""

    def __init__(self, backend: str):
        self.backend = backend
        self.tmp = tempfile.TemporaryDirectory(prefix="largesse-sim-")
        self.pg_name: str | None = None
        if backend == "sqlite":
            self.url = f"sqlite:///{Path(self.tmp.name) / 'largesse.sqlite3'}"
        elif backend == "postgresql":
            self.pg_name = f"largesse_sim_{secrets.token_hex(4)}"
            with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{self.pg_name}"')
                # No server crash is simulated, so commits need not wait for the WAL flush.
                conn.execute(f'ALTER DATABASE "{self.pg_name}" SET synchronous_commit = off')
            self.url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{self.pg_name}"
        else:
            raise ValueError(f"unknown backend {backend!r}")

    def close(self) -> None:
        if self.pg_name is not None:
            with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')
            self.pg_name = None
        self.tmp.cleanup()


def postgres_reachable() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


# --- SMTP ------------------------------------------------------------------------------------

@dataclass
class Mail:
    reward_id: str
    recipient: str
    token: str | None


class _SmtpHandler:
    def __init__(self):
        self.mode = "accept"  # accept | tempfail (451 at RCPT) | reject (550 at RCPT)
        self.lock = threading.Lock()
        self.inbox: list[Mail] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.mode == "tempfail":
            return "451 4.3.0 simulated: try again later"
        if self.mode == "reject":
            return "550 5.7.1 simulated: message refused"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        text = message.get_body(("plain",)).get_content()
        found = TOKEN_IN_LINK.search(text)
        with self.lock:
            for rcpt in envelope.rcpt_tos:
                self.inbox.append(Mail(str(message["X-Largesse-Reward-Id"]), rcpt, found.group(1) if found else None))
        return "250 Message accepted"


class SmtpServer:
    """aiosmtpd on 127.0.0.1; `mode` refuses recipients with 451 or 550 while set."""

    def __init__(self):
        self.port = free_port()
        self.handler = _SmtpHandler()
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        self.handler.mode = mode

    def take(self) -> list[Mail]:
        """The messages accepted since the last call, in arrival order."""
        with self.handler.lock:
            taken, self.handler.inbox = self.handler.inbox, []
        return taken

    def close(self) -> None:
        self.controller.stop()


# --- webhooks --------------------------------------------------------------------------------

@dataclass
class Receiver:
    mode: str = "ok"  # ok (200) | error (500) | hang (reads the request, never answers)
    received: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that answers 200, 500, or hangs, as `mode` says."""

    def __init__(self):
        self.state = Receiver()
        state = self.state

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server API)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                mode = state.mode
                with state.lock:
                    state.received.append({"mode": mode, **orjson.loads(body)})
                if mode == "hang":
                    state.release.wait(60)  # the sender's deadline passes first
                    self.close_connection = True
                    return
                self.send_response(200 if mode == "ok" else 500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def set_mode(self, mode: str) -> None:
        if self.state.mode == "hang" and mode != "hang":
            self.state.release.set()
            self.state.release = threading.Event()
        self.state.mode = mode

    def answered_uuids(self) -> set[str]:
        """Events the receiver acknowledged with a 2xx."""
        with self.state.lock:
            return {r["uuid"] for r in self.state.received if r["mode"] == "ok"}

    def all_uuids(self) -> set[str]:
        with self.state.lock:
            return {r["uuid"] for r in self.state.received}

    def close(self) -> None:
        self.state.release.set()
        self.server.shutdown()
        self.server.server_close()
