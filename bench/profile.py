"""Where a Largesse worker spends its CPU on POST /orders (an investigation tool, not in `make bench`).

Starts `largesse serve --workers 1` on a fresh database, loads it with wrk, and samples the
worker with py-spy (`--gil`: only the thread holding the GIL, i.e. Python CPU) while
measuring the server's CPU time per request. Prints the top functions by inclusive and self
samples, converted to milliseconds of CPU per request.

py-spy is not a project dependency: `.venv/bin/pip install py-spy` for this investigation.

    python -m bench.profile [--db sqlite|postgresql] [--seconds 15] [--connections 16] [--path /api/v2/orders]
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import common


def aggregate(raw: Path, top: int, cpu_ms: float) -> list[str]:
    inclusive: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    if not total:
        return ["no samples"]

    def fmt(counter):
        return [f"  {n / total * 100:5.1f}%  {n / total * cpu_ms:6.3f} ms  {frame}" for frame, n in
                counter.most_common(top)]

    return ([f"{total} samples; {cpu_ms:.2f} ms of server CPU per request", "inclusive (function and callees):"]
            + fmt(inclusive) + ["self:"] + fmt(own))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--top", type=int, default=60)
    parser.add_argument("--orgs", type=int, default=8, help="organizations the orders go to (at random)")
    parser.add_argument("--history", type=int, default=2000, help="earlier orders per organization")
    parser.add_argument("--delivery", action="store_true", help="delivery on, as `make run` (default: off)")
    parser.add_argument("--output", default=None, help="keep py-spy's raw (collapsed stacks) output here")
    opts = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(common.VENV_BIN / "py-spy")
    if not Path(py_spy).exists():
        sys.exit("py-spy is not installed: .venv/bin/pip install py-spy")
    if not common.ensure_wrk():
        sys.exit("wrk is required")
    with common.workdir() as work, common.database(opts.db, work, "profile") as url:
        common.prepare_database(url)
        orgs = [common.create_funded_org(url, f"Bench Corp {i}") for i in range(opts.orgs)]
        common.seed_history(url, orgs, opts.history)
        server = common.largesse_server(url, 1, work, delivery=opts.delivery).start()
        raw = Path(opts.output) if opts.output else work / "profile.txt"
        try:
            target = f"{server.url}/api/v2/orders"
            common.run_wrk(target, duration=3, mode="order", orgs=orgs, external_id=True,
                           connections=opts.connections)
            spy = subprocess.Popen([py_spy, "record", "--pid", str(server.proc.pid), "--duration",
                                    str(opts.seconds), "--rate", "250", "--gil", "--nonblocking", "--format", "raw",
                                    "--output", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            result = common.run_wrk(target, duration=opts.seconds - 1, mode="order", orgs=orgs, external_id=True,
                                    connections=opts.connections, server=server)
            spy.wait(timeout=opts.seconds + 30)
        finally:
            server.stop()
        print(f"{opts.db}: {result.ok_rps:.1f} orders/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
              f"statuses {result.statuses}")
        print("\n".join(aggregate(raw, opts.top, result.cpu_ms or 0.0)))


if __name__ == "__main__":
    main(sys.argv[1:])
