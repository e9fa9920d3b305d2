"""The other lists at 100,000 rows: orders, balance transactions, fraud reviews, invoices, top-ups,
connected organizations, right after a bulk load.

One fresh database per run (PostgreSQL: named lists_*, dropped afterwards), migrated as `largesse
serve` does; one organization gets N rows of each resource, bulk-inserted through SQLAlchemy Core
into the Largesse tables (N orders with their ledger entries; N rewards, each with a fraud review;
N invoices; N top-ups; N connected organizations). On PostgreSQL autovacuum is disabled on those
tables until the measurements end, so the planner has no statistics, as right after an import
(SQLite never has any: the app runs no ANALYZE). One `largesse serve --workers 1` answers, over
one keep-alive connection, `reps` sequential requests per page (after one warm-up request):
each list's first page, a filtered first page where the list has filters, a filter that matches
nothing (which must not walk the whole list), and offset=50000.
Printed per page: median and p95 wall ms, and the server's CPU ms per request (user + system
of the serving process, over the requests).

    python -m bench.lists --db sqlite|postgresql [--quick] [--rows 100000] [--reps 20]

--quick: 20,000 rows and 10 requests per page. BENCH_LARGESSE_SRC=/other/checkout/src serves
(and, with PYTHONPATH set the same, migrates) another checkout, for a before/after.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import secrets
import statistics
import sys
import time
from datetime import timedelta

from bench import common

BATCH = 5_000
TABLES = ("orders", "ledger_entries", "rewards", "fraud_reviews", "invoices", "topups", "organizations",
          "connected_organizations")
REVIEW_STATUSES = ("released",) * 16 + ("blocked",) * 3 + ("flagged",)  # 5 % flagged


def pages(rows: int, start) -> dict[str, str]:
    """name -> path. The filters' dates cut the seeded period (one row a second) in halves and quarters."""
    def at(fraction: float) -> str:
        return (start + timedelta(seconds=int(rows * fraction))).strftime("%Y-%m-%dT%H:%M:%SZ")

    deep = rows // 2
    never = "2099-01-01T00:00:00Z"
    return {
        "orders": "/api/v2/orders",
        "orders limit=100": "/api/v2/orders?limit=100",
        "orders limit=500": "/api/v2/orders?limit=500",
        "orders campaign_id=NOPE": "/api/v2/orders?campaign_id=NOPE",
        f"orders offset={deep}": f"/api/v2/orders?offset={deep}",
        "balance_transactions": "/api/v2/balance_transactions",
        "balance_transactions gte": f"/api/v2/balance_transactions?created_at%5Bgte%5D={at(0.5)}",
        "balance_transactions gte+lte": (f"/api/v2/balance_transactions?created_at%5Bgte%5D={at(0.25)}"
                                         f"&created_at%5Blte%5D={at(0.75)}"),
        "balance_transactions gte 2099": f"/api/v2/balance_transactions?created_at%5Bgte%5D={never}",
        f"balance_transactions offset={deep}": f"/api/v2/balance_transactions?offset={deep}",
        "fraud_reviews": "/api/v2/fraud_reviews",
        "fraud_reviews status=flagged": "/api/v2/fraud_reviews?status=flagged",
        "fraud_reviews status=released": "/api/v2/fraud_reviews?status=released",
        "fraud_reviews created gte": f"/api/v2/fraud_reviews?created_at%5Bgte%5D={at(0.5)}",
        "fraud_reviews created gte+lte": (f"/api/v2/fraud_reviews?created_at%5Bgte%5D={at(0.25)}"
                                          f"&created_at%5Blte%5D={at(0.75)}"),
        "fraud_reviews created gte 2099": f"/api/v2/fraud_reviews?created_at%5Bgte%5D={never}",
        "fraud_reviews redeemed gte": f"/api/v2/fraud_reviews?redeemed_at%5Bgte%5D={at(0.5)}",
        f"fraud_reviews offset={deep}": f"/api/v2/fraud_reviews?offset={deep}",
        "invoices": "/api/v2/invoices",
        f"invoices offset={deep}": f"/api/v2/invoices?offset={deep}",
        "topups": "/api/v2/topups",
        f"topups offset={deep}": f"/api/v2/topups?offset={deep}",
        "connected_organizations": "/api/v2/connected_organizations",
        f"connected_organizations offset={deep}": f"/api/v2/connected_organizations?offset={deep}",
    }


