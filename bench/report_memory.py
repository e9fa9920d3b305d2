"""Report generation in bounded memory: peak Python memory while writing the CSV of N rewards.

A fresh SQLite database (or the PostgreSQL URL given) is seeded with N rewards of one
organization, each with two custom field values (bench.search.seed: bulk inserts, as
POST /orders writes them), and reports.generate.write_csv streams them into report_chunks
under tracemalloc. The peak is what the generator itself allocates (pages of PAGE rows,
one chunk of CSV text); the process's RSS growth is printed too.

Run: python -m bench.report_memory [--sizes 10000,100000] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import random
import resource
import secrets
import tempfile
import time
import tracemalloc
from pathlib import Path


def seeded_database(count: int, url: str | None = None):
    """(url, organization id) of a database holding `count` rewards of one organization."""
    from bench import common, search
    from largesse import db
    from largesse.bootstrap import prepare
    from largesse.orgs import service as orgs

    if url is None:
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='largesse-report-')) / 'bench.sqlite3'}"
    engine = db.make_engine(url)
    prepare(engine)
    email = f"owner-{secrets.token_hex(4)}@example.com"
    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Bench", member_email=email, member_name="Owner", sandbox=True)
    engine.dispose()
    org = common.BenchOrg(created.organization_id, created.api_key, created.funding_source_id, email)
    search.seed(url, org, count, rng=random.Random(7))
    return url, created.organization_id


def measure(url: str, organization_id: str) -> dict:
    """Generate the organization's report once; rows, bytes, seconds and peak memory."""
    from largesse import db
    from largesse.reports import generate

    engine = db.make_engine(url)
    report_id = _report_row(engine, organization_id)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.monotonic()
    try:
        rows, size = generate.write_csv(engine, report_id, organization_id, {}, "bench")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        engine.dispose()
    return {"rows": rows, "bytes": size, "seconds": time.monotonic() - started, "peak_bytes": peak,
            "rss_growth_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before}


def _report_row(engine, organization_id: str) -> str:
    from largesse import db
    from largesse.ids import new_id
    from largesse.reports.models import reports
    from largesse.timeutil import utcnow

    report_id = new_id()
    with db.write(engine) as conn:
        conn.execute(reports.insert().values(id=report_id, organization_id=organization_id, status="PROCESSING",
                                             report_type="digital_rewards", format="csv", filters={},
                                             created_at=utcnow(), generation="bench"))
    return report_id


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.report_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--url", help="an empty database to seed (default: a new SQLite file)")
    args = parser.parse_args(argv)
    for count in (int(s) for s in args.sizes.split(",")):
        url, org = seeded_database(count, args.url)
        result = measure(url, org)
        print(f"{result['rows']:>8} rewards  {result['bytes'] / 1e6:7.1f} MB CSV  {result['seconds']:6.1f} s  "
              f"peak traced {result['peak_bytes'] / 2**20:5.1f} MiB  "
              f"RSS growth {result['rss_growth_kib'] / 1024:5.1f} MiB")


if __name__ == "__main__":
    main()
