"""Engine, metadata and transactions.

Largesse talks to the database with SQLAlchemy Core on a Connection: one statement per
round trip that we chose, no unit-of-work flushes or lazy loads on the hot path.

Transactions:
- ``write(engine)``: one transaction per state change. On SQLite it starts with
  BEGIN IMMEDIATE, so writers queue on the database lock up front instead of failing
  with "database is locked" at upgrade time; on PostgreSQL, row locks do that work.
  Within one process, SQLite writers also queue on a lock before BEGIN: waking a waiting
  thread when the lock is released is immediate, whereas SQLite's busy handler polls with
  sleeps of up to 100 ms, which measured as a p99 of 1.5 s at 16 concurrent orders.
- ``read(engine)``: a plain (deferred) transaction; readers never block writers in WAL.

The database going away (docs/operations.md): the API's engine (``make_engine(url,
timeout=...)``) bounds every wait - connect, row locks, SQLite's busy wait and writer lock,
pool checkout - so a request fails fast with an error that ``is_unavailable`` recognises (the
app answers 503). Pooled PostgreSQL connections that a server restart closed are detected
at checkout by a zero-timeout poll of the socket (no round trip, unlike pool_pre_ping) and
replaced. ``retrying`` re-runs a transaction on serialization failures, deadlocks and a
connection lost before commit.

PostgreSQL on the event loop (``loop_engine``, ``on_loop``): the API runs a request's database
work (web.run_db) as the same synchronous code, in a greenlet on the event loop, where the
engine's ``write``/``read`` give connections of an asyncio twin of the engine (psycopg's async
connections). A statement's round trip then awaits on the loop instead of holding a worker
thread: no thread hop, no GIL handoff per request (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import math
import operator
import os
import random
import select
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import orjson
from sqlalchemy import Connection, Engine, MetaData, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import QueuePool

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)

# Waits of operator commands (CLI, `largesse worker`); the API's engine passes its own timeout.
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10


def is_sqlite(engine_or_conn) -> bool:
    return engine_or_conn.dialect.name == "sqlite"


def normalize_url(url: str) -> str:
    """Accept postgres:// and postgresql:// and use the psycopg 3 driver for both."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def make_engine(url: str, *, pool_size: int = 8, timeout: float | None = None,
                statement_timeout: float | None = None, background_checkpoints: bool = False) -> Engine:
    """An engine; `timeout` (seconds) bounds every wait for the database: connecting, PostgreSQL
    row locks (lock_timeout), SQLite's busy wait and in-process writer lock, pool checkout.
    `statement_timeout` (PostgreSQL) bounds one statement. None keeps the patient defaults.
    `background_checkpoints` (SQLite, the API's engine): the WAL is checkpointed by a thread of
    this process, never inside a request's COMMIT (see SqliteCheckpointer)."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        busy_ms = int(timeout * 1000) if timeout else SQLITE_BUSY_TIMEOUT_MS
        engine = create_engine(
            url,
            json_serializer=_json_dumps,
            json_deserializer=orjson.loads,
            poolclass=QueuePool,
            pool_size=pool_size,
            max_overflow=32,
            pool_timeout=timeout or 30,
            connect_args={"check_same_thread": False, "timeout": busy_ms / 1000},
        )
        checkpoints = background_checkpoints and bool(database) and database != ":memory:"
        _configure_sqlite(engine, busy_ms, autocheckpoint=not checkpoints)
        if checkpoints:
            SqliteCheckpointer(engine, database).start()
        _lock_timeouts[id(engine.pool)] = timeout if timeout else -1
        return engine
    connect_args: dict = {"connect_timeout": max(2, math.ceil(timeout)) if timeout else PG_CONNECT_TIMEOUT_S}
    options = []
    if timeout:
        options.append(f"-c lock_timeout={int(timeout * 1000)}")
    if statement_timeout:
        options.append(f"-c statement_timeout={int(statement_timeout * 1000)}")
    if options:
        connect_args["options"] = " ".join(options)
    # No pool_pre_ping: it costs a round trip on every checkout (every request). Connections
    # are recycled, and those a server restart closed are caught by _drop_closed_connections.
    options = dict(pool_recycle=1800, pool_timeout=timeout or 30, connect_args=connect_args,
                   json_serializer=_json_dumps, json_deserializer=orjson.loads)
    engine = create_engine(url, pool_size=pool_size, max_overflow=2 * pool_size, **options)
    event.listen(engine, "checkout", _drop_closed_connections)
    _twin_options[engine] = options
    return engine


def _drop_closed_connections(_dbapi_connection, record, _proxy) -> None:
    """Replace a pooled connection that the server closed (restart, admin kill) before use.

    An idle connection in the pool has nothing to read: if its socket is readable, the server
    sent a termination notice or EOF. A zero-timeout poll is a syscall (about a microsecond),
    not a round trip; raising DisconnectionError makes the pool connect afresh.
    """
    connection = record.driver_connection  # psycopg's (the twin's DBAPI connection is an adapter)
    if connection.closed or connection.broken:
        raise sa_exc.DisconnectionError("connection closed")
    poller = select.poll()
    poller.register(connection.fileno(), select.POLLIN)
    if poller.poll(0):
        raise sa_exc.DisconnectionError("the server closed the connection")


def _json_dumps(value) -> str:
    return orjson.dumps(value).decode()


# --- an SQLite file deleted or replaced while in use ------------------------------------------
# A process keeps writing to the file it opened, even once `rm` or a copy over it has taken the
# path away: what it acknowledges then is gone at the next start, which finds the path empty
# (or another file) there. The file's identity is taken at the first connection; a process that
# finds the path no longer names it refuses writes (503) and /readyz says why, until a restart.
_sqlite_files: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pool: (path, (st_dev, st_ino))
_lost_files: weakref.WeakSet = weakref.WeakSet()  # pools whose file is gone (write() refuses; usually empty)


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


def sqlite_file_lost(engine: Engine) -> str | None:
    """Why the engine's SQLite file is no longer the one it opened, or None (also for PostgreSQL,
    and before the first connection). Once lost, lost for this process: its writes are refused."""
    key = engine.pool
    known = _sqlite_files.get(key)
    if known is None:
        return None
    path, identity = known
    now = _file_identity(path)
    if now == identity:
        return None
    why = f"the SQLite database file {path} was {'deleted' if now is None else 'replaced by another file'} while in use"
    if key not in _lost_files:
        _lost_files.add(key)
        import logging

        logging.getLogger("largesse").error(
            "%s: writes are refused (503) until this process restarts. Anything written since went to the "
            "file it still holds open (/proc/%s/fd): copy it back to %s before restarting, or restore a backup",
            why, os.getpid(), path)
    return why


def _read_only(exc: BaseException) -> bool:
    """SQLite's READONLY: a file this connection may not write (permissions, a read-only mount)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == SQLITE_READONLY


