"""The twin's psycopg connections keep their socket registered with the event loop between waits
(pg_loop.py); the registration never outlives the socket. Run on uvloop, as `largesse serve`
runs: a stale libuv watcher for a reused descriptor would strand a request or abort the process."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import text

from largesse import db
from largesse.ops import serving
from largesse.pg_loop import KeptSocketConnection
from tests.conftest import run_in_new_loop


@pytest.fixture
def pg(backend, engine):
    if backend != "postgresql":
        pytest.skip("SQLite requests run inline, on no connection of the loop's")
    return engine


def _on_uvloop(main):
    """main() on a fresh loop of `largesse serve`'s kind (uvloop), in a thread of its own."""
    return run_in_new_loop(main(), loop_factory=serving.new_event_loop, timeout=120)


def _query(sql: str):
    def work(engine):
        with db.read(engine) as conn:
            return conn.execute(text(sql)).scalar()
    return work


def _backend_pid(engine) -> int:
    with db.read(engine) as conn:
        return conn.execute(text("SELECT pg_backend_pid()")).scalar()


def _terminate(engine, pids) -> None:
    with db.read(engine) as conn:
        for pid in pids:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with db.read(engine) as conn:
            left = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                                {"pids": list(pids)}).scalar()
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"backends {pids} did not end")


def test_a_connection_keeps_its_socket_registered_between_queries(pg):
    async def main():
        async with db.loop_engine(pg, pool_size=1) as twin:
            first = await db.on_loop(twin, _backend_pid, pg)
            async with twin.engine.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
            second = await db.on_loop(twin, _backend_pid, pg)
            return first, second, raw

    first, second, raw = _on_uvloop(main)
    assert first == second  # one pooled connection served both
    assert isinstance(raw, KeptSocketConnection)
    assert raw.closed  # the twin was disposed with its loop_engine block...
    assert raw._kept_loop is None  # ...and gave its registration up before closing


def test_idle_connections_closed_by_the_server_never_strand_a_request(pg):
    """The server ends the pool's connections between requests, six times: each time the next
    request gets a new connection (most often under the same descriptor number) and answers."""

    async def main():
        async with db.loop_engine(pg, pool_size=2) as twin:
            pids, idle_cpu = [], []
            for _ in range(6):
                pid = await asyncio.wait_for(db.on_loop(twin, _backend_pid, pg), 10)
                pids.append(pid)
                await asyncio.get_running_loop().run_in_executor(None, _terminate, pg, [pid])
                # The loop sees the socket's EOF while nobody waits on it: it must not spin on it.
                cpu = time.thread_time()
                await asyncio.sleep(0.2)
                idle_cpu.append(time.thread_time() - cpu)
            return pids, idle_cpu

    pids, idle_cpu = _on_uvloop(main)
    assert len(set(pids)) == 6
    assert max(idle_cpu) < 0.05, idle_cpu  # seconds of the loop's CPU in 0.2 s of idling


def test_a_connection_lost_mid_query_fails_that_request_only(pg):
    """libpq closes the socket itself when it finds the connection lost in the middle of a
    result: that request fails, and the next ones (on a descriptor that may be the same number)
    are answered."""

    async def main():
        async with db.loop_engine(pg, pool_size=1) as twin:
            pid = await db.on_loop(twin, _backend_pid, pg)
            sleeping = asyncio.ensure_future(db.on_loop(twin, _query("SELECT pg_sleep(30)"), pg))
            await asyncio.sleep(0.3)
            await asyncio.get_running_loop().run_in_executor(None, _terminate, pg, [pid])
            with pytest.raises(Exception) as lost:
                await asyncio.wait_for(sleeping, 10)
            answers = [await asyncio.wait_for(db.on_loop(twin, _query("SELECT 1"), pg), 10) for _ in range(3)]
            return lost.value, answers

    lost, answers = _on_uvloop(main)
    assert not isinstance(lost, asyncio.TimeoutError)
    assert answers == [1, 1, 1]


def test_a_cancelled_request_cancels_its_query_on_the_server(pg):
    async def main():
        async with db.loop_engine(pg, pool_size=1) as twin:
            sleeping = asyncio.ensure_future(db.on_loop(twin, _query("SELECT pg_sleep(30) -- cancel me"), pg))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            sleeping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeping
            cancelled_in = time.monotonic() - started
            answer = await asyncio.wait_for(db.on_loop(twin, _query("SELECT 1"), pg), 10)
            return cancelled_in, answer

    cancelled_in, answer = _on_uvloop(main)
    assert cancelled_in < 5
    assert answer == 1
    with db.read(pg) as conn:
        running = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%cancel me%' "
                                    "AND state = 'active' AND pid <> pg_backend_pid()")).scalar()
    assert running == 0
