"""Delivery throughput: emails/s from `largesse worker` processes to a local SMTP sink.

    python -m bench.delivery [--count 5000] [--quick] [--db sqlite|postgresql] [--procs 1,2]
                             [--threads N] [--compare /path/to/old/src] [--rounds 2]

For each backend, a fresh database gets `--orgs` funded organizations (default 8) and, per run,
one order each of its share of `--count` EMAIL rewards with their deliver_reward jobs (inserted in
one transaction, as POST /orders would, without the 500-rewards-per-order limit; the jobs of one
order share their run_after, as a real order's do). Then 1, then 2 worker
processes (`largesse worker`, `--threads` email threads each, default: the worker's own
default) drain the queue into an SMTP sink running in its own process (bench/smtp_sink.py:
a minimal asyncio SMTP server, so that the sink takes little of the CPU the workers need).

Figures: the rate is messages / (last accepted - first accepted), measured at the sink;
"cpu ms/email" is the worker processes' CPU (user + system, from /proc) between the first
and the last accepted message, per message; "sink ms/email" the sink process's CPU per
message. `--compare SRC` runs every configuration with the workers' code from another
checkout's src/ too (PYTHONPATH), alternating old and new `--rounds` times; both must ship the
same migration head (the database is migrated by this checkout: an older `largesse worker`
refuses a schema it does not know).
bench.run calls main(); it returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import common

CLK_TCK = os.sysconf("SC_CLK_TCK")


class SinkProcess:
    """bench/smtp_sink.py in a child process, driven over its stdin/stdout."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.smtp_sink"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=common.ROOT)
        self.port = int(self.proc.stdout.readline().split()[1])

    def _ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def reset(self) -> None:
        self._ask("reset")

    def stats(self) -> dict:
        return self._ask("stats")

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def cpu_seconds(pids) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def check_sample(sample: str | None) -> None:
    """The first message the sink accepted is a multipart reward email (a sanity check)."""
    message = email.message_from_string(sample or "", policy=email.policy.default)
    if message.get_content_type() != "multipart/alternative" or not message["X-Largesse-Reward-Id"]:
        raise RuntimeError(f"delivery bench: the sink received an unexpected message:\n{(sample or '')[:2000]}")
    message.get_body(("plain",)).get_content()
    message.get_body(("html",)).get_content()


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


def run_once(url: str, orgs: list[common.BenchOrg], sink: SinkProcess, procs: int, threads: int | None,
             count: int, log_dir: Path, src: str | None = None, label: str = "new") -> dict:
    for i, org in enumerate(orgs):
        seed(url, org, count // len(orgs) + (1 if i < count % len(orgs) else 0))
    sink.reset()
    env = {**os.environ, "LARGESSE_DATABASE_URL": url, "LARGESSE_SMTP_URL": f"smtp://127.0.0.1:{sink.port}",
           "LARGESSE_WORKER_POLL_SECONDS": "0.05", "LARGESSE_ENVIRONMENT": "sandbox",
           "LARGESSE_PUBLIC_URL": "http://127.0.0.1:8000"}
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    command = [str(common.VENV_BIN / "largesse"), "worker"]
    if threads:
        command += ["--concurrency", str(threads)]
    started = time.monotonic()
    workers = [subprocess.Popen(command, env=env, stdout=(log_dir / f"worker-{label}-{procs}-{n}.log").open("w"),
                                stderr=subprocess.STDOUT) for n in range(procs)]
    pids = [w.pid for w in workers]
    try:
        deadline = started + max(120.0, count / 10)
        stats = sink.stats()
        while stats["count"] == 0:  # until the first message: start-up (imports) is not counted
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"delivery bench: no message; see {log_dir}")
            time.sleep(0.01)
            stats = sink.stats()
        cpu0, sink_cpu0, count0 = cpu_seconds(pids), stats["cpu_s"], stats["count"]
        while stats["count"] < count:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"delivery bench: {stats['count']}/{count} messages; see {log_dir}")
            time.sleep(0.05)
            stats = sink.stats()
        cpu1 = cpu_seconds(pids)
        wall = time.monotonic() - started
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
    check_sample(stats["sample"])
    window = max(stats["last"] - stats["first"], 1e-6)
    sent = max(stats["count"] - count0, 1)
    return {"code": label, "processes": procs, "threads_per_process": threads or "default", "emails": count,
            "emails_per_s": round((stats["count"] - 1) / window, 1), "wall_s_including_startup": round(wall, 2),
            "worker_cpu_ms_per_email": round((cpu1 - cpu0) * 1000 / sent, 3),
            "sink_cpu_ms_per_email": round((stats["cpu_s"] - sink_cpu0) * 1000 / sent, 3),
            "quarter_rates": stats["quarter_rates"]}


