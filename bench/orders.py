"""POST /orders throughput and latency: Largesse against the bare baseline, alternating.

Orders are sent the way integrations send them: every order carries a unique `external_id`,
goes to one of several organizations (`--orgs`, default 8) whose balances already have
thousands of earlier orders (`--history` per organization), and, as the worst case, all to one
organization. Largesse runs with `make run`'s defaults, delivery included (its supervised
delivery process writes the emails to a mail directory); one configuration per database runs
with LARGESSE_RUN_WORKER=0 to show what delivery costs the API.

For each configuration both servers run side by side on their own fresh database (same
history), are warmed up, then measured in turn (Largesse, baseline, baseline, Largesse, ...)
`reps` times per load; we report medians and the ratio of the medians.

Orders/s by API process count (1, 2, 4 on PostgreSQL) are measured with every server running
at once, in turn, round after round (bench_processes).

Run alone: python -m bench.orders [--quick] [--db sqlite|postgresql] [--workers 1,2,4]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass

from bench import common


@dataclass(frozen=True)
class Load:
    orgs: str  # "many" (every bench organization, at random) or "one"
    connections: int

    @property
    def label(self) -> str:
        return f"{self.orgs} org{'s' if self.orgs == 'many' else ''}, c{self.connections}"


@dataclass(frozen=True)
class Config:
    db: str
    workers: int
    delivery: bool
    loads: tuple[Load, ...]


MANY16, MANY64, ONE16 = Load("many", 16), Load("many", 64), Load("one", 16)
CONFIGS = (
    Config("sqlite", 1, True, (MANY16, MANY64, ONE16)),
    Config("sqlite", 1, False, (MANY16,)),
    Config("postgresql", 2, True, (MANY16, MANY64, ONE16)),
    Config("postgresql", 2, False, (MANY16,)),
)
# Orders/s by API process count (PostgreSQL, many organizations, c16, delivery on): measured
# side by side, see bench_processes.
PROCESSES = (1, 2, 4)


def parse_args(args: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m bench.orders", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "all"), default="all")
    parser.add_argument("--workers", help="only configurations with these API process counts, e.g. 2")
    parser.add_argument("--duration", type=float, help="seconds per measurement (default 4, quick 3)")
    parser.add_argument("--reps", type=int, help="measurements per server and load (default 3, quick 2)")
    parser.add_argument("--orgs", type=int, default=8, help="organizations of the many-organization loads")
    parser.add_argument("--history", type=int, help="earlier orders per organization (default 2000, quick 500)")
    parser.add_argument("--no-delivery", action="store_true", help="skip the configurations with delivery on")
    return parser.parse_args(args)


def count_orders(url: str) -> int:
    from sqlalchemy import func, select

    from largesse import db
    from largesse.orders.models import orders

    engine = db.make_engine(url)
    try:
        with db.read(engine) as conn:
            return conn.execute(select(func.count()).select_from(orders)
                                .where(orders.c.external_id.like("bench-%"))).scalar_one()
    finally:
        engine.dispose()


def wait_for_delivery(url: str, timeout: float = 120.0) -> float:
    """Seconds until no delivery job is queued or running (at most timeout)."""
    import time

    from sqlalchemy import func, select

    from largesse import db
    from largesse.delivery.models import jobs

    engine = db.make_engine(url)
    started = time.monotonic()
    try:
        while time.monotonic() - started < timeout:
            with db.read(engine) as conn:
                left = conn.execute(select(func.count()).select_from(jobs).where(
                    jobs.c.status.in_(("queued", "running")), jobs.c.kind == "deliver_reward")).scalar_one()
            if not left:
                break
            time.sleep(0.25)
    finally:
        engine.dispose()
    return time.monotonic() - started


def seed(url: str, n_orgs: int, history: int) -> list[common.BenchOrg]:
    """A migrated database with n_orgs funded organizations of `history` earlier orders each."""
    common.prepare_database(url)
    orgs = [common.create_funded_org(url, f"Bench Corp {i}") for i in range(n_orgs)]
    common.seed_history(url, orgs, history)
    return orgs


def bench_config(config: Config, *, duration: float, warmup: float, reps: int, n_orgs: int, history: int,
                 work) -> dict:
    kind, workers = config.db, config.workers
    tag = f"w{workers}{'-d' if config.delivery else ''}"
    with common.database(kind, work, f"orders-largesse-{tag}") as l_url, \
            common.database(kind, work, f"orders-baseline-{tag}") as b_url:
        orgs = {name: seed(url, n_orgs, history) for name, url in (("largesse", l_url), ("baseline", b_url))}
        servers = {"largesse": common.largesse_server(l_url, workers, work, delivery=config.delivery),
                   "baseline": common.baseline_server(b_url, workers, work)}
        series = {(name, load): common.Series() for name in servers for load in config.loads}
        ok_total = dict.fromkeys(servers, 0)
        try:
            for server in servers.values():
                server.start()

            def measure(name: str, load: Load, seconds: float, server=None):
                targets = orgs[name] if load.orgs == "many" else orgs[name][:1]
                result = common.run_wrk(f"{servers[name].url}/api/v2/orders", duration=seconds, mode="order",
                                        orgs=targets, external_id=True, connections=load.connections,
                                        server=server)
                ok_total[name] += result.statuses.get("200", 0)
                return result

            def quiet_delivery() -> None:
                # Largesse's delivery process drains the emails of its last run while the
                # baseline is measured: wait for it, or it would take CPU from the baseline.
                if config.delivery:
                    waited = wait_for_delivery(l_url)
                    if waited > 0.5:
                        common.log(f"  (waited {waited:.1f} s for Largesse's delivery to catch up)")

            for name in servers:
                measure(name, config.loads[0], warmup)
            for load in config.loads:
                for rep in range(reps):
                    order = ("largesse", "baseline") if rep % 2 == 0 else ("baseline", "largesse")
                    for name in order:
                        if name == "baseline":
                            quiet_delivery()
                        result = measure(name, load, duration, servers[name])
                        series[(name, load)].add(result)
                        common.log(f"  orders {kind:<10} w{workers} {'delivery' if config.delivery else 'no-deliv'} "
                                   f"{load.label:<14} {name:<8} rep {rep + 1}: {result.ok_rps:7.1f}/s "
                                   f"p50 {result.p50_ms:6.1f} ms p99 {result.p99_ms:7.1f} ms  "
                                   f"cpu {result.cpu_ms or 0:.2f} ms/req  statuses {result.statuses}")
        finally:
            for server in servers.values():
                server.stop()
        in_db = {"largesse": count_orders(l_url), "baseline": count_orders(b_url)}
    loads = []
    for load in config.loads:
        out = {name: series[(name, load)].summary() for name in servers}
        base = out["baseline"]["rps"]
        loads.append({"orgs": load.orgs, "connections": load.connections, **out,
                      "ratio": round(out["largesse"]["rps"] / base, 3) if base else None})
    return {"db": kind, "workers": workers, "delivery": config.delivery, "orgs": n_orgs,
            "history_per_org": history, "loads": loads, "orders_200": ok_total, "orders_in_db": in_db}


def connections_per_process(server: common.Server) -> list[int]:
    """How the server's established client connections are spread over its processes, most first
    (`ss`); empty when ss is not there."""
    try:
        out = subprocess.run(["ss", "-tnpH", "state", "established", f"( sport = :{server.port} )"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    pids = collections.Counter(line.split("pid=", 1)[1].split(",", 1)[0] for line in out.splitlines()
                               if "pid=" in line)
    return sorted(pids.values(), reverse=True)


def bench_processes(processes: tuple[int, ...], *, duration: float, warmup: float, rounds: int, n_orgs: int,
                    history: int, work) -> dict:
    """PostgreSQL, many organizations, c16, delivery on: Largesse and the bare app with each of
    PROCESSES API processes, all running at once on their own databases and measured in turn,
    round after round (the order rotating each round). Measured one configuration after the
    other, the figures of one process count fell on another moment of the machine; and each wrk
    run opens new connections, which the processes sharing the socket take unevenly (all 16 in
    one process of two in some runs): the table shows that spread, and the per-round ratios of 4
    processes to 2 show what of the difference is the process count."""
    names = [(name, w) for w in processes for name in ("largesse", "baseline")]
    series = {key: common.Series() for key in names}
    spreads: dict = {key: [] for key in names}
    with contextlib.ExitStack() as stack:
        urls, orgs, servers = {}, {}, {}
        for name, w in names:
            url = urls[(name, w)] = stack.enter_context(common.database("postgresql", work, f"procs-{name}-{w}"))
            orgs[(name, w)] = seed(url, n_orgs, history)
            servers[(name, w)] = (common.largesse_server(url, w, work, delivery=True) if name == "largesse"
                                  else common.baseline_server(url, w, work))
        try:
            for server in servers.values():
                server.start()

            def measure(key, seconds: float, record: bool):
                server = servers[key]
                spread: list[int] = []
                peek = threading.Timer(seconds / 2, lambda: spread.extend(connections_per_process(server)))
                peek.start()
                try:
                    result = common.run_wrk(f"{server.url}/api/v2/orders", duration=seconds, mode="order",
                                            orgs=orgs[key], external_id=True, connections=16, server=server)
                finally:
                    peek.cancel()
                    peek.join()
                if key[0] == "largesse":  # its delivery drains the emails of this run before the next one
                    wait_for_delivery(urls[key])
                if record:
                    series[key].add(result)
                    spreads[key].append(spread)
                    common.log(f"  processes {key[0]:<8} w{key[1]}: {result.ok_rps:7.1f}/s p99 {result.p99_ms:6.1f} ms "
                               f"cpu {result.cpu_ms or 0:.2f} ms/req  connections per process {spread}")
                return result

            for key in names:
                measure(key, warmup, record=False)
            for rnd in range(rounds):
                shift = rnd % len(names)
                for key in names[shift:] + names[:shift]:
                    measure(key, duration, record=True)
        finally:
            for server in servers.values():
                server.stop()
    rows = []
    for w in processes:
        mine, bare = series[("largesse", w)].summary(), series[("baseline", w)].summary()
        rows.append({"workers": w, "largesse": mine, "baseline": bare,
                     "ratio": round(mine["rps"] / bare["rps"], 3) if bare["rps"] else None,
                     "connections_per_process": spreads[("largesse", w)]})
    four, two = (series[("largesse", w)].runs if ("largesse", w) in series else [] for w in (4, 2))
    paired = [a.ok_rps / b.ok_rps for a, b in zip(four, two, strict=False) if b.ok_rps]
    return {"rounds": rounds, "duration_s": duration, "rows": rows,
            "four_to_two": {"median": round(statistics.median(paired), 3) if paired else None,
                            "rounds_not_slower": sum(r >= 1 for r in paired), "rounds": len(paired),
                            "each": [round(r, 3) for r in paired]}}


def print_processes(result: dict) -> None:
    print(f"\nPostgreSQL, many organizations, c16, delivery on, by API process count: every server running, "
          f"measured in turn, medians of {result['rounds']} rounds x {result['duration_s']:g} s")
    header = (f"{'procs':>5}{'orders/s':>10}{'p99 ms':>8}{'cpu ms':>8}{'bare/s':>9}{'ratio':>7}"
              "  Largesse's connections per process, each round")
    print(header)
    print("-" * len(header))
    for row in result["rows"]:
        s, b = row["largesse"], row["baseline"]
        cpu = f"{s['cpu_ms_per_req']:.2f}" if s.get("cpu_ms_per_req") is not None else "-"
        ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
        spread = " ".join("/".join(map(str, c)) or "?" for c in row["connections_per_process"])
        print(f"{row['workers']:>5}{s['rps']:>10.1f}{s['p99_ms']:>8.1f}{cpu:>8}{b['rps']:>9.1f}{ratio:>7}  {spread}")
    ft = result["four_to_two"]
    if ft["median"] is not None:
        print(f"4 processes against 2, round by round: median {ft['median']:.2f}, not slower in "
              f"{ft['rounds_not_slower']} of {ft['rounds']} ({', '.join(f'{r:.2f}' for r in ft['each'])})")


def main(args: list[str] | None = None) -> dict:
    opts = parse_args(args)
    if not common.ensure_wrk():  # run on its own, not through bench.run, which checks it first
        sys.exit("wrk is required (Debian's package wrk)")
    duration = opts.duration or (3 if opts.quick else 4)
    warmup = 1 if opts.quick else 2
    reps = opts.reps or (2 if opts.quick else 3)
    history = opts.history if opts.history is not None else (500 if opts.quick else 2000)
    kinds = ["sqlite", "postgresql"] if opts.db == "all" else [opts.db]
    if "postgresql" in kinds and not common.pg_available():
        common.log(f"orders: PostgreSQL not reachable at {common.PG_ADMIN_URL}; skipping it")
        kinds.remove("postgresql")
    wanted = {int(w) for w in opts.workers.split(",")} if opts.workers else None
    configs = [c for c in CONFIGS if c.db in kinds and (wanted is None or c.workers in wanted)
               and not (opts.no_delivery and c.delivery)]
    processes = tuple(w for w in PROCESSES if wanted is None or w in wanted)
    by_processes = "postgresql" in kinds and not opts.no_delivery and len(processes) > 1
    results: dict = {"duration_s": duration, "reps": reps, "configs": []}
    with common.workdir() as work:
        for config in configs:
            results["configs"].append(bench_config(config, duration=duration, warmup=warmup, reps=reps,
                                                   n_orgs=opts.orgs, history=history, work=work))
        if by_processes:
            results["processes"] = bench_processes(processes, duration=duration, warmup=warmup,
                                                   rounds=3 if opts.quick else 5, n_orgs=opts.orgs,
                                                   history=history, work=work)
    print_table(results)
    if by_processes:
        print_processes(results["processes"])
    return results


def print_table(results: dict) -> None:
    print(f"\nPOST /orders with external_id, medians of {results['reps']} x {results['duration_s']:g} s "
          "(alternating Largesse / bare baseline); Largesse with `make run` defaults unless 'no delivery'")
    header = (f"{'db':<11}{'procs':>5}  {'delivery':<9}{'load':<15}{'orders/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
              f"{'cpu ms':>8}{'bare/s':>9}{'bare p99':>9}{'non-200':>8}  {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for c in results["configs"]:
        for load in c["loads"]:
            s, b = load["largesse"], load["baseline"]
            cpu = f"{s['cpu_ms_per_req']:.2f}" if s.get("cpu_ms_per_req") is not None else "-"
            label = f"{'many' if load['orgs'] == 'many' else 'one'} org{'s' if load['orgs'] == 'many' else ''}, " \
                    f"c{load['connections']}"
            ratio = f"{load['ratio']:.2f}" if load["ratio"] is not None else "-"
            bad = s["non_200"] + s["socket_errors"] + b["non_200"] + b["socket_errors"]
            print(f"{c['db']:<11}{c['workers']:>5}  {'on' if c['delivery'] else 'off':<9}{label:<15}{s['rps']:>9.1f}"
                  f"{s['p50_ms']:>8.1f}{s['p99_ms']:>8.1f}{cpu:>8}{b['rps']:>9.1f}{b['p99_ms']:>9.1f}{bad:>8}  "
                  f"{ratio:>6}")
    _print_derived(results)
    for c in results["configs"]:
        for name in ("largesse", "baseline"):
            # wrk stops with requests in flight: those orders are written but not counted as 200s.
            slack = 64 * (len(c["loads"]) * results["reps"] + 1)
            gap = c["orders_in_db"][name] - c["orders_200"][name]
            if not 0 <= gap <= slack:
                print(f"  note: {name} {c['db']} w{c['workers']}: {c['orders_in_db'][name]} orders in the database "
                      f"for {c['orders_200'][name]} answers 200")


def _print_derived(results: dict) -> None:
    def find(db: str, workers: int, delivery: bool, orgs: str = "many", connections: int = 16):
        for c in results["configs"]:
            if (c["db"], c["workers"], c["delivery"]) == (db, workers, delivery):
                for load in c["loads"]:
                    if (load["orgs"], load["connections"]) == (orgs, connections):
                        return load
        return None

    for db, workers in (("sqlite", 1), ("postgresql", 2)):
        on, off = find(db, workers, True), find(db, workers, False)
        if on and off and off["largesse"]["p99_ms"]:
            print(f"{db} {workers} proc: API p99 with delivery running / without: "
                  f"{on['largesse']['p99_ms']:.1f} / {off['largesse']['p99_ms']:.1f} ms = "
                  f"{on['largesse']['p99_ms'] / off['largesse']['p99_ms']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
