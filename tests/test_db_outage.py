"""The database goes away and comes back (docs/operations.md).

PostgreSQL: a throwaway cluster of our own (initdb/pg_ctl on a free loopback port, in a temp
directory) serves a real `largesse serve` process; the test restarts it, stops it and starts
it again, and checks every answer: 200 across a restart (pooled connections that the restart
closed are replaced, not failed), 503 with the error body and Retry-After within 2 s while it
is down, 200 again as soon as it is back - without restarting largesse.

SQLite: a database locked by another connection past the API's busy wait, and the
in-process writer lock held past it, answer 503 too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob
import json
import logging
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from sqlalchemy import exc as sa_exc

from largesse import db, web
from largesse.config import Settings
from largesse.ops import metrics
from tests.conftest import (
    GIFT_CARD_USD,
    ServerThread,
    create_org,
    free_port,
    order_body,
    pg_missing,
    run_in_new_loop,
)

LARGESSE = str(Path(sys.executable).parent / "largesse")
DEADLINE_503 = 2.0


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class Cluster:
    """A private PostgreSQL cluster; as root, its commands run as the postgres user."""

    def __init__(self):
        self.bin = _pg_bin()
        if self.bin is None:
            pg_missing("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                pg_missing("running as root without runuser: initdb refuses root")
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                pg_missing("running as root and there is no postgres user to run initdb as")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="largesse-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        if self.as_user:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run([*self.as_user, str(self.bin / tool), *args], capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stdout}\n{result.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.dir / "log"), "-o", options)

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))

    def restart(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "restart", "-w", "-m", "fast", "-D", str(self.data), "-l", str(self.dir / "log"),
                  "-o", options)

    def destroy(self) -> None:
        subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data)],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.destroy()


@pytest.fixture
def served(cluster, tmp_path):
    """`largesse serve` (with its delivery worker) on the cluster; yields (base_url, api_key, log path)."""
    env = {**os.environ, "LARGESSE_DATABASE_URL": cluster.url, "LARGESSE_MAIL_DIR": str(tmp_path / "mail"),
           "LARGESSE_LOG_FORMAT": "json"}
    created = subprocess.run([LARGESSE, "org", "create", "--name", "Outage", "--member-email", "ops@example.com",
                              "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)["api_key"]
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log_file:
        process = subprocess.Popen([LARGESSE, "serve", "--port", str(port)], env=env, cwd=tmp_path,
                                   stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process)
        yield base, key, log_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_ready(base: str, process, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "largesse serve exited"
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("largesse serve did not become ready")


def _requests(key: str):
    """One of each kind of API request: a write, list and item reads, a funding read."""
    auth = {"Authorization": f"Bearer {key}"}
    return [
        ("POST", "/api/v2/orders", auth, order_body("ops@example.com", denomination=5)),
        ("GET", "/api/v2/orders", auth, None),
        ("GET", "/api/v2/funding_sources", auth, None),
        ("GET", "/api/v2/rewards", auth, None),
        ("GET", "/api/v2/campaigns", auth, None),
    ]


def _send(client: httpx.Client, method: str, path: str, headers: dict, body) -> httpx.Response:
    return client.request(method, path, headers=headers, json=body)


def test_postgresql_restart_stop_and_return(cluster, served):
    base, key, log_path = served
    with httpx.Client(base_url=base, timeout=10) as client:
        # Warm the pool: several connections in it, all of which the restart will close.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            warm = list(pool.map(lambda r: _send(client, *r), _requests(key) * 4))
        assert [r.status_code for r in warm] == [200] * len(warm), [r.text for r in warm if r.status_code != 200]

        # 1. A restart: the very next requests succeed (closed pooled connections are replaced).
        cluster.restart()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            after_restart = list(pool.map(lambda r: _send(client, *r), _requests(key) * 4))
        assert [r.status_code for r in after_restart] == [200] * len(after_restart), \
            [r.text for r in after_restart if r.status_code != 200]

        # 2. Stopped: every API request answers 503 quickly, with the error body and Retry-After.
        cluster.stop()
        waits = []
        for method, path, headers, body in _requests(key) * 2:
            started = time.monotonic()
            response = _send(client, method, path, headers, body)
            elapsed = time.monotonic() - started
            waits.append(elapsed)
            assert response.status_code == 503, (method, path, response.status_code, response.text)
            assert elapsed < DEADLINE_503, (method, path, elapsed)
            assert response.json() == {"errors": {"message": response.json()["errors"]["message"], "payload": {}}}
            assert response.headers["Retry-After"].isdigit()
            assert response.headers["X-Request-ID"]
        print(f"\nPostgreSQL down: 503 in {1000 * min(waits):.1f}-{1000 * max(waits):.1f} ms")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and set(ready.json()["errors"]) == {"message", "payload"}
        assert client.get("/healthz").status_code == 200
        scrape = client.get("/metrics")
        assert scrape.status_code == 200 and "largesse_database_up 0.0" in scrape.text
        # The redemption pages too: 503, not an error page with a 500.
        assert client.get("/redeem/not-a-real-token").status_code == 503

        # 3. Back: the first request after the server accepts connections again succeeds.
        cluster.start()
        returned = time.monotonic()
        first = _send(client, *_requests(key)[0])
        assert first.status_code == 200, first.text
        print(f"\nrecovery: first order {1000 * (time.monotonic() - returned):.0f} ms after PostgreSQL returned")
        for request in _requests(key):
            assert _send(client, *request).status_code == 200
        assert client.get("/readyz").status_code == 200

    statuses = [json.loads(line)["status"] for line in log_path.read_text().splitlines()
                if line.startswith("{") and '"largesse.access"' in line]
    assert statuses and all(s != 500 for s in statuses)
    assert "Exception in ASGI application" not in log_path.read_text()


# --- SQLite ---------------------------------------------------------------------------------

@pytest.fixture
def sqlite_server(tmp_path):
    url = f"sqlite:///{tmp_path / 'locked.sqlite3'}"
    engine = db.make_engine(url)
    from largesse.bootstrap import prepare

    prepare(engine)
    settings = Settings(database_url=url, mail_dir=str(tmp_path / "mail"), run_worker=False,
                        reward_list_timestamps="iso8601")
    server = ServerThread(replace(settings), None).start()  # the app builds its own engine: API timeouts
    org = create_org(engine, server.url)
    yield server, org, tmp_path / "locked.sqlite3"
    server.stop()
    engine.dispose()


def _order(org) -> httpx.Response:
    with org.http() as client:
        return client.post("/orders", json=order_body(org.member_email, products=(GIFT_CARD_USD,)))


def test_sqlite_locked_by_another_process_answers_503(sqlite_server, caplog):
    server, org, path = sqlite_server
    assert _order(org).status_code == 200
    caplog.set_level(logging.WARNING)
    holder = sqlite3.connect(path, isolation_level=None, timeout=1)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held as a stuck process would
    try:
        started = time.monotonic()
        response = _order(org)
        elapsed = time.monotonic() - started
        assert response.status_code == 503, response.text
        assert elapsed < DEADLINE_503 + 0.5, elapsed
        print(f"\nSQLite locked: 503 after {1000 * elapsed:.0f} ms")
        assert response.json()["errors"]["payload"] == {}
        assert response.headers["Retry-After"].isdigit()
        with org.http() as client:  # readers are not blocked by a writer (WAL)
            assert client.get("/orders").status_code == 200
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _order(org).status_code == 200
    # One warning line for the refused request, as for a database that is away; no traceback.
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(line.startswith("database unavailable on POST /api/v2/orders") for line in lines), lines
    assert not any(r.exc_info for r in caplog.records), [r.getMessage() for r in caplog.records if r.exc_info]


def test_a_read_only_sqlite_database_answers_503_and_recovers_without_a_restart(sqlite_server):
    """A database file the server may not write (its permissions, a read-only mount) answered
    500 to every write, and kept answering 500 once it was writable again: the connections
    stayed read-only. Here SQLite's query_only makes the connections read-only, as such a file
    does (SQLITE_READONLY); the connections opened after it is lifted may write."""
    from sqlalchemy import event

    server, org, _ = sqlite_server
    engine = server.app.state.engine
    read_only = [True]

    def on_connect(dbapi_connection, record):
        if read_only[0]:
            dbapi_connection.execute("PRAGMA query_only=1")

    event.listen(engine, "connect", on_connect)
    try:
        engine.dispose()  # the next connections are opened read-only
        for _ in range(3):
            response = _order(org)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"].isdigit()
        with org.http() as client:
            assert client.get("/orders").status_code == 200  # reads go on
        read_only[0] = False  # the file is writable again
        assert _order(org).status_code == 200
    finally:
        event.remove(engine, "connect", on_connect)


def test_an_sqlite_file_deleted_while_serving_refuses_writes(sqlite_server, caplog):
    """`rm` of the database under a running server: it kept accepting orders (200), written to
    the deleted file, and the next start found an empty database: every acknowledged order, key
    and balance gone. Now writes answer 503 within a moment and /readyz says why."""
    server, org, path = sqlite_server
    assert _order(org).status_code == 200
    caplog.set_level(logging.ERROR)
    for leftover in glob.glob(f"{path}*"):
        os.unlink(leftover)
    deadline = time.monotonic() + 5
    while _order(org).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    response = _order(org)
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"].isdigit()
    ready = httpx.get(f"{server.url}/readyz")
    assert ready.status_code == 503 and "deleted while in use" in ready.json()["errors"]["message"], ready.text
    assert any("deleted while in use" in r.getMessage() and "/proc/" in r.getMessage() for r in caplog.records)


def test_sqlite_writer_lock_held_past_the_wait_answers_503(sqlite_server):
    server, org, _ = sqlite_server
    engine = server.app.state.engine
    holding, release = threading.Event(), threading.Event()

    def hold():
        with db.write(engine):
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(5)
        response = _order(org)
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"].isdigit()
    finally:
        release.set()
        thread.join()
    assert _order(org).status_code == 200


# --- PostgreSQL serialization failures and deadlocks are re-run (db.retrying, web.write_db) ---

@pytest.fixture
def pg_table(engine, backend):
    if backend != "postgresql":
        pytest.skip("serialization failures and deadlocks are PostgreSQL's")
    name = f"retry_probe_{secrets.token_hex(4)}"
    with db.write(engine) as conn:
        conn.exec_driver_sql(f"CREATE TABLE {name} (id int PRIMARY KEY, n int NOT NULL)")
        conn.exec_driver_sql(f"INSERT INTO {name} VALUES (1, 0), (2, 0)")
    yield name
    with db.write(engine) as conn:
        conn.exec_driver_sql(f"DROP TABLE {name}")


def _retries(reason: str) -> float:
    return metrics.DB_RETRIES.labels(reason)._value.get()


def _write_db(engine, fn, on_loop: bool):
    """web.write_db(engine, fn) in its own event loop: with the loop's twin of the engine, as
    the app's lifespan sets it up (requests run in a greenlet on the loop), or without (in a
    worker thread). Also returns the threads fn ran on, and the loop's."""
    threads = []

    def traced(conn):
        threads.append(threading.get_ident())
        return fn(conn)

    async def run():
        async with db.loop_engine(engine, pool_size=2) if on_loop else contextlib.nullcontext():
            return await web.write_db(engine, traced), threads, threading.get_ident()

    return run_in_new_loop(run())


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "in-thread"])
def test_write_db_reruns_a_transaction_after_a_serialization_failure(engine, pg_table, on_loop):
    attempts = []
    before = _retries("serialization_failure")

    def work(conn):
        attempts.append(1)
        conn.exec_driver_sql(f"UPDATE {pg_table} SET n = n + 1 WHERE id = 1")
        if len(attempts) == 1:  # a real PostgreSQL error with SQLSTATE 40001, first attempt only
            conn.exec_driver_sql("DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40001'; END $$")
        return len(attempts)

    result, threads, loop_thread = _write_db(engine, work, on_loop)
    assert result == 2
    assert (set(threads) == {loop_thread}) is on_loop
    with db.read(engine) as conn:  # the failed attempt's update was rolled back: counted once
        assert conn.exec_driver_sql(f"SELECT n FROM {pg_table} WHERE id = 1").scalar() == 1
    assert _retries("serialization_failure") == before + 1


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "in-thread"])
def test_retries_are_bounded_and_other_errors_are_not_retried(engine, pg_table, on_loop):
    attempts = []

    def always_fails(conn):
        attempts.append(1)
        conn.exec_driver_sql("DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40P01'; END $$")

    with pytest.raises(sa_exc.OperationalError) as raised:
        _write_db(engine, always_fails, on_loop)
    assert len(attempts) == db.RETRY_ATTEMPTS and db.is_unavailable(raised.value)  # the API answers 503

    attempts.clear()

    def duplicate(conn):
        attempts.append(1)
        conn.exec_driver_sql(f"INSERT INTO {pg_table} VALUES (1, 0)")

    with pytest.raises(sa_exc.IntegrityError):
        _write_db(engine, duplicate, on_loop)
    assert len(attempts) == 1