@contextlib.contextmanager
def database(kind: str, work) -> str:
    if kind == "sqlite":
        yield f"sqlite:///{work / 'lists.sqlite3'}"
        return
    import psycopg

    name = f"lists_{secrets.token_hex(4)}"
    with psycopg.connect(common.PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield common.PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(common.PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def autovacuum(url: str, enabled: bool) -> None:
    """Keep autovacuum's ANALYZE off the seeded tables until the measurements end (PostgreSQL)."""
    from largesse import db

    engine = db.make_engine(url)
    try:
        if engine.dialect.name == "postgresql":
            with db.write(engine) as conn:
                for table in TABLES:
                    conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = {str(enabled).lower()})")
    finally:
        engine.dispose()


def seed(url: str, org: common.BenchOrg, count: int, start) -> float:
    """`count` rows of each resource for `org`, one a second from `start`; returns the seconds taken."""
    import random

    from largesse import db
    from largesse.connected.models import connected_organizations
    from largesse.fraud.models import fraud_reviews
    from largesse.funding.models import ledger_entries
    from largesse.ids import new_id
    from largesse.invoices.models import invoices
    from largesse.orders.models import orders, rewards
    from largesse.orgs.models import organizations
    from largesse.topups.models import topups

    rng = random.Random(20261124)
    began = time.monotonic()
    engine = db.make_engine(url)
    oid, balance = org.organization_id, common.FUNDING_CENTS
    try:
        for first in range(0, count, BATCH):
            rows: dict = {t: [] for t in (orders, ledger_entries, rewards, fraud_reviews, invoices, topups,
                                          organizations, connected_organizations)}
            for i in range(first, min(first + BATCH, count)):
                at = start + timedelta(seconds=i)
                cents = rng.randint(5, 500) * 100
                order_id, reward_id, sub_org = new_id(), new_id(), new_id()
                balance -= cents
                rows[orders].append({
                    "id": order_id, "organization_id": oid, "external_id": f"bench-{i}" if i % 2 else None,
                    "request_hash": None, "campaign_id": None, "status": "EXECUTED", "channel": "API",
                    "funding_source_id": org.funding_source_id, "currency_code": "USD", "subtotal_cents": cents,
                    "fees_cents": 0, "discount_cents": 0, "total_cents": cents, "refund_cents": 0, "created_at": at})
                rows[ledger_entries].append({
                    "funding_source_id": org.funding_source_id, "organization_id": oid, "amount_cents": -cents,
                    "balance_after_cents": balance, "kind": "order", "memo": None, "order_id": order_id,
                    "reward_id": None, "created_at": at})
                rows[rewards].append({
                    "id": reward_id, "organization_id": oid, "order_id": order_id, "campaign_id": None,
                    "products": [common.PRODUCT], "denomination_cents": cents, "fee_cents": 0, "currency_code": "USD",
                    "recipient_name": f"Recipient {i}", "recipient_email": f"r{i}@example.com",
                    "recipient_phone": None, "delivery_method": "EMAIL", "delivery_status": "SUCCEEDED",
                    "delivery_meta": None, "delivered_at": at, "deliver_at": None, "language": None,
                    "status": "ACTIVE", "expires_at": None, "created_at": at})
                status = REVIEW_STATUSES[i % len(REVIEW_STATUSES)]
                reviewed = status != "flagged"
                rows[fraud_reviews].append({
                    "reward_id": reward_id, "organization_id": oid, "status": status,
                    "reasons": ["Over reward count limit"], "risk": "medium", "product_id": common.PRODUCT,
                    "ip": "203.0.113.7", "country": None, "device_id": None,
                    # Redeemed some minutes to hours later: not in creation order.
                    "redeemed_at": at + timedelta(seconds=rng.randint(60, 7200)), "reward_created_at": at,
                    "reviewed_by": "bench" if reviewed else None, "reviewed_at": at if reviewed else None})
                rows[invoices].append({
                    "id": new_id(), "organization_id": oid, "amount_cents": cents, "currency_code": "USD",
                    "po_number": None, "memo": None, "status": ("OPEN", "PAID", "PAID", "DELETED")[i % 4]
                    if i % 50 == 0 else "PAID", "created_at": at, "paid_at": None, "deleted_at": None,
                    "funding_source_id": None})
                rows[topups].append({
                    "id": new_id(), "organization_id": oid, "funding_source_id": org.funding_source_id,
                    "amount_cents": cents, "currency_code": "USD", "status": "fully_credited",
                    "idempotency_key": f"bench-{i}", "created_at": at, "fully_credited_at": at})
                rows[organizations].append({
                    "id": sub_org, "name": f"Client {i}", "currency_code": "USD", "fee_basis_points": 0,
                    "fee_flat_cents": 0, "created_at": at, "environment": "sandbox", "parent_organization_id": oid})
                rows[connected_organizations].append({
                    "id": new_id(), "platform_organization_id": oid, "organization_id": sub_org,
                    "client_id": f"client-{i}", "kyb_prefill": None, "created_at": at,
                    "deleted_at": at if i % 100 == 0 else None})
            with db.write(engine) as conn:
                for table, batch in rows.items():
                    conn.execute(table.insert(), batch)
    finally:
        engine.dispose()
    return time.monotonic() - began


def serve(url: str, work) -> common.Server:
    """`largesse serve --workers 1` on a free port of 19700-19799 (loopback)."""
    import socket

    for port in range(19700, 19800):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        env = common.server_env(url, LARGESSE_PUBLIC_URL=f"http://127.0.0.1:{port}")
        cmd = [str(common.VENV_BIN / "largesse"), "serve", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]
        return common.Server("largesse-lists", cmd, env, port, work)
    raise RuntimeError("no free port in 19700-19799")


def measure(server: common.Server, api_key: str, path: str, reps: int) -> dict:
    """Median and p95 wall ms of `reps` sequential requests over one keep-alive connection, and
    the server's CPU ms per request over them (after one warm-up request)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    headers = {"Authorization": f"Bearer {api_key}"}
    try:
        def get() -> int:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            return response.status

        status = get()
        wall = []
        cpu_before = server.cpu_seconds()
        for _ in range(reps):
            began = time.perf_counter()
            status = get()
            wall.append((time.perf_counter() - began) * 1000)
        cpu = (server.cpu_seconds() - cpu_before) * 1000 / reps
    finally:
        conn.close()
    wall.sort()
    return {"status": status, "p50_ms": statistics.median(wall),
            "p95_ms": wall[min(len(wall) - 1, round(0.95 * (len(wall) - 1)))], "cpu_ms": cpu}


def run(kind: str, rows: int, reps: int) -> list[tuple[str, dict]]:
    from largesse.timeutil import utcnow

    results = []
    with common.workdir() as work, database(kind, work) as url:
        common.prepare_database(url)
        autovacuum(url, False)
        org = common.create_funded_org(url)
        start = (utcnow() - timedelta(seconds=rows + 86_400)).replace(microsecond=0)
        seconds = seed(url, org, rows, start)
        common.log(f"lists {kind}: seeded {rows:,} rows of each resource in {seconds:.1f} s")
        server = serve(url, work).start()
        try:
            for name, path in pages(rows, start).items():
                result = measure(server, org.api_key, path, reps)
                common.log(f"  {kind:<10} {name:<40} p50 {result['p50_ms']:7.1f} ms  p95 {result['p95_ms']:7.1f} ms"
                           f"  cpu {result['cpu_ms']:6.1f} ms/req  ({result['status']})")
                results.append((name, result))
        finally:
            server.stop()
            autovacuum(url, True)
    return results


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lists", description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 10 requests per page")
    parser.add_argument("--rows", type=int, help="rows of each resource (default 100,000)")
    parser.add_argument("--reps", type=int, help="requests per page (default 20)")
    opts = parser.parse_args(args)
    rows = opts.rows or (20_000 if opts.quick else 100_000)
    reps = opts.reps or (10 if opts.quick else 20)
    if opts.db == "postgresql" and not common.pg_available():
        common.log(f"lists: PostgreSQL not reachable at {common.PG_ADMIN_URL}; skipping it")
        return
    results = run(opts.db, rows, reps)
    print(f"\n{opts.db}, {rows:,} rows of each, {reps} requests per page, 1 worker, keep-alive, no statistics")
    header = f"{'page':<42}{'p50 ms':>8}{'p95 ms':>8}{'cpu ms':>8}{'status':>7}"
    print(header)
    print("-" * len(header))
    for name, r in results:
        print(f"{name:<42}{r['p50_ms']:>8.1f}{r['p95_ms']:>8.1f}{r['cpu_ms']:>8.1f}{r['status']:>7}")


if __name__ == "__main__":
    main(sys.argv[1:])
