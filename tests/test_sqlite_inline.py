"""SQLite requests run inline on the event loop (web.run_db): their transactions on the
connection the loop keeps (db.KeptConnection), and a busy write lock is awaited, never
waited for inside SQLite's busy handler. What those shortcuts must not change."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import exc as sa_exc

from largesse import db, web
from tests.conftest import run_in_new_loop

LOCK_WAIT_S = 3


@pytest.fixture
def sqlite_engine(tmp_path):
    path = tmp_path / "inline.sqlite3"
    engine = db.make_engine(f"sqlite:///{path}", timeout=LOCK_WAIT_S)
    with db.write(engine) as conn:
        conn.exec_driver_sql("CREATE TABLE probe (id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    yield engine, path
    engine.dispose()


def _insert(engine, value):
    with db.write(engine) as conn:
        conn.exec_driver_sql("INSERT INTO probe (v) VALUES (?)", (value,))
        return conn.connection.dbapi_connection


def _values(engine) -> list[str]:
    with db.read(engine) as conn:
        return [row[0] for row in conn.exec_driver_sql("SELECT v FROM probe ORDER BY id")]


def _run(engine, *calls):
    """Each (fn, args) through web.run_db on one event loop whose lifespan keeps a connection."""
    async def main():
        async with db.loop_engine(engine, pool_size=2):
            return [await web.run_db(engine, fn, *args) for fn, args in calls]
    return run_in_new_loop(main())


def test_inline_transactions_share_the_loops_kept_connection(sqlite_engine):
    engine, _ = sqlite_engine
    checked_out = engine.pool.checkedout
    first, between, second, _ = _run(engine, (_insert, (engine, "a")), (checked_out, ()), (_insert, (engine, "b")),
                                     (_values, (engine,)))
    assert first is second and between == 1  # kept between transactions, not checked out for each
    assert checked_out() == 0  # given back when the loop's lifespan ends
    assert _values(engine) == ["a", "b"]


def test_a_transaction_nested_in_an_inline_one_takes_a_connection_of_its_own(sqlite_engine):
    engine, _ = sqlite_engine

    def nested():
        with db.write(engine) as outer:
            outer.exec_driver_sql("INSERT INTO probe (v) VALUES ('outer')")
            inner_values = _values(engine)  # another connection: the outer insert is not committed
            return inner_values

    assert _run(engine, (nested, ())) == [[]]
    assert _values(engine) == ["outer"]


def test_after_a_failed_inline_transaction_the_next_one_commits(sqlite_engine):
    engine, _ = sqlite_engine

    def duplicate():
        with pytest.raises(sa_exc.IntegrityError):
            _insert(engine, "a")  # UNIQUE: rolled back
        return _insert(engine, "c")

    _run(engine, (_insert, (engine, "a")), (duplicate, ()), (_values, (engine,)))
    assert _values(engine) == ["a", "c"]


def test_inline_write_awaits_a_lock_held_elsewhere_then_commits(sqlite_engine):
    engine, path = sqlite_engine
    holder = sqlite3.connect(path, isolation_level=None, timeout=1, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, holder.execute, ("ROLLBACK",))
    release.start()
    try:
        _run(engine, (_insert, (engine, "after the wait")))
    finally:
        release.join()
        holder.close()
    assert _values(engine) == ["after the wait"]


def test_a_thread_waits_for_the_lock_on_a_connection_an_inline_write_used(sqlite_engine):
    """An inline write leaves its connection with busy_timeout=0 (it never waits inside SQLite);
    a later transaction on that connection outside the loop must wait for the lock as usual."""
    engine, path = sqlite_engine

    async def main():  # no loop_engine: the inline write takes a pooled connection
        return await web.run_db(engine, _insert, engine, "inline")

    inline_conn = run_in_new_loop(main())
    holder = sqlite3.connect(path, isolation_level=None, timeout=1, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, holder.execute, ("ROLLBACK",))
    release.start()
    try:
        threaded_conn = _insert(engine, "threaded")  # waits ~0.3 s; "database is locked" without the wait
    finally:
        release.join()
        holder.close()
    assert threaded_conn is inline_conn  # the pool's one idle connection: the case this test is about
    assert _values(engine) == ["inline", "threaded"]
