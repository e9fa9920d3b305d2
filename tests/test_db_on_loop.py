"""PostgreSQL requests await on the event loop (db.loop_engine, db.on_loop, web.run_db): the
server's asyncio twin of its engine serves them and is closed with the server."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from largesse import db
from tests.conftest import create_org
from tests.factories import ok, place


def _connections(engine) -> int:
    with db.read(engine) as conn:
        return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND pid <> pg_backend_pid()")).scalar()


def test_a_servers_connections_are_closed_when_it_stops(backend, engine, make_server):
    if backend != "postgresql":
        pytest.skip("SQLite requests run inline, on no pool of their own")
    before = _connections(engine)
    server = make_server()
    org = create_org(engine, server.url)
    with org.http() as client:
        for _ in range(3):
            order = place(client, org.member_email)
            ok(client.get(f"/orders/{order['id']}"))
    assert _connections(engine) > before  # the server's own connections (its twin's pool)
    server.stop()
    deadline = time.monotonic() + 10
    while _connections(engine) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _connections(engine) == before


def test_a_process_uses_its_share_of_the_servers_database_concurrency(backend, engine, make_server):
    """LARGESSE_DB_CONCURRENCY is shared by the API processes of a server (Settings.db_slots):
    with 4 for 2 processes, 24 concurrent orders reach PostgreSQL over 2 connections."""
    if backend != "postgresql":
        pytest.skip("SQLite requests run inline, on no pool of their own")
    with db.read(engine) as conn:
        started = conn.execute(text("SELECT now()")).scalar()
    server = make_server(db_concurrency=4, api_processes=2)
    orgs = [create_org(engine, server.url) for _ in range(4)]

    def orders(org):
        with org.http() as client:
            for _ in range(6):
                place(client, org.member_email)

    with ThreadPoolExecutor(len(orgs) * 2) as pool:
        list(pool.map(orders, orgs * 2))
    with db.read(engine) as conn:
        opened = conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_start >= :started"), {"started": started}).scalar()
    assert 1 <= opened <= 2
