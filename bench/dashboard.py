"""Server time of every dashboard page with 100,000 rewards in the organization.

    python -m bench.dashboard [--rewards 100000] [--db sqlite|postgresql] [--repeat 20]

Builds one production organization with N rewards (orders of 500 placed through the
dashboard's own order service, a custom field on every reward, some canceled), signs a
member in, then requests each page in-process (Starlette's TestClient: no network, so the
time is the server's) and prints the median and the slowest of `repeat` requests per page.
docs/dashboard.md records the figures.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import select

from largesse import db
from largesse.app import create_app
from largesse.bootstrap import prepare
from largesse.config import Settings
from largesse.dashboard import bulk, signin
from largesse.delivery import service as delivery
from largesse.fields import service as fields_service
from largesse.funding import service as funding
from largesse.orders import browse
from largesse.orders import service as orders_service
from largesse.orders.models import orders, rewards
from largesse.orgs import service as orgs

with warnings.catch_warnings():  # starlette asks for httpx2; the httpx we have works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

PRODUCT = "PCHOCEANTR01US"
BATCH = 500
PG_ADMIN_URL = os.environ.get("LARGESSE_BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")


def log(text: str) -> None:
    print(text, flush=True)


def build(engine, settings: Settings, rewards: int) -> tuple[str, str, str, str]:
    """(organization id, member id, an order id, a reward id) of a fresh organization."""
    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Bench Corp", member_email=f"owner-{secrets.token_hex(3)}@example.com",
                                  member_name="Owner", sandbox=False)
        field = fields_service.create(conn, organization_id=created.organization_id, display_name="Department",
                                      data_type="Dropdown", options=["Sales", "Support", "Research"], required=False,
                                      description=None)
    funding.fund(engine, organization_id=created.organization_id, amount_cents=rewards * 500 + 100,
                 memo="bench", reference=None)
    started = time.perf_counter()
    order_id = reward_id = ""
    for n in range(0, rewards, BATCH):
        batch = []
        for i in range(n, min(n + BATCH, rewards)):
            reward, problems = bulk.reward_in(
                name=f"Person {i}", email=f"person{i}@example.com", amount_text="5", products=[PRODUCT],
                campaign_id=None, method="LINK",
                custom_fields=[{"id": field["id"], "value": ("Sales", "Support", "Research")[i % 3]}])
            assert not problems, problems
            batch.append(reward)
        placed = orders_service.place_order_as_member(
            engine, settings=settings, organization_id=created.organization_id, body=bulk.order_in(batch))
        order_id = placed.order["id"]
        reward_id = placed.order["rewards"][0]["id"]
        if n // BATCH % 20 == 0:
            # Some canceled rewards in the lists (LINK rewards never fail delivery: cancel any).
            delivery.cancel_reward(engine, org=created.organization_id, reward_id=reward_id, any_delivery=True)
            log(f"  {n + len(batch)} rewards ({time.perf_counter() - started:.0f} s)")
    return created.organization_id, created.member_id, order_id, reward_id


def _cursor(conn, table, org_id: str, depth: int) -> str:
    row = conn.execute(select(table.c.created_at, table.c.id).where(table.c.organization_id == org_id)
                       .order_by(table.c.created_at.desc(), table.c.id.desc()).offset(depth).limit(1)).first()
    return quote(browse.cursor_of(row))


def measure(client: TestClient, path: str, repeat: int) -> tuple[float, float, float]:
    """(median wall ms, slowest wall ms, median CPU ms) of `repeat` requests. CPU time (this
    process: the app and the SQLite engine run here) does not count the time other programs
    on a shared machine hold the cores, which the wall clock does."""
    client.get(path)  # warm: templates compiled, statements cached
    wall, cpu = [], []
    for _ in range(repeat):
        began, began_cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        wall.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return statistics.median(wall), max(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewards", type=int, default=100_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="largesse-dashboard-bench-"))
    pg_name = None
    if args.db == "sqlite":
        url = f"sqlite:///{tmp / 'bench.sqlite3'}"
    else:
        import psycopg

        pg_name = f"largesse_bench_{secrets.token_hex(4)}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{pg_name}"
    try:
        settings = Settings(database_url=url, environment="production", run_worker=False, mail_dir=str(tmp / "mail"),
                            public_url="http://testserver")
        engine = db.make_engine(url)
        prepare(engine)
        log(f"building an organization with {args.rewards} rewards on {args.db}")
        org_id, member_id, order_id, reward_id = build(engine, settings, args.rewards)
        with db.write(engine) as conn:
            cookie = signin.start_session(conn, member_id=member_id)
            deep_rewards = _cursor(conn, rewards, org_id, args.rewards // 2)  # half-way: "Next page" 2,000 times
            deep_orders = _cursor(conn, orders, org_id, args.rewards // BATCH // 2)
        app = create_app(replace(settings), engine=engine)
        with TestClient(app, base_url="http://testserver") as client:
            client.cookies.set(signin.COOKIE, cookie)
            pages = [
                "/dashboard", "/dashboard/orders", f"/dashboard/orders?before={deep_orders}",
                f"/dashboard/orders/{order_id}", "/dashboard/rewards", f"/dashboard/rewards?before={deep_rewards}",
                "/dashboard/rewards?status=CANCELED", "/dashboard/rewards?field=Department&value=Research",
                "/dashboard/rewards?from=2000-01-01&to=2000-01-31",
                "/dashboard/rewards?recipient=PERSON7%40example.com", f"/dashboard/rewards/{reward_id}",
                "/dashboard/send", "/dashboard/campaigns", "/dashboard/funding", "/dashboard/team",
                "/dashboard/developers", "/dashboard/approvals", "/dashboard/funding/invoices",
                "/dashboard/funding/topups", "/dashboard/reports",
            ]
            log(f"\n{'page':<70} {'median ms':>10} {'max ms':>8} {'CPU ms':>7}")
            for path in pages:
                median, worst, cpu = measure(client, path, args.repeat)
                log(f"{path[:70]:<70} {median:>10.1f} {worst:>8.1f} {cpu:>7.1f}")
        engine.dispose()
    finally:
        if pg_name:
            import psycopg

            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