def test_a_real_deadlock_is_resolved_by_rerunning_the_victim(engine, pg_table):
    """Two transactions lock rows 1 and 2 in opposite orders; PostgreSQL aborts one (40P01)
    after deadlock_timeout, db.retrying runs it again, and both complete."""
    barrier = threading.Barrier(2)
    attempts: dict[str, int] = {"a": 0, "b": 0}
    before = _retries("deadlock")

    def transfer(name: str, first: int, second: int):
        def run():
            attempts[name] += 1
            with db.write(engine) as conn:
                conn.exec_driver_sql(f"UPDATE {pg_table} SET n = n + 1 WHERE id = {first}")
                if attempts[name] == 1:
                    barrier.wait(10)  # both hold their first row now
                conn.exec_driver_sql(f"UPDATE {pg_table} SET n = n + 1 WHERE id = {second}")

        db.retrying(run)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = [pool.submit(transfer, "a", 1, 2), pool.submit(transfer, "b", 2, 1)]
        for future in done:
            future.result(timeout=30)
    with db.read(engine) as conn:
        assert conn.exec_driver_sql(f"SELECT n FROM {pg_table} ORDER BY id").scalars().all() == [2, 2]
    assert sorted(attempts.values()) == [1, 2]
    assert _retries("deadlock") == before + 1
