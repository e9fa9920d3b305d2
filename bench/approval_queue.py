"""The approvals queue and the overview's count with 100,000 orders in one organization (100
waiting): `waiting_count` and `list_pending(limit=100)`, median and slowest of 10 runs.

    python -m bench.approval_queue [DATABASE_URL]   (default: a new SQLite file)

docs/dashboard.md records the figures (with and without ix_orders_org_status_created).
The orders are inserted directly (no rewards, no ledger): only the queries are measured.
"""

from __future__ import annotations

import secrets
import statistics
import sys
import tempfile
import time
from datetime import timedelta

from largesse import db
from largesse.bootstrap import prepare
from largesse.dashboard.pages.approvals import waiting_count
from largesse.funding import service as funding
from largesse.orders import approvals
from largesse.orders.models import orders
from largesse.orgs import service as orgs
from largesse.timeutil import utcnow

ORDERS, WAITING_EVERY = 100_000, 1000


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/queue.sqlite3"
    engine = db.make_engine(url)
    prepare(engine)
    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Queue", member_email=f"o-{secrets.token_hex(3)}@example.com",
                                  member_name="Owner", sandbox=False)
        org = created.organization_id
        source = funding.list_for(conn, org)[0].id
    now = utcnow()
    rows = [{"id": f"Q{i:09d}{secrets.token_hex(3).upper()}", "organization_id": org, "channel": "API",
             "status": approvals.PENDING if i % WAITING_EVERY == 0 else "EXECUTED", "funding_source_id": source,
             "currency_code": "USD", "subtotal_cents": 500, "fees_cents": 0, "discount_cents": 0, "total_cents": 500,
             "refund_cents": 0, "created_at": now - timedelta(seconds=i)} for i in range(ORDERS)]
    with db.write(engine) as conn:
        for start in range(0, ORDERS, 5000):
            conn.execute(orders.insert(), rows[start:start + 5000])
    for name, query in (("waiting_count", lambda conn: waiting_count(conn, org)),
                        ("list_pending", lambda conn: len(approvals.list_pending(conn, org, limit=100)))):
        times = []
        for _ in range(10):
            began = time.perf_counter()
            with db.read(engine) as conn:
                result = query(conn)
            times.append((time.perf_counter() - began) * 1000)
        print(f"{engine.dialect.name} {name} -> {result}: median {statistics.median(times):.1f} ms, "
              f"max {max(times):.1f} ms")
    engine.dispose()


if __name__ == "__main__":
    main()
