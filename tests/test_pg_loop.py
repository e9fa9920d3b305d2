"""The twin's psycopg connections keep their socket registered with the event loop between waits
(pg_loop.py); the registration never outlives the socket. Run on uvloop, as `largesse serve`
runs: a stale libuv watcher for a reused descriptor would strand a request or abort the process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest
from sqlalchemy import text

from largesse import db, pg_loop
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


def _terminated_between_statements(engine):
    """One transaction of two statements, the server terminating the backend between them. The
    loop is blocked meanwhile, so the second statement is sent to a backend already gone: the
    server's kernel answers it with a reset, and the socket reports an error (POLLERR)."""
    with db.read(engine) as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # there db.read is not routed to the twin
            pool.submit(_terminate, engine, [pid]).result(timeout=20)
        return conn.execute(text("SELECT 1")).scalar()


def test_a_backend_terminated_under_a_request_fails_it_without_stranding_it(pg, monkeypatch):
    """On the error, uvloop calls the reader once more and drops it by itself. That call reads
    the server's FATAL message; the wait for the rest (which is an EOF) must not count on the
    dropped reader: the request fails at once (the API answers 503) and the next ones are
    answered. The bound of _watch is put out of reach: this is about the registration itself."""
    monkeypatch.setattr(pg_loop, "WATCH_INTERVAL", 3600.0)

    async def main():
        async with db.loop_engine(pg, pool_size=1) as twin:
            failures = []
            for _ in range(3):
                with pytest.raises(Exception) as lost:
                    await asyncio.wait_for(db.on_loop(twin, _terminated_between_statements, pg), 5)
                failures.append(lost.value)
            answers = [await asyncio.wait_for(db.on_loop(twin, _query("SELECT 1"), pg), 5) for _ in range(3)]
            return failures, answers

    failures, answers = _on_uvloop(main)
    assert [type(f).__name__ for f in failures] == ["OperationalError"] * 3, failures  # not TimeoutError
    assert all(db.is_unavailable(f) for f in failures), failures
    assert answers == [1, 1, 1]


def test_a_wait_whose_registration_was_lost_is_woken_and_a_slow_query_is_not(pg, monkeypatch):
    """The bound: a wait whose reader the loop lost (here removed behind the connection's back)
    is woken within two WATCH_INTERVALs of its socket turning readable; a query slower than
    several intervals keeps its registration and is never woken early."""
    monkeypatch.setattr(pg_loop, "WATCH_INTERVAL", 0.1)

    async def main():
        loop = asyncio.get_running_loop()
        async with db.loop_engine(pg, pool_size=1) as twin:
            async with twin.engine.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                await conn.execute(text("SELECT 1"))
                kept = raw._kept_alive
                started = time.monotonic()
                slow = (await conn.execute(text("SELECT pg_sleep(0.6), 'slow'"))).all()[0][1]
                slow_in = time.monotonic() - started
                slow_kept = raw._kept_alive is kept
                loop.call_later(0.1, loop.remove_reader, raw._kept_fd)  # lost during the next query
                started = time.monotonic()
                lost = await asyncio.wait_for(conn.execute(text("SELECT pg_sleep(0.3), 'lost'")), 5)
                return slow, slow_in, slow_kept, lost.all()[0][1], time.monotonic() - started

    slow, slow_in, slow_kept, lost, lost_in = _on_uvloop(main)
    assert (slow, lost) == ("slow", "lost")
    assert slow_kept and slow_in >= 0.6
    assert 0.3 <= lost_in < 2, lost_in  # woken by _watch (0.3-0.5 s), not stranded
