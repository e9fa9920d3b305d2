"""POST /orders throughput and latency: Largesse against the bare baseline, alternating.

For each database (a fresh SQLite file; a fresh PostgreSQL database) and each worker count,
both servers run side by side on their own fresh database, are warmed up, then measured
in turn (Largesse, baseline, baseline, Largesse, ...) `reps` times with wrk at 16
connections; we report medians, and the ratio of the medians. Every request is a valid
single-reward order (bench/wrk.lua); the balance is funded so that none is refused, and any
non-200 answer is counted and reported.

Run alone: python -m bench.orders [--quick] [--db sqlite|postgresql] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import sys

from bench import common

CONNECTIONS = 16


def parse_args(args: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m bench.orders", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (about a third of the time)")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "all"), default="all")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    parser.add_argument("--duration", type=float, help="seconds per measurement (default 8, quick 3)")
    parser.add_argument("--reps", type=int, help="measurements per server (default 3)")
    parser.add_argument("--connections", type=int, default=CONNECTIONS)
    return parser.parse_args(args)


def count_orders(url: str, organization_id: str) -> int:
    from sqlalchemy import func, select

    from largesse import db
    from largesse.orders.models import orders

    engine = db.make_engine(url)
    try:
        with db.read(engine) as conn:
            return conn.execute(select(func.count()).select_from(orders)
                                .where(orders.c.organization_id == organization_id)).scalar_one()
    finally:
        engine.dispose()


def bench_config(kind: str, workers: int, *, duration: float, warmup: float, reps: int, connections: int,
                 work) -> dict:
    with common.database(kind, work, f"orders-largesse-w{workers}") as l_url, \
            common.database(kind, work, f"orders-baseline-w{workers}") as b_url:
        for url in (l_url, b_url):
            common.prepare_database(url)
        orgs = {"largesse": common.create_funded_org(l_url), "baseline": common.create_funded_org(b_url)}
        servers = {"largesse": common.largesse_server(l_url, workers, work),
                   "baseline": common.baseline_server(b_url, workers, work)}
        series = {name: common.Series() for name in servers}
        try:
            for server in servers.values():
                server.start()

            def measure(name: str, seconds: float, server=None):
                org = orgs[name]
                return common.run_wrk(f"{servers[name].url}/api/v2/orders", duration=seconds, mode="order",
                                      api_key=org.api_key, email=org.member_email, connections=connections,
                                      server=server)

            warm = {name: measure(name, warmup) for name in servers}
            for rep in range(reps):
                order = ("largesse", "baseline") if rep % 2 == 0 else ("baseline", "largesse")
                for name in order:
                    result = measure(name, duration, servers[name])
                    series[name].add(result)
                    common.log(f"  orders {kind:<10} w{workers} {name:<8} rep {rep + 1}: {result.ok_rps:7.1f}/s "
                               f"p50 {result.p50_ms:6.1f} ms p99 {result.p99_ms:7.1f} ms  "
                               f"cpu {result.cpu_ms or 0:.2f} ms/req  statuses {result.statuses}")
        finally:
            for server in servers.values():
                server.stop()
        out = {name: s.summary() for name, s in series.items()}
        for name in out:
            # Every 200 is an order in the database (warm-up included): nothing lost or doubled.
            ok = out[name]["statuses"].get("200", 0) + warm[name].statuses.get("200", 0)
            out[name]["orders_in_db"] = count_orders(l_url if name == "largesse" else b_url,
                                                     orgs[name].organization_id)
            out[name]["orders_200"] = ok
    base = out["baseline"]["rps"]
    out["ratio"] = round(out["largesse"]["rps"] / base, 3) if base else None
    return out


def main(args: list[str] | None = None) -> dict:
    opts = parse_args(args)
    duration = opts.duration or (3 if opts.quick else 8)
    warmup = 1 if opts.quick else 3
    reps = opts.reps or 3
    kinds = ["sqlite", "postgresql"] if opts.db == "all" else [opts.db]
    workers_list = [int(w) for w in opts.workers.split(",") if w.strip()]
    if "postgresql" in kinds and not common.pg_available():
        common.log(f"orders: PostgreSQL not reachable at {common.PG_ADMIN_URL}; skipping it")
        kinds.remove("postgresql")
    results: dict = {"connections": opts.connections, "duration_s": duration, "reps": reps, "configs": []}
    with common.workdir() as work:
        for kind in kinds:
            for workers in workers_list:
                res = bench_config(kind, workers, duration=duration, warmup=warmup, reps=reps,
                                   connections=opts.connections, work=work)
                results["configs"].append({"db": kind, "workers": workers, **res})
    print_table(results)
    return results


def print_table(results: dict) -> None:
    conns = results["connections"]
    print(f"\nPOST /orders, {conns} connections, medians of {results['reps']} x {results['duration_s']:g} s "
          "(alternating Largesse / baseline)")
    header = (f"{'db':<11}{'workers':>7}  {'server':<9}{'orders/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
              f"{'cpu ms/req':>11}{'non-200':>8}  {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for c in results["configs"]:
        for name in ("largesse", "baseline"):
            s = c[name]
            ratio = f"{c['ratio']:.2f}" if name == "largesse" and c["ratio"] is not None else ""
            cpu = f"{s['cpu_ms_per_req']:.2f}" if s.get("cpu_ms_per_req") is not None else "-"
            print(f"{c['db']:<11}{c['workers']:>7}  {name:<9}{s['rps']:>9.1f}{s['p50_ms']:>8.1f}{s['p99_ms']:>8.1f}"
                  f"{cpu:>11}{s['non_200'] + s['socket_errors']:>8}  {ratio:>6}")
    # wrk stops with up to `connections` requests in flight per run: those orders are written but not counted.
    slack = conns * (results["reps"] + 1)
    problems = [(c["db"], c["workers"], name, c[name]) for c in results["configs"] for name in ("largesse", "baseline")
                if c[name]["non_200"] or c[name]["socket_errors"]
                or not 0 <= c[name]["orders_in_db"] - c[name]["orders_200"] <= slack]
    for db_kind, workers, name, s in problems:
        print(f"  note: {name} {db_kind} w{workers}: statuses {s['statuses']}, socket errors {s['socket_errors']}, "
              f"{s['orders_in_db']} orders in the database for {s['orders_200']} answers 200")


if __name__ == "__main__":
    main(sys.argv[1:])