def main(args: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.delivery", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5_000, help="emails per run")
    parser.add_argument("--quick", action="store_true", help="2,000 emails per run")
    parser.add_argument("--orgs", type=int, default=8, help="organizations the emails belong to")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), help="one database backend")
    parser.add_argument("--procs", default="1,2", help="worker process counts to compare")
    parser.add_argument("--threads", type=int, help="email threads per worker process (default: the worker's)")
    parser.add_argument("--compare", metavar="SRC", help="another checkout's src/: run its workers alternately")
    parser.add_argument("--rounds", type=int, default=1, help="runs per configuration (alternating with --compare)")
    opts = parser.parse_args(args)
    count = 2_000 if opts.quick and opts.count == 5_000 else opts.count
    kinds = [opts.db] if opts.db else ["sqlite", "postgresql"]
    if "postgresql" in kinds and not common.pg_available():
        common.log("delivery: PostgreSQL not reachable; SQLite only")
        kinds = [k for k in kinds if k != "postgresql"]
    codes = [("new", None)] + ([("old", opts.compare)] if opts.compare else [])

    sink = SinkProcess()
    results: dict = {"emails_per_run": count, "organizations": opts.orgs,
                     "threads_per_process": opts.threads or "default", "runs": {}}
    try:
        with common.workdir() as work:
            for kind in kinds:
                with common.database(kind, work, "delivery") as url:
                    common.prepare_database(url)
                    orgs = [common.create_funded_org(url, f"Delivery Bench {i}") for i in range(opts.orgs)]
                    for procs in [int(p) for p in opts.procs.split(",")]:
                        for n in range(opts.rounds):
                            for label, src in (codes if n % 2 == 0 else codes[::-1]):
                                common.log(f"delivery: {kind}, {label} code, {procs} worker process(es), "
                                           f"{count} emails, round {n + 1}")
                                run = run_once(url, orgs, sink, procs, opts.threads, count, work, src, label)
                                results["runs"].setdefault(f"{kind}/{procs}/{label}", []).append(run)
    finally:
        sink.stop()

    print(f"\ndelivery ({count} emails of {opts.orgs} organizations per run, "
          f"threads per worker process: {opts.threads or 'default'}, "
          f"bench/smtp_sink.py in its own process; medians of {opts.rounds} run(s))")
    print(f"{'database':<12}{'code':<6}{'processes':>10}{'emails/s':>10}{'cpu ms/email':>14}{'sink ms/email':>15}"
          f"{'wall s':>8}  emails/s by quarter of the queue (last run)")
    for key, runs in results["runs"].items():
        kind, procs, label = key.split("/")
        rate = statistics.median(r["emails_per_s"] for r in runs)
        cpu = statistics.median(r["worker_cpu_ms_per_email"] for r in runs)
        sink_cpu = statistics.median(r["sink_cpu_ms_per_email"] for r in runs)
        wall = statistics.median(r["wall_s_including_startup"] for r in runs)
        rates = ", ".join(str(r["emails_per_s"]) for r in runs)
        print(f"{kind:<12}{label:<6}{procs:>10}{rate:>10.1f}{cpu:>14.3f}{sink_cpu:>15.3f}{wall:>8.1f}  "
              f"{runs[-1]['quarter_rates']}  (runs: {rates})")
    return results


if __name__ == "__main__":
    main()