def _configure_sqlite(engine: Engine, busy_ms: int = SQLITE_BUSY_TIMEOUT_MS, *, autocheckpoint: bool = True) -> None:
    path = engine.url.database
    watched = bool(path) and path != ":memory:" and not path.startswith("file:")

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, record):
        if watched and engine.pool not in _sqlite_files:
            identity = _file_identity(path)
            if identity is not None:
                _sqlite_files.setdefault(engine.pool, (path, identity))
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own handling
        # would start transactions lazily and never as IMMEDIATE).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        record.info[_BUSY_MS] = busy_ms
        if not autocheckpoint:
            cursor.execute("PRAGMA wal_autocheckpoint=0")  # SqliteCheckpointer's thread does it
        cursor.close()

    @event.listens_for(engine, "handle_error")
    def on_error(context):
        # SQLite opens a file it may not write read-only, and the connection stays so: once the
        # file is writable again, only a new connection writes. Treated as a disconnect, the
        # connection is dropped (the pool's others too) and the request answered 503.
        if _read_only(context.original_exception):
            context.is_disconnect = True

    @event.listens_for(engine, "begin")
    def on_begin(conn: Connection):
        write = conn.get_execution_options().get("write")
        attempt = _event_loop_attempt.get()
        proxied = conn.connection
        if write and attempt is not None and attempt.may_yield:
            try:
                _begin_or_yield(proxied)
            except sqlite3.OperationalError as exc:  # raw, so not seen by on_error: the same rule
                if _read_only(exc):
                    conn.invalidate(exc)
                    raise sa_exc.DisconnectionError(f"the SQLite database is read-only: {exc}") from exc
                raise
            attempt.may_yield = False  # a write has begun: from here on, running fn again could repeat it
            return
        if proxied.info.get(_BUSY_MS) == 0:  # an inline write's (_begin_or_yield): this one may wait
            _busy_timeout(proxied, busy_ms)
        conn.exec_driver_sql(f"BEGIN {'IMMEDIATE' if write else 'DEFERRED'}")


