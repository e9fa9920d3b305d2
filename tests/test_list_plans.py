"""The lists' query plans right after a bulk load (no statistics: no ANALYZE, autovacuum off), on
SQLite and PostgreSQL: each page walks the index that ends with its list's ORDER BY and stops after
offset + limit rows; none sorts the organization's rows (docs/benchmarks.md, "twentieth pass")."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from bench import common as bench_common
from bench import lists as bench_lists
from sqlalchemy import event

from largesse import db
from largesse.connected import service as connected
from largesse.orders import repository
from largesse.timeutil import utcnow
from tests.conftest import _pg_reachable, empty_pg_database, pg_missing

ROWS = 5_000


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def loaded(request, tmp_path_factory):
    """(engine, organization ID): ROWS of each list's rows for one organization, bulk-inserted."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('plans') / 'plans.sqlite3'}"
        else:
            if not _pg_reachable():
                pg_missing("PostgreSQL is unreachable")
            url = stack.enter_context(empty_pg_database("largesse_plans"))
        bench_common.prepare_database(url)
        bench_lists.autovacuum(url, False)
        org = bench_common.create_funded_org(url)
        bench_lists.seed(url, org, ROWS, (utcnow() - timedelta(days=2)).replace(microsecond=0))
        engine = db.make_engine(url)
        stack.callback(engine.dispose)
        yield engine, org.organization_id


def first_plan(engine, read) -> str:
    """The plan of the first statement `read(conn)` runs (a list's page), as the database prints it."""
    seen: list = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if not statement.startswith("EXPLAIN") and not statement.startswith("SELECT set_config"):
            seen.append((statement, parameters))

    with db.read(engine) as conn:
        event.listen(engine, "before_cursor_execute", record)
        try:
            read(conn)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        statement, parameters = seen[0]
        explain = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
        rows = conn.exec_driver_sql(explain + statement, parameters).all()
    return "\n".join(str(row[-1]) for row in rows)


def assert_walks(plan: str, index: str) -> None:
    assert index in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan


@pytest.mark.parametrize("offset", [0, ROWS // 2])
def test_the_order_list_walks_its_index_in_list_order(loaded, offset):
    engine, org = loaded
    plan = first_plan(engine, lambda conn: repository.list_orders(
        conn, org, offset=offset, limit=100, campaign_id=None, external_id=None, created_gte=None, created_lte=None))
    assert_walks(plan, "ix_orders_org_created_id")


def test_orders_of_a_campaign_with_none_is_a_seek(loaded):
    engine, org = loaded
    plan = first_plan(engine, lambda conn: repository.list_orders(
        conn, org, offset=0, limit=10, campaign_id="NOPE", external_id=None, created_gte=None, created_lte=None))
    assert_walks(plan, "ix_orders_org_campaign_created_id")


def test_the_connected_organizations_list_walks_its_index(loaded):
    engine, org = loaded
    plan = first_plan(engine, lambda conn: connected.list_connected_orgs(conn, org, offset=0, limit=10))
    assert_walks(plan, "ix_connected_organizations_live_created_id")
