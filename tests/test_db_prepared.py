"""db.Prepared (hot statements on the driver's cursor) and the SQLite WAL checkpointer thread."""

from __future__ import annotations

import secrets
import threading
import time
from datetime import date, datetime

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    MetaData,
    String,
    Table,
    bindparam,
    select,
    text,
)
from sqlalchemy import exc as sa_exc

from largesse import db


@pytest.fixture
def table(engine):
    meta = MetaData()
    t = Table(
        f"prepared_{secrets.token_hex(4)}", meta,
        Column("id", String(20), primary_key=True),
        Column("amount_cents", BigInteger, nullable=False),
        Column("flag", Boolean, nullable=False),
        Column("meta", JSON, nullable=True),
        Column("created_at", DateTime, nullable=False),
        Column("day", Date, nullable=True),
        Column("status", String(10), nullable=False, default="ACTIVE"),
    )
    meta.create_all(engine)
    yield t
    meta.drop_all(engine)


def test_insert_and_select_store_what_sqlalchemy_stores(engine, table):
    insert = db.Prepared(table.insert())
    by_id = db.Prepared(select(table).where(table.c.id == bindparam("id")))
    now = datetime(2026, 11, 24, 12, 30, 15, 123000)
    rows = [{"id": f"r{i}", "amount_cents": 10 ** 12 + i, "flag": i % 2 == 0, "meta": {"a": [1, "é"], "i": i},
             "created_at": now, "day": date(2026, 12, 1)} for i in range(3)]
    with db.write(engine) as conn:
        insert.execute_many(conn, rows[:1])
        insert.execute_many(conn, rows[1:])
        insert.execute_many(conn, [])
        got = by_id.first(conn, {"id": "r1"})
        assert by_id.first(conn, {"id": "nope"}) is None
    # What SQLAlchemy reads back is what it would have written itself (types, JSON, default).
    with db.read(engine) as conn:
        stored = conn.execute(select(table).order_by(table.c.id)).all()
    assert [r._mapping["meta"] for r in stored] == [r["meta"] for r in rows]
    assert all(r.created_at == now and r.day == date(2026, 12, 1) and r.status == "ACTIVE" for r in stored)
    assert [r.flag for r in stored] == [True, False, True]
    assert [r.amount_cents for r in stored] == [10 ** 12, 10 ** 12 + 1, 10 ** 12 + 2]
    assert got.id == "r1" and got.flag is False and got.amount_cents == 10 ** 12 + 1
    assert got._mapping["meta"] == {"a": [1, "é"], "i": 1} and got.created_at == now
    assert tuple(got) == tuple(stored[1])


@pytest.mark.parametrize("moment", [datetime(2026, 11, 24, 12, 30, 15), datetime(2026, 11, 24, 12, 30, 15, 7),
                                    datetime(999, 1, 2, 3, 4, 5, 600000)])
def test_datetimes_are_stored_as_the_same_text_as_sqlalchemys(engine, table, moment):
    """SQLite compares stored datetimes as text (ranges, cursors): Prepared's faster formatting
    must give SQLAlchemy's text exactly, microseconds and zero padding included."""
    row = {"amount_cents": 1, "flag": True, "created_at": moment}
    with db.write(engine) as conn:
        db.Prepared(table.insert()).execute_many(conn, [{"id": "prepared", **row}])
        conn.execute(table.insert(), {"id": "sqlalchemy", **row})
        stored = dict(conn.execute(text(f"SELECT id, CAST(created_at AS TEXT) FROM {table.name}")).all())
    assert stored["prepared"] == stored["sqlalchemy"]


def test_update_returning_scalars_and_text(engine, table):
    insert = db.Prepared(table.insert())
    debit = db.Prepared(table.update().where(table.c.id == bindparam("rid"), table.c.amount_cents >= bindparam("n"))
                        .values(amount_cents=table.c.amount_cents - bindparam("n")).returning(table.c.amount_cents))
    ids = db.Prepared(select(table.c.id).where(table.c.status == "ACTIVE").order_by(table.c.id))
    raw = db.Prepared(text(f"SELECT amount_cents, id FROM {table.name} WHERE id = :id"))
    with db.write(engine) as conn:
        insert.execute_many(conn, [{"id": "a", "amount_cents": 100, "flag": True, "created_at": datetime(2026, 1, 1)}])
        assert debit.first(conn, {"rid": "a", "n": 30}).amount_cents == 70
        assert debit.first(conn, {"rid": "a", "n": 71}) is None
        assert ids.scalars(conn) == ["a"]
        assert raw.rows(conn, {"id": "a"}) == [(70, "a")]


def test_driver_errors_are_sqlalchemy_errors_and_the_transaction_rolls_back(engine, table):
    insert = db.Prepared(table.insert())
    row = {"id": "dup", "amount_cents": 1, "flag": True, "created_at": datetime(2026, 1, 1)}
    with db.write(engine) as conn:
        insert.execute_many(conn, [row])
    with pytest.raises(sa_exc.IntegrityError), db.write(engine) as conn:
        insert.execute_many(conn, [{**row, "id": "other"}])
        insert.execute_many(conn, [row])
    with db.read(engine) as conn:
        assert conn.execute(select(table.c.id)).scalars().all() == ["dup"]


def test_needs_a_transaction_and_no_expanding_parameters(engine, table):
    with engine.connect() as conn, pytest.raises(RuntimeError):
        db.Prepared(select(table.c.id)).rows(conn)
    with db.read(engine) as conn, pytest.raises(ValueError):
        db.Prepared(select(table.c.id).where(table.c.id.in_(bindparam("ids", expanding=True)))).rows(
            conn, {"ids": ["a"]})


def test_sqlite_checkpoints_in_a_thread_of_its_own(tmp_path):
    engine = db.make_engine(f"sqlite:///{tmp_path / 'c.sqlite3'}", background_checkpoints=True)
    try:
        checkpointer = next(t for t in threading.enumerate()
                            if isinstance(t, db.SqliteCheckpointer) and t.path == str(tmp_path / "c.sqlite3"))
        with db.write(engine) as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
            conn.exec_driver_sql("CREATE TABLE t (x TEXT)")
            for i in range(200):
                conn.exec_driver_sql("INSERT INTO t VALUES (?)", (str(i) * 100,))
        deadline = time.monotonic() + 10
        while not checkpointer.checkpoints:  # the thread copies the WAL into the database
            assert time.monotonic() < deadline, "the WAL was not checkpointed"
            time.sleep(0.05)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == 200
    finally:
        engine.dispose()
    checkpointer.join(timeout=5)
    assert not checkpointer.is_alive()
    # Other engines (CLI, delivery workers) keep SQLite's automatic checkpoints.
    other = db.make_engine(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    try:
        with other.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
    finally:
        other.dispose()