class SqliteCheckpointer(threading.Thread):
    """Checkpoints an SQLite database's WAL from a thread of its own, for the API's engine.

    SQLite's automatic checkpoint runs inside the COMMIT that pushes the WAL past 1,000 pages:
    it copies the WAL into the database and fsyncs both, 20-100 ms on this machine's disk,
    which on the API's event loop (web.run_db runs SQLite inline) stalled every request of the
    process. Measured in-process, 3,000 orders: 1.9 ms of wall time per order for 0.67 ms of CPU
    (p99 21 ms, max 96 ms); with this thread 0.6-1.4 ms for 0.5-0.65 ms (p99 5-16 ms). Here the API's
    connections never checkpoint (wal_autocheckpoint=0); this thread runs a PASSIVE checkpoint
    (it waits for no lock and makes no writer wait) every INTERVAL seconds when the WAL
    changed. The sqlite3 module releases the GIL while SQLite works, so the event loop runs
    meanwhile. Past RESTART_FRAMES the WAL is made to start over (see run).
    Other processes (delivery workers, CLI commands) keep SQLite's automatic checkpoints.
    The thread ends when its engine is disposed or garbage-collected.
    """

    INTERVAL = 0.1
    RESTART_FRAMES = 10_000  # a WAL of more pages (~40 MB) is made to start over (see run)
    LOCK_WAIT_S = 0.2

    def __init__(self, engine: Engine, path: str) -> None:
        import weakref

        super().__init__(name="largesse-sqlite-checkpoint", daemon=True)
        self.path = path
        self.wal = path + "-wal"
        self.stopped = threading.Event()
        self._engine = weakref.ref(engine, lambda _ref: self.stopped.set())
        self._lock = _writer_lock(engine)
        self.checkpoints = self.restarts = 0  # how many ran (tests)
        event.listen(engine, "engine_disposed", lambda _engine: self.stopped.set())

    def run(self) -> None:
        import logging
        import os
        import sqlite3

        conn = None
        seen = None
        try:
            while not self.stopped.wait(self.INTERVAL):
                engine = self._engine()
                if engine is not None and engine.pool not in _lost_files:
                    sqlite_file_lost(engine)  # one stat: a file deleted under the API is seen within 0.1 s
                del engine
                try:
                    stat = os.stat(self.wal)
                except OSError:
                    continue
                if (stat.st_mtime_ns, stat.st_size) == seen:
                    continue
                try:
                    if conn is None:
                        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                    _busy, frames, _done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += 1
                    if frames > self.RESTART_FRAMES and self._lock.acquire(timeout=self.LOCK_WAIT_S):
                        # Under a steady stream of commits a PASSIVE checkpoint never copies the
                        # last frame (commits land during its fsync), so the WAL never starts
                        # over and grows. Now and then the tail is copied while this process's
                        # writers wait (db.write's lock; on the event loop they await, never
                        # block): the WAL is then fully copied and the next writer starts it over.
                        # Still PASSIVE: no wait for SQLite's write lock or for readers.
                        try:
                            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        finally:
                            self._lock.release()
                        self.restarts += 1
                        stat = os.stat(self.wal)
                    seen = (stat.st_mtime_ns, stat.st_size)
                except sqlite3.Error as exc:  # busy, or the file went away in a test: later
                    logging.getLogger("largesse").debug("WAL checkpoint failed: %s", exc)
        finally:
            if conn is not None:
                conn.close()


def _begin_or_yield(proxied) -> None:
    """BEGIN IMMEDIATE without waiting: SQLite's busy handler sleeps (1, 2, 5 ... 100 ms) inside
    the call, which on the event loop would stall every request of the process while another
    process (a delivery worker) holds the write lock. Busy: WriteLockBusy, and web.run_db
    awaits a moment and runs the request's database work again.

    The connection keeps busy_timeout=0 afterwards: the next transaction that may wait sets
    its own (_busy_timeout), and the next inline write on it needs no PRAGMA at all."""
    import sqlite3

    _busy_timeout(proxied, 0)
    try:
        proxied.dbapi_connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
            raise WriteLockBusy() from None
        raise


_BUSY_MS = "largesse_busy_timeout_ms"  # a pooled SQLite connection's busy_timeout now (its record's info)


def _busy_timeout(proxied, ms: int) -> None:
    """PRAGMA busy_timeout=ms on the pooled connection, unless it is set so already."""
    info = proxied.info
    if info.get(_BUSY_MS) != ms:
        proxied.dbapi_connection.execute(f"PRAGMA busy_timeout={ms}")
        info[_BUSY_MS] = ms


