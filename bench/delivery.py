"""Delivery throughput: emails/s from `largesse worker` processes to a local SMTP sink.

    python -m bench.delivery [--count 5000] [--quick] [--db sqlite|postgresql] [--procs 1,2]

For each backend, a fresh database gets one funded organization and, per run, one order of
`--count` EMAIL rewards with their deliver_reward jobs (inserted in one transaction, as
POST /orders would, without the 500-rewards-per-order limit). Then 1, then 2 worker
processes (`largesse worker --concurrency 2`) drain the queue into an aiosmtpd sink in this
process; the rate is messages / (last accepted - first accepted), measured at the sink.
bench.run calls main(); it returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from bench import common

THREADS_PER_PROCESS = 2


class CountingHandler:
    """The cheapest possible SMTP sink: counts accepted messages and stamps the first/last."""

    def __init__(self):
        self.count = 0
        self.first = self.last = None
        self.stamps: list[float] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        now = time.monotonic()
        with self.lock:
            self.count += 1
            self.first = self.first or now
            self.last = now
            self.stamps.append(now)
        return "250 OK"

    def reset(self) -> None:
        with self.lock:
            self.count, self.first, self.last, self.stamps = 0, None, None, []

    def quarter_rates(self) -> list[float]:
        """emails/s in each quarter of the run: a queue that drains without slowing keeps them level."""
        stamps = self.stamps
        n = len(stamps) // 4
        if n < 2:
            return []
        return [round((n - 1) / max(stamps[(q + 1) * n - 1] - stamps[q * n], 1e-6), 1) for q in range(4)]


def seed(url: str, org: common.BenchOrg, count: int) -> None:
    from largesse import db
    from largesse.delivery.models import jobs
    from largesse.funding import service as funding
    from largesse.ids import new_id
    from largesse.orders.models import orders, rewards
    from largesse.timeutil import utcnow

    engine = db.make_engine(url)
    now = utcnow()
    order_id = new_id()
    local, _, domain = org.member_email.partition("@")
    reward_rows, job_rows = [], []
    for i in range(count):
        reward_id = new_id()
        reward_rows.append({
            "id": reward_id, "organization_id": org.organization_id, "order_id": order_id, "campaign_id": None,
            "products": [common.PRODUCT], "denomination_cents": 500, "fee_cents": 0, "currency_code": "USD",
            "recipient_name": f"Recipient {i}", "recipient_email": f"{local}+{i}@{domain}", "recipient_phone": None,
            "delivery_method": "EMAIL", "delivery_status": "PENDING", "delivery_meta": None, "delivered_at": None,
            "deliver_at": None, "language": "en", "status": "ACTIVE", "expires_at": None, "created_at": now,
        })
        job_rows.append({"kind": "deliver_reward", "organization_id": org.organization_id, "reward_id": reward_id,
                         "payload": None, "status": "queued", "attempts": 0, "max_attempts": 8, "run_after": now,
                         "created_at": now, "updated_at": now})
    try:
        with db.write(engine) as conn:
            conn.execute(orders.insert().values(
                id=order_id, organization_id=org.organization_id, external_id=None, request_hash=None,
                campaign_id=None, status="EXECUTED", channel="API", funding_source_id=org.funding_source_id,
                currency_code="USD", subtotal_cents=500 * count, fees_cents=0, discount_cents=0,
                total_cents=500 * count, refund_cents=0, created_at=now))
            for start in range(0, count, 1000):
                conn.execute(rewards.insert(), reward_rows[start:start + 1000])
                conn.execute(jobs.insert(), job_rows[start:start + 1000])
            funding.debit(conn, funding_source_id=org.funding_source_id, organization_id=org.organization_id,
                          amount_cents=500 * count, kind="order", order_id=order_id)
    finally:
        engine.dispose()


def run_once(url: str, org: common.BenchOrg, sink, handler: CountingHandler, procs: int, count: int,
             log_dir: Path) -> dict:
    seed(url, org, count)
    handler.reset()
    env = {**os.environ, "LARGESSE_DATABASE_URL": url, "LARGESSE_SMTP_URL": f"smtp://127.0.0.1:{sink.port}",
           "LARGESSE_WORKER_POLL_SECONDS": "0.05", "LARGESSE_ENVIRONMENT": "sandbox",
           "LARGESSE_PUBLIC_URL": "http://127.0.0.1:8000"}
    command = [str(common.VENV_BIN / "largesse"), "worker", "--concurrency", str(THREADS_PER_PROCESS)]
    started = time.monotonic()
    workers = [subprocess.Popen(command, env=env, stdout=(log_dir / f"worker-{procs}-{n}.log").open("w"),
                                stderr=subprocess.STDOUT) for n in range(procs)]
    try:
        deadline = started + max(120.0, count / 10)
        while handler.count < count:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"delivery bench: {handler.count}/{count} messages; see {log_dir}")
            time.sleep(0.05)
        wall = time.monotonic() - started
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(30)
    window = max(handler.last - handler.first, 1e-6)
    return {"processes": procs, "threads_per_process": THREADS_PER_PROCESS, "emails": count,
            "emails_per_s": round((count - 1) / window, 1), "wall_s_including_startup": round(wall, 2),
            "quarter_rates": handler.quarter_rates()}


def main(args: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.delivery", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5_000, help="emails per run")
    parser.add_argument("--quick", action="store_true", help="2,000 emails per run")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), help="one database backend")
    parser.add_argument("--procs", default="1,2", help="worker process counts to compare")
    opts = parser.parse_args(args)
    count = 2_000 if opts.quick and opts.count == 5_000 else opts.count
    kinds = [opts.db] if opts.db else ["sqlite", "postgresql"]
    if "postgresql" in kinds and not common.pg_available():
        common.log("delivery: PostgreSQL not reachable; SQLite only")
        kinds = [k for k in kinds if k != "postgresql"]

    from aiosmtpd.controller import Controller

    handler = CountingHandler()
    port = common.free_port()
    sink = Controller(handler, hostname="127.0.0.1", port=port)
    sink.port = port
    sink.start()
    results: dict = {"emails_per_run": count, "runs": {}}
    try:
        with common.workdir() as work:
            for kind in kinds:
                with common.database(kind, work, "delivery") as url:
                    common.prepare_database(url)
                    org = common.create_funded_org(url, "Delivery Bench")
                    for procs in [int(p) for p in opts.procs.split(",")]:
                        common.log(f"delivery: {kind}, {procs} worker process(es), {count} emails")
                        results["runs"][f"{kind}/{procs}"] = run_once(url, org, sink, handler, procs, count, work)
    finally:
        sink.stop()

    print(f"\ndelivery ({count} emails per run, {THREADS_PER_PROCESS} threads per worker process, aiosmtpd sink)")
    print(f"{'database':<12}{'processes':>10}{'emails/s':>12}{'wall s':>10}  emails/s by quarter of the queue")
    for key, run in results["runs"].items():
        print(f"{key.split('/')[0]:<12}{run['processes']:>10}{run['emails_per_s']:>12}"
              f"{run['wall_s_including_startup']:>10}  {run['quarter_rates']}")
    return results


if __name__ == "__main__":
    main()
