"""Delivery test kit: a real SMTP server (aiosmtpd) per test, a worker with short delays.

The worker under test is the real one (largesse.delivery.worker.Worker) on the session's
database; `drain` runs what is due now, as `largesse worker --once` does. Other tests'
queued jobs may be delivered too, so assertions always select their own recipients.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import select, update

from largesse import db
from largesse.delivery.models import jobs
from largesse.delivery.worker import Worker
from largesse.orders.models import rewards
from tests.conftest import free_port
from tests.delivery.procs import RecordingHandler


class SinkHandler(RecordingHandler):
    """Accepts every message, except recipients whose address contains a trigger:
    "nobody" -> 550 at RCPT, "busy" -> 451 at RCPT, "hold" -> DATA waits until released.
    It offers PIPELINING (handle_EHLO)."""

    def __init__(self):
        super().__init__()
        self.holding = threading.Event()
        self.hold = True

    async def handle_EHLO(self, server, session, envelope, hostname, responses):  # noqa: N802
        # aiosmtpd reads pipelined commands fine but does not say so: offer PIPELINING, so
        # that these tests go through the transport's pipelined path (the StallHandler sinks
        # of tests/delivery/procs.py keep testing the plain one).
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if "nobody" in address:
            return "550 5.1.1 No such user here"
        if "busy" in address:
            return "451 4.2.1 Mailbox busy, try later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self.hold and any("hold" in rcpt for rcpt in envelope.rcpt_tos):
            self.holding.set()
            await asyncio.sleep(60)  # never answers while the test needs it
            return "451 4.3.0 timed out"
        return self.record(envelope)


class Sink:
    def __init__(self, port: int | None = None, *, smtputf8: bool = False):
        self.port = port or free_port()
        self.handler = SinkHandler()
        self.smtputf8 = smtputf8  # offer SMTPUTF8 (RFC 6531): addresses that are not ASCII
        self.controller: Controller | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self) -> Sink:
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port,
                                     enable_SMTPUTF8=self.smtputf8)
        self.controller.start()
        return self

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


@pytest.fixture
def sink():
    started = Sink().start()
    yield started
    started.stop()


@pytest.fixture
def fast(base_settings):
    """Settings for a quick worker: tiny poll and backoff, short SMTP timeout."""

    def make(**overrides):
        values = dict(worker_poll_seconds=0.05, job_retry_base_seconds=0.05, job_retry_max_seconds=0.2,
                      smtp_timeout_seconds=5.0, worker_concurrency=2)
        return replace(base_settings, **{**values, **overrides})

    return make


@pytest.fixture
def drain(engine):
    def run(settings) -> int:
        return Worker(engine, settings).drain()

    return run


def wait_for(predicate, *, settings=None, engine=None, timeout: float = 20.0):
    """Poll predicate (draining the queue each time when a worker is given) until true."""
    deadline = time.monotonic() + timeout
    while True:
        if settings is not None:
            Worker(engine, settings).drain()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def reward_row(engine, reward_id: str):
    with db.read(engine) as conn:
        return conn.execute(select(rewards).where(rewards.c.id == reward_id)).first()


def job_rows(engine, reward_id: str):
    with db.read(engine) as conn:
        return conn.execute(select(jobs).where(jobs.c.reward_id == reward_id).order_by(jobs.c.id)).all()


def set_job(engine, reward_id: str, **values) -> None:
    with db.write(engine) as conn:
        conn.execute(update(jobs).where(jobs.c.reward_id == reward_id).values(**values))


def tagged(address: str, tag: str) -> str:
    local, _, domain = address.partition("@")
    return f"{local}+{tag}@{domain}"
