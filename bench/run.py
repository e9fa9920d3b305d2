"""`make bench`: every benchmark, one table each, results in bench/results/latest.json.

    python -m bench.run [--quick] [--only orders|search|delivery] [--db sqlite|postgresql]

Installs Debian's wrk when it is missing and we may (root, apt-get). PostgreSQL benchmarks
run when 127.0.0.1:5432 answers (user postgres; LARGESSE_BENCH_PG_ADMIN to change), each on
a fresh database that is dropped afterwards. See docs/benchmarks.md for figures and notes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime

from bench import common

PARTS = ("orders", "search", "delivery")


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    wrk_version = None
    if common.ensure_wrk():
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
        wrk_version = (out.stdout or out.stderr).splitlines()[0].strip() if (out.stdout or out.stderr) else None
    git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=common.ROOT, capture_output=True,
                         text=True).stdout.strip()
    return {
        "nproc": os.cpu_count(), "memory_gb": mem_gb, "cpu": cpu, "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "postgresql": common.pg_version(),
        "pg_synchronous_commit": common.pg_setting("synchronous_commit"), "wrk": wrk_version,
        "git": git, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average_at_start": os.getloadavg(),
    }


def run_delivery(args: list[str]) -> dict | None:
    """bench/delivery.py (owned by the delivery engineers) when it exists."""
    try:
        module = importlib.import_module("bench.delivery")
    except ModuleNotFoundError as exc:
        if exc.name != "bench.delivery":
            raise
        print("\ndelivery: bench/delivery.py is not there yet; skipped")
        return None
    try:
        return module.main(args)
    except SystemExit as exc:  # its parser may not take our flags: run it with its defaults
        if exc.code in (0, None):
            return None
        common.log(f"delivery: main({args}) refused the flags; running it with its defaults")
        return module.main(None)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (a couple of minutes in all)")
    parser.add_argument("--only", choices=PARTS, help="run one benchmark")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), help="one database backend")
    opts = parser.parse_args(argv)

    if not common.ensure_wrk():
        sys.exit("bench: wrk is required (Debian: apt-get install wrk); run as root to have it installed")
    started = time.monotonic()
    shared = (["--quick"] if opts.quick else []) + (["--db", opts.db] if opts.db else [])
    results: dict = {"machine": machine_info(), "quick": opts.quick, "db": opts.db or "all"}
    m = results["machine"]
    print(f"machine: {m['nproc']} CPU ({m['cpu']}), {m['memory_gb']} GB; Python {m['python']}, SQLite {m['sqlite']}, "
          f"PostgreSQL {m['postgresql'] or 'not reachable'}; {m['wrk']}; git {m['git']}", flush=True)

    parts = [opts.only] if opts.only else list(PARTS)
    if "orders" in parts:
        from bench import orders

        results["orders"] = orders.main(shared)
    if "search" in parts:
        from bench import search

        results["search"] = search.main(shared)
    if "delivery" in parts:
        results["delivery"] = run_delivery(shared)

    results["elapsed_s"] = round(time.monotonic() - started, 1)
    out_dir = common.BENCH_DIR / "results"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / "latest.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nbench: done in {results['elapsed_s'] / 60:.1f} min; results in {path.relative_to(common.ROOT)}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