class WriteLockBusy(Exception):
    """SQLite's write lock is taken and the caller asked not to wait for it (see EventLoopAttempt)."""


class EventLoopAttempt:
    """One run of a request's SQLite work inline on the event loop (web.run_db).

    While `may_yield` (no write transaction has begun yet in this run, so nothing has been
    written), taking the write lock does not wait: a busy lock raises WriteLockBusy, and the
    whole run is repeated after an `await`, letting other requests proceed meanwhile. Once a
    write has begun, later transactions of the run wait as usual (a repeat could write twice).
    """

    __slots__ = ("may_yield", "kept")

    def __init__(self, kept: KeptConnection | None = None) -> None:
        self.may_yield = True
        self.kept = kept  # the loop's connection for inline runs (loop_engine), if it keeps one


class KeptConnection:
    """The connection an event loop keeps for its inline SQLite runs (web.run_db), from
    loop_engine: their transactions begin and commit on it, without a pool checkout and a new
    Connection each (about 20 of the 35 microseconds of CPU that an empty write transaction
    costs through SQLAlchemy). The loop runs one inline run at a time, to its end; a
    transaction nested in another one's block takes a pooled connection as usual.

    A context manager for _connect; a connection invalidated by an error (a disconnect, a
    corrupt file) is closed and replaced at the next use."""

    __slots__ = ("engine", "conn", "in_use")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.conn: Connection | None = None
        self.in_use = False

    def __enter__(self) -> Connection:
        conn = self.conn
        if conn is None or conn.closed or conn.invalidated:
            self.close()
            conn = self.conn = self.engine.connect()
        self.in_use = True
        return conn

    def __exit__(self, *exc) -> None:
        self.in_use = False
        conn = self.conn
        if conn is not None and (conn.invalidated or conn.in_transaction()):
            self.close()

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


_event_loop_attempt: contextvars.ContextVar[EventLoopAttempt | None] = contextvars.ContextVar(
    "largesse_event_loop_attempt", default=None)


@contextlib.contextmanager
def event_loop_attempt(kept: KeptConnection | None = None) -> Iterator[EventLoopAttempt]:
    attempt = EventLoopAttempt(kept)
    token = _event_loop_attempt.set(attempt)
    try:
        yield attempt
    finally:
        _event_loop_attempt.reset(token)


def lock_wait_seconds(engine: Engine) -> float:
    """How long an API write may wait for SQLite's lock before answering 503 (30 s if unbounded)."""
    timeout = _lock_timeouts.get(id(engine.pool), -1)
    return timeout if timeout > 0 else 30.0


_sqlite_write_locks: dict[int, threading.RLock] = {}
_lock_timeouts: dict[int, float] = {}  # per pool: how long a writer waits for the lock (-1: forever)
_locks_guard = threading.Lock()


def _writer_lock(engine: Engine) -> threading.RLock | None:
    if engine.dialect.name != "sqlite":
        return None
    key = id(engine.pool)
    lock = _sqlite_write_locks.get(key)
    if lock is None:
        with _locks_guard:
            lock = _sqlite_write_locks.setdefault(key, threading.RLock())
    return lock



def upsert_insert(bind):
    """The dialect's INSERT (with on_conflict_do_nothing/_do_update) for this engine or connection."""
    from sqlalchemy.dialects import postgresql, sqlite

    return sqlite.insert if bind.dialect.name == "sqlite" else postgresql.insert

