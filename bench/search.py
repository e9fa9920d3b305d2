"""GET /rewards search: throughput and latency at 10k and 100k rewards.

Two fresh databases per backend, seeded with 10,000 and 100,000 rewards of one organization
(bulk inserts through SQLAlchemy Core into the Largesse tables: an order per reward, the
reward, and its two custom field values, as POST /orders writes them; the balance is left
alone), each served by `largesse serve --workers 1`. We measure, alternating between the two
sizes, three queries with wrk:

  search     GET /rewards?Department=Sales              (10% of the rewards match)
  two-label  GET /rewards?Department=Sales&Region=EMEA  (2.5% match)
  list       GET /rewards                               (all rewards, newest first)

each answering the default page (100 rewards) and total_count (bounded: paging.COUNT_HORIZON).
"cold wall ms" is the median wall time of single requests right after the bulk load, before
any ANALYZE (a fresh import); the wrk runs follow an ANALYZE. The EXPLAIN of the search
query's statements is printed once per backend, to show which index they use.

Run alone: python -m bench.search [--quick] [--db sqlite|postgresql] [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import timedelta

from bench import common

DEPARTMENTS = ["Sales", "Engineering", "Marketing", "Support", "Finance", "Operations", "Legal", "People",
               "Product", "Design"]
REGIONS = ["EMEA", "AMER", "APAC", "LATAM"]
QUERIES = {
    "search": "/api/v2/rewards?Department=Sales",
    "two-label": "/api/v2/rewards?Department=Sales&Region=EMEA",
    "list": "/api/v2/rewards",
}
BATCH = 5_000


def parse_args(args: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "all"), default="all")
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated reward counts")
    parser.add_argument("--duration", type=float, help="seconds per measurement (default 4, quick 2)")
    parser.add_argument("--reps", type=int, help="measurements per query and size (default 3, quick 2)")
    parser.add_argument("--connections", type=int, default=16)
    return parser.parse_args(args)


def seed(url: str, org: common.BenchOrg, count: int, *, rng: random.Random) -> float:
    """Insert `count` rewards with Department and Region values; returns the seconds it took."""
    from largesse import db
    from largesse.fields import service as fields_service
    from largesse.ids import new_id
    from largesse.orders.models import orders, reward_field_values, rewards
    from largesse.timeutil import utcnow

    started = time.monotonic()
    engine = db.make_engine(url)
    try:
        with db.write(engine) as conn:
            department = fields_service.create(conn, organization_id=org.organization_id, display_name="Department",
                                               data_type="Dropdown", options=DEPARTMENTS, required=False,
                                               description=None)
            region = fields_service.create(conn, organization_id=org.organization_id, display_name="Region",
                                           data_type="Dropdown", options=REGIONS, required=False, description=None)
        field_ids = {"Department": _field_id(department), "Region": _field_id(region)}
        start = utcnow() - timedelta(seconds=count)
        oid = org.organization_id
        for first in range(0, count, BATCH):
            order_rows, reward_rows, value_rows = [], [], []
            for i in range(first, min(first + BATCH, count)):
                created = start + timedelta(seconds=i)
                cents = rng.randint(5, 500) * 100
                order_id, reward_id = new_id(), new_id()
                order_rows.append({
                    "id": order_id, "organization_id": oid, "external_id": None, "request_hash": None,
                    "campaign_id": None, "status": "EXECUTED", "channel": "API",
                    "funding_source_id": org.funding_source_id, "currency_code": "USD", "subtotal_cents": cents,
                    "fees_cents": 0, "discount_cents": 0, "total_cents": cents, "refund_cents": 0,
                    "created_at": created,
                })
                reward_rows.append({
                    "id": reward_id, "organization_id": oid, "order_id": order_id, "campaign_id": None,
                    "products": [common.PRODUCT], "denomination_cents": cents, "fee_cents": 0, "currency_code": "USD",
                    "recipient_name": f"Recipient {i}", "recipient_email": org.member_email, "recipient_phone": None,
                    "delivery_method": "EMAIL", "delivery_status": "SUCCEEDED", "delivery_meta": None,
                    "delivered_at": created, "deliver_at": None, "language": None, "status": "ACTIVE",
                    "expires_at": None, "created_at": created,
                })
                for label, value in (("Department", rng.choice(DEPARTMENTS)), ("Region", rng.choice(REGIONS))):
                    value_rows.append({
                        "reward_id": reward_id, "field_id": field_ids[label], "organization_id": oid, "label": label,
                        "value": value, "reward_created_at": created,
                    })
            with db.write(engine) as conn:
                conn.execute(orders.insert(), order_rows)
                conn.execute(rewards.insert(), reward_rows)
                conn.execute(reward_field_values.insert(), value_rows)
    finally:
        engine.dispose()
    return time.monotonic() - started


def analyze(url: str) -> None:
    """What autovacuum / a periodic ANALYZE would have done by now on a live database."""
    from sqlalchemy import text

    from largesse import db

    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.commit()
    finally:
        engine.dispose()


def cold_wall_ms(server: common.Server, api_key: str, path: str, n: int = 7) -> float:
    """Median wall time of n sequential requests (one connection at a time), in ms."""
    import statistics
    import urllib.error
    import urllib.request

    times = []
    for _ in range(n):
        request = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {api_key}"})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as exc:  # e.g. a 503 after the statement timeout: report, go on
            common.log(f"  search: {path} answered {exc.code} right after the load")
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def _field_id(created) -> str:
    if isinstance(created, str):
        return created
    if isinstance(created, dict):
        return created["id"]
    return created.id


def explain(url: str, org: common.BenchOrg) -> list[str]:
    """The query plans of the statements that GET /rewards?Department=Sales sends."""
    from sqlalchemy import event

    from largesse import db
    from largesse.orders import repository

    engine = db.make_engine(url)
    captured: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "reward_field_values" in statement and not statement.lstrip().upper().startswith("EXPLAIN"):
            captured.append((statement, parameters))

    lines = []
    try:
        with db.read(engine) as conn:
            event.listen(engine, "before_cursor_execute", capture)
            repository.search_rewards(conn, org.organization_id, filters=[("Department", "Sales")], offset=0,
                                      limit=100)  # sets db.index_walks for the EXPLAINs below too
            event.remove(engine, "before_cursor_execute", capture)
            sqlite = db.is_sqlite(engine)
            for statement, params in captured:
                what = "page" if "join" in statement.lower() else "count"
                prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
                rows = conn.exec_driver_sql(prefix + statement, params).all()
                plan = [f"{'  ' * 0}{r[-1]}" for r in rows]
                lines.append(f"{what}: " + " | ".join(p.strip() for p in plan))
    finally:
        engine.dispose()
    return lines


def bench_backend(kind: str, sizes: list[int], *, duration: float, warmup: float, reps: int, connections: int,
                  work) -> dict:
    import contextlib

    out: dict = {"db": kind, "sizes": {}, "explain": []}
    with contextlib.ExitStack() as stack:
        urls, orgs, servers = {}, {}, {}
        rng = random.Random(20240101)
        for size in sizes:
            url = stack.enter_context(common.database(kind, work, f"search-{size}"))
            common.prepare_database(url)
            org = common.create_funded_org(url)
            seconds = seed(url, org, size, rng=rng)
            common.log(f"  search {kind:<10} seeded {size:,} rewards in {seconds:.1f} s")
            urls[size], orgs[size] = url, org
            out["sizes"][size] = {"seed_s": round(seconds, 1)}
        biggest = max(sizes)
        out["explain"] = explain(urls[biggest], orgs[biggest])
        try:
            for size in sizes:
                servers[size] = common.largesse_server(urls[size], 1, work).start()
                stack.callback(servers[size].stop)
            series = {(size, q): common.Series() for size in sizes for q in QUERIES}

            def measure(size: int, query: str, seconds: float, server=None):
                return common.run_wrk(servers[size].url + QUERIES[query], duration=seconds, mode="get",
                                      api_key=orgs[size].api_key, connections=connections, server=server)

            # Right after the bulk load, before any ANALYZE: plans must not depend on statistics.
            for size in sizes:
                out["sizes"][size]["cold_wall_ms"] = {q: cold_wall_ms(servers[size], orgs[size].api_key, path)
                                                      for q, path in QUERIES.items()}
                common.log(f"  search {kind:<10} {size:>7,} right after the load: {out['sizes'][size]['cold_wall_ms']}")
                analyze(urls[size])
            for size in sizes:
                for query in QUERIES:
                    measure(size, query, warmup)
            for rep in range(reps):
                order = sizes if rep % 2 == 0 else list(reversed(sizes))
                for query in QUERIES:
                    for size in order:
                        result = measure(size, query, duration, servers[size])
                        series[(size, query)].add(result)
                        common.log(f"  search {kind:<10} {size:>7,} {query:<10} rep {rep + 1}: {result.ok_rps:7.1f}/s "
                                   f"p50 {result.p50_ms:6.1f} ms p99 {result.p99_ms:7.1f} ms  "
                                   f"cpu {result.cpu_ms or 0:.2f} ms/req  statuses {result.statuses}")
            for size in sizes:
                out["sizes"][size]["queries"] = {q: series[(size, q)].summary() for q in QUERIES}
        finally:
            for server in servers.values():
                server.stop()
    return out


def main(args: list[str] | None = None) -> dict:
    opts = parse_args(args)
    duration = opts.duration or (2 if opts.quick else 4)
    warmup = 1
    reps = opts.reps or (2 if opts.quick else 3)
    sizes = [int(s) for s in opts.sizes.split(",") if s.strip()]
    kinds = ["sqlite", "postgresql"] if opts.db == "all" else [opts.db]
    if "postgresql" in kinds and not common.pg_available():
        common.log(f"search: PostgreSQL not reachable at {common.PG_ADMIN_URL}; skipping it")
        kinds.remove("postgresql")
    results: dict = {"connections": opts.connections, "duration_s": duration, "reps": reps, "queries": QUERIES,
                     "backends": []}
    with common.workdir() as work:
        for kind in kinds:
            results["backends"].append(bench_backend(kind, sizes, duration=duration, warmup=warmup, reps=reps,
                                                     connections=opts.connections, work=work))
    print_table(results)
    return results


def print_table(results: dict) -> None:
    print(f"\nGET /rewards (page of 100 + total_count), 1 worker, {results['connections']} connections, "
          f"medians of {results['reps']} x {results['duration_s']:g} s (alternating sizes)")
    header = (f"{'db':<11}{'query':<11}{'rewards':>9}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}{'cpu ms/req':>11}"
              f"{'non-200':>8}{'cold wall ms':>13}")
    print(header)
    print("-" * len(header))
    for backend in results["backends"]:
        for query in results["queries"]:
            for size, data in backend["sizes"].items():
                s = data["queries"][query]
                cpu = f"{s['cpu_ms_per_req']:.2f}" if s.get("cpu_ms_per_req") is not None else "-"
                print(f"{backend['db']:<11}{query:<11}{int(size):>9,}{s['rps']:>9.1f}{s['p50_ms']:>8.1f}"
                      f"{s['p99_ms']:>8.1f}{cpu:>11}{s['non_200'] + s['socket_errors']:>8}"
                      f"{data.get('cold_wall_ms', {}).get(query, 0):>13.1f}")
    for backend in results["backends"]:
        print(f"\nquery plan of GET /rewards?Department=Sales on {backend['db']}:")
        for line in backend["explain"]:
            print(f"  {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