@contextlib.contextmanager
def write(engine: Engine, *, one_write_statement: bool = False) -> Iterator[Connection]:
    """One write transaction: commit when the block succeeds, roll back otherwise.

    one_write_statement: the block reads, then writes with a single statement (POST /orders:
    orders/pg_write.py). On PostgreSQL the block then runs in autocommit, saving the BEGIN and
    COMMIT round trips: that statement is a transaction of its own, all or nothing, and the
    reads before it see what READ COMMITTED statements see anyway (each its own snapshot).
    Any error then counts as one at COMMIT (`retry_reason`): the statement may have committed.
    On SQLite, whose writes stay separate statements, the block is a transaction as usual.
    """
    engine = _routed(engine)
    if _lost_files and engine.pool in _lost_files:
        from largesse.errors import ServiceUnavailable

        raise ServiceUnavailable("The database is unavailable; retry shortly")
    lock = _writer_lock(engine)
    budget_ms = None
    if lock is not None and not lock.acquire(blocking=False):  # uncontended: no clock reads
        attempt = _event_loop_attempt.get()
        if attempt is not None and attempt.may_yield:  # on the event loop: never block it (see above)
            raise WriteLockBusy()
        timeout = _lock_timeouts.get(id(engine.pool), -1)
        started = time.monotonic()
        if not lock.acquire(timeout=timeout):
            from largesse.errors import ServiceUnavailable

            raise ServiceUnavailable("The database is busy; retry shortly")
        if timeout > 0:  # the wait for the lock counts against SQLite's busy wait: one deadline in all
            budget_ms = max(1, int((timeout - (time.monotonic() - started)) * 1000))
    body_done = False
    autocommit = one_write_statement and lock is None and engine.dialect.name == "postgresql"
    try:
        with _connect(engine) as conn:
            if budget_ms is not None:
                _busy_timeout(conn.connection, budget_ms)
            try:
                if autocommit:
                    conn = conn.execution_options(write=True, isolation_level="AUTOCOMMIT")
                elif not conn.get_execution_options().get("write"):  # a kept connection may have it already
                    conn = conn.execution_options(write=True)
                with conn.begin():
                    yield conn
                    body_done = True
            finally:
                if budget_ms is not None:
                    _busy_timeout(conn.connection, int(_lock_timeouts[id(engine.pool)] * 1000))
    except sa_exc.DBAPIError as exc:
        # An error at COMMIT leaves the outcome unknown: `retrying` must not run the body again.
        exc.largesse_at_commit = body_done or autocommit
        raise
    finally:
        if lock is not None:
            lock.release()


def owned_or_404(conn: Connection, table, organization_id: str, row_id: str, noun: str, *,
                 for_update: bool = False):
    """The row of `table` with this id *and* the caller's organization, or 404.

    Every client resource is looked up this way: another organization's id is
    indistinguishable from an unknown one. for_update: locked until the transaction ends, for
    a read-modify-write (PostgreSQL; SQLite's writer already holds the database).
    """
    from largesse.errors import NotFound

    statement = table.select().where(table.c.organization_id == organization_id, table.c.id == row_id)
    row = conn.execute(statement.with_for_update() if for_update else statement).first()
    if row is None:
        raise NotFound(f"{noun} {row_id} not found", {"id": ["not found"]})
    return row


@contextlib.contextmanager
def read(engine: Engine) -> Iterator[Connection]:
    with _connect(_routed(engine)) as conn:
        if conn.get_execution_options().get("write"):  # a kept connection's last transaction wrote
            conn = conn.execution_options(write=False)
        with conn.begin():
            yield conn


def _connect(engine: Engine):
    """engine.connect(); inside an inline SQLite run on the event loop (web.run_db), the
    connection the loop keeps for them (KeptConnection) when it is free."""
    attempt = _event_loop_attempt.get()
    kept = attempt.kept if attempt is not None else None
    if kept is not None and kept.engine is engine and not kept.in_use:
        return kept
    return engine.connect()


def index_walks(conn: Connection) -> None:
    """For the rest of this transaction, have PostgreSQL walk indexes rather than scan tables.

    For paged reads whose good plan is an index walk that stops after offset + limit entries
    (or a handful of primary-key lookups) whatever the data: without statistics (a table
    bulk-loaded before autovacuum's first ANALYZE) the planner takes it for a few pages and
    sorts or seq-scans it instead: 45-200 ms for a page of GET /rewards at 100,000 rewards
    (docs/benchmarks.md), growing with the table. One statement; nothing on SQLite, whose
    planner always walks these indexes.
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_INDEX_WALKS)


_INDEX_WALKS = "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)"


# --- failures: which ones mean "unavailable", which ones a transaction may be re-run after ----

RETRY_SQLSTATES = {"40001": "serialization_failure", "40P01": "deadlock"}
RETRY_ATTEMPTS = 4


def sqlstate(exc: BaseException) -> str | None:
    return getattr(getattr(exc, "orig", None), "sqlstate", None)


def retry_reason(exc: BaseException) -> str | None:
    """Why re-running exc's transaction is safe, or None.

    PostgreSQL rolled back a transaction that failed with a serialization failure or a
    deadlock (even at COMMIT); a connection lost before COMMIT took its transaction with it.
    """
    if not isinstance(exc, sa_exc.DBAPIError):
        return None
    reason = RETRY_SQLSTATES.get(sqlstate(exc) or "")
    if reason:
        return reason
    if exc.connection_invalidated and not getattr(exc, "largesse_at_commit", False):
        return "disconnect"
    return None


# SQLite primary result codes that mean "not now" rather than "wrong SQL" (which SQLite also
# reports as OperationalError): BUSY, LOCKED, READONLY (a file it may not write: permissions, a
# read-only mount; _configure_sqlite drops such a connection), IOERR, FULL, CANTOPEN, PROTOCOL.
SQLITE_READONLY = 8
_SQLITE_UNAVAILABLE = {5, 6, SQLITE_READONLY, 10, 13, 14, 15}


def is_unavailable(exc: BaseException) -> bool:
    """Is exc the database being unreachable, locked or overloaded (a 503), rather than a bug?"""
    from largesse.errors import ServiceUnavailable

    if isinstance(exc, ServiceUnavailable | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    code = getattr(exc.orig, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _SQLITE_UNAVAILABLE
    # psycopg: connection failures, query_canceled (statement_timeout), lock_not_available
    # (lock_timeout), admin shutdown, too many connections are all OperationalError; bugs in
    # SQL are ProgrammingError / DataError / IntegrityError.
    return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)


def retrying(fn, *args, **kwargs):
    """fn(*args, **kwargs), re-run (up to RETRY_ATTEMPTS in all, with jittered backoff) when its
    transaction failed in a way `retry_reason` calls safe. fn must do one transaction, or
    several of which only the last can fail this way, and no side effect outside the database."""
    from largesse.ops import metrics

    for attempt in range(1, RETRY_ATTEMPTS + 1):
        try:
            return fn(*args, **kwargs)
        except sa_exc.DBAPIError as exc:
            reason = retry_reason(exc)
            if reason is None or attempt == RETRY_ATTEMPTS:
                raise
            metrics.db_retry(reason)
            _sleep(random.uniform(0.005, 0.025) * 2 ** attempt)
    raise AssertionError("unreachable")


# --- PostgreSQL on the event loop -----------------------------------------------------------

# make_engine's options of a PostgreSQL engine, for its twin (loop_engine).
_twin_options: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Per event loop, what loop_engine registered for each engine that serves on it: a PostgreSQL
# engine's LoopTwin, a SQLite engine's KeptConnection.
_on_loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Inside on_loop: {engine: its twin's sync_engine}, read by write() and read().
_on_loop: contextvars.ContextVar[dict | None] = contextvars.ContextVar("largesse_on_loop", default=None)


def _routed(engine: Engine) -> Engine:
    twins = _on_loop.get()
    return twins.get(engine, engine) if twins else engine


def _sleep(seconds: float) -> None:
    """time.sleep, but awaited on the event loop inside on_loop (blocking it would stall every request)."""
    if _on_loop.get():
        import asyncio

        from sqlalchemy.util import await_only

        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


class LoopTwin:
    """An engine's asyncio twin on one event loop, as loop_engine registers it: the twin, what
    write()/read() route to it inside on_loop, and how many requests may use it at once (its
    pool size: the rest wait here rather than for a connection)."""

    __slots__ = ("engine", "routes", "slots")

    def __init__(self, engine: Engine, twin, pool_size: int):
        import asyncio

        self.engine = twin
        self.routes = {engine: twin.sync_engine}
        self.slots = asyncio.Semaphore(pool_size)


@contextlib.asynccontextmanager
async def loop_engine(engine: Engine, *, pool_size: int):
    """While the block runs (an app's lifespan), `engine`'s twin on the running event loop: the
    same PostgreSQL database and options, through psycopg's asyncio connections, for on_loop.
    Disposed after the block. For a SQLite engine, whose requests run inline (web.run_db), the
    connection the loop keeps for them (KeptConnection), closed after the block."""
    if engine.dialect.name == "sqlite":
        connection = KeptConnection(engine)
        try:
            with _registered(engine, connection):
                yield connection
        finally:
            connection.close()
        return
    options = _twin_options.get(engine)
    if options is None:
        yield None
        return
    from sqlalchemy.ext.asyncio import create_async_engine

    from largesse.pg_loop import KeptSocketConnection

    # Its connections keep their socket registered with the loop between waits (pg_loop.py).
    options = {**options, "connect_args": {**options["connect_args"],
                                           "async_creator_fn": KeptSocketConnection.connect}}
    twin = create_async_engine(engine.url.set(drivername="postgresql+psycopg_async"), pool_size=pool_size,
                               max_overflow=pool_size, **options)
    event.listen(twin.sync_engine, "checkout", _drop_closed_connections)
    try:
        with _registered(engine, LoopTwin(engine, twin, pool_size)) as registered:
            yield registered
    finally:
        await twin.dispose()


@contextlib.contextmanager
def _registered(engine: Engine, resource):
    """resource, what on_this_loop(engine) answers on the running event loop while the block runs."""
    import asyncio

    registry = _on_loops.setdefault(asyncio.get_running_loop(), {})
    registry[engine] = resource
    try:
        yield resource
    finally:
        registry.pop(engine, None)


def on_this_loop(engine: Engine) -> LoopTwin | KeptConnection | None:
    """What loop_engine registered for `engine` on the running event loop (a PostgreSQL engine's
    twin, a SQLite engine's kept connection), or None."""
    import asyncio

    registry = _on_loops.get(asyncio.get_running_loop())
    return registry.get(engine) if registry else None


async def on_loop(twin: LoopTwin, fn, *args, **kwargs):
    """fn(*args, **kwargs), synchronous code, in a greenlet on the running event loop, its
    write(engine)/read(engine) transactions on the twin's connections: every round trip awaits
    on the loop (SQLAlchemy's greenlet bridge, as its asyncio extension runs its own sync code).
    At most the twin's pool size run at once."""
    from sqlalchemy.util import greenlet_spawn

    def run():
        token = _on_loop.set(twin.routes)
        try:
            return fn(*args, **kwargs)
        finally:
            _on_loop.reset(token)

    async with twin.slots:
        return await greenlet_spawn(run)


# --- hot statements: compiled once, executed on the driver's cursor ------------------------------

class Prepared:
    """A Core statement compiled once per dialect and executed on the DBAPI connection of the
    caller's transaction: the request paths' hottest statements (POST /orders).

    `conn.execute(statement)` costs about 0.05 ms of CPU per statement before the driver is
    called (cache-key lookup, execution context, parameter construction, result metadata):
    with ~8 statements an order, a quarter of the API's CPU per order (docs/benchmarks.md).
    Prepared keeps the statement a SQLAlchemy construct (one definition; the dialect compiles
    it, with the same bind processors: datetimes and JSON as SQLAlchemy stores them), but does
    that work once: a call is the driver's execute, the parameters in the compiled order, and
    rows as named tuples. Driver errors are wrapped and handled by the Connection as usual
    (IntegrityError, disconnects invalidate the connection, `retrying`/`is_unavailable` see
    SQLAlchemy's exceptions). psycopg still prepares a statement server-side after its
    `prepare_threshold` executions, as under conn.execute.

    What it does not do: no autobegin (the caller holds a transaction: db.write/db.read), no
    cursor events or echo, no expanding (IN) parameters, and INSERT columns with a Python-side
    default must be scalar defaults. An INSERT compiles per set of row keys.
    """

    __slots__ = ("statement", "_forms", "__weakref__")

    def __init__(self, statement) -> None:
        self.statement = statement
        self._forms: dict = {}  # (dialect, row keys) -> _Form

    def rows(self, conn: Connection, params: dict | None = None) -> list:
        """The statement's rows (SELECT, or RETURNING) for one set of parameters."""
        form = self._form(conn, params)
        return form.run(conn, params or {})

    def first(self, conn: Connection, params: dict | None = None):
        rows = self.rows(conn, params)
        return rows[0] if rows else None

    def scalars(self, conn: Connection, params: dict | None = None) -> list:
        return [row[0] for row in self.rows(conn, params)]

    def execute_many(self, conn: Connection, rows: list[dict]) -> None:
        """An INSERT (or UPDATE) for each of rows (dicts with the same keys), in one driver call."""
        if not rows:
            return
        form = self._form(conn, rows[0])
        if len(rows) == 1:
            form.run(conn, rows[0])
        else:
            form.run_many(conn, rows)

    def _form(self, conn: Connection, params: dict | None) -> _Form:
        dialect = conn.dialect
        keys = tuple(params) if params and getattr(self.statement, "is_insert", False) else None
        form = self._forms.get((id(dialect), keys))
        if form is None or form.dialect is not dialect:
            form = self._forms[(id(dialect), keys)] = _Form(self.statement, dialect, keys)
        return form


def _fast_processor(bind, dialect, process):
    """The bind processor of a Prepared parameter, or a faster equivalent: SQLite's DATETIME
    (its default storage format) formats a naive datetime as datetime.isoformat does, in C."""
    if process is None or bind is None or dialect.name != "sqlite":
        return process
    from sqlalchemy.dialects.sqlite import DATETIME

    impl = bind.type.dialect_impl(dialect)
    if not isinstance(impl, DATETIME) or impl._storage_format != DATETIME._storage_format:
        return process
    datetime_type = datetime.datetime

    def isoformat(value, _process=process):
        if type(value) is datetime_type and value.tzinfo is None:
            return value.isoformat(" ", "microseconds")
        return _process(value)

    return isoformat


class _Form:
    """One compiled form of a Prepared statement (one dialect, one set of INSERT keys)."""

    __slots__ = ("dialect", "sql", "names", "processors", "getter", "converts", "defaults", "positional", "row",
                 "ask_cursor", "result_processors")

    def __init__(self, statement, dialect, keys: tuple | None) -> None:
        import collections

        compiled = statement.compile(dialect=dialect, column_keys=list(keys) if keys is not None else None)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("Prepared statements take no expanding (IN) parameters")
        self.dialect = dialect
        self.sql = compiled.string
        self.positional = compiled.positional
        self.names = list(compiled.positiontup) if compiled.positional else list(compiled.bind_names.values())
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        self.processors = [_fast_processor(binds.get(name), dialect, compiled._bind_processors.get(name))
                           for name in self.names]
        # The common case (every parameter given): one C call fetches them all, and only the
        # parameters with a processor are visited.
        self.getter = operator.itemgetter(*self.names) if len(self.names) > 1 else None
        self.converts = [(i, process) for i, process in enumerate(self.processors) if process is not None]
        self.defaults = {}
        for bind, name in compiled.bind_names.items():
            if bind.callable is not None:
                raise ValueError(f"Prepared statements take no callable parameters ({name})")
            if not bind.required and bind.value is not None:
                self.defaults[name] = bind.value
        for column in getattr(compiled, "insert_prefetch", ()):
            default = column.default
            if default is None or not default.is_scalar:
                raise ValueError(f"column {column.key} has a Python-side default that is not a scalar")
            self.defaults[column.key] = default.arg
        columns = compiled._result_columns  # empty for text(): its rows are plain tuples
        # Only text() leaves the question of rows to the cursor (whose description, on psycopg,
        # builds a Column object per column): a Core SELECT or RETURNING has result columns, an
        # INSERT/UPDATE/DELETE without RETURNING has no rows.
        self.ask_cursor = not columns and not getattr(statement, "is_dml", False)
        self.row = collections.namedtuple("PreparedRow", [c[0] for c in columns], rename=True) if columns else None
        if self.row is not None:
            self.row._mapping = property(lambda row: dict(zip(row._fields, row, strict=True)))
        procs = [c[3]._cached_result_processor(dialect, None) for c in columns]
        self.result_processors = procs if any(procs) else None

    def _values(self, params: dict):
        if self.getter is not None:
            try:
                values = self.getter(params)
            except KeyError:  # some are left to their defaults (or None)
                pass
            else:
                if self.converts:
                    values = list(values)
                    for i, process in self.converts:
                        if values[i] is not None:
                            values[i] = process(values[i])
                return tuple(values) if self.positional else dict(zip(self.names, values, strict=True))
        defaults = self.defaults
        values = []
        for name, process in zip(self.names, self.processors, strict=True):
            value = params[name] if name in params else defaults.get(name)
            if process is not None and value is not None:
                value = process(value)
            values.append(value)
        return tuple(values) if self.positional else dict(zip(self.names, values, strict=True))

    def _make_rows(self, raw_rows) -> list:
        if self.row is None:
            return raw_rows
        make, procs = self.row._make, self.result_processors
        if procs is None:
            return [make(r) for r in raw_rows]
        return [make([p(v) if p is not None else v for p, v in zip(procs, r, strict=True)]) for r in raw_rows]

    def run(self, conn: Connection, params: dict) -> list:
        return self._call(conn, self._values(params), many=False)

    def run_many(self, conn: Connection, rows: list[dict]) -> None:
        self._call(conn, [self._values(r) for r in rows], many=True)

    def _call(self, conn: Connection, values, *, many: bool) -> list:
        """The driver's execute (or executemany) on the transaction's connection; its errors
        handled by the Connection as conn.execute's are."""
        cursor = None
        try:
            if not conn.in_transaction():
                raise RuntimeError("Prepared statements run inside the caller's transaction")
            cursor = conn.connection.dbapi_connection.cursor()
            if many:
                cursor.executemany(self.sql, values)
                rows = []
            else:
                cursor.execute(self.sql, values)
                has_rows = self.row is not None or (self.ask_cursor and cursor.description is not None)
                rows = self._make_rows(cursor.fetchall()) if has_rows else []
            cursor.close()
            return rows
        except self.dialect.loaded_dbapi.Error as exc:
            conn._handle_dbapi_exception(exc, self.sql, values, cursor, None)
