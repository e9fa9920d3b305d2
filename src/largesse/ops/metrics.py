"""Prometheus metrics, served at /metrics (docs/operations.md lists them).

Multiprocess: `largesse serve --workers N` runs N uvicorn processes. When
PROMETHEUS_MULTIPROC_DIR is set before prometheus_client is imported (serve sets it up,
see `prepare_multiprocess_dir`), each process writes its samples to memory-mapped files in
that directory and any process's /metrics aggregates them all. Without it (one process, the
tests' in-process servers), the default in-memory registry is used. The job queue's gauges
are not recorded at all: they are computed from the jobs table when scraped.

Per-request cost matters (POST /orders is the benchmarked path): labelled children are
cached in a dict, so a request costs one dict lookup and one histogram observe.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Decided once, when prometheus_client chose its value class (at its import, just above).
MULTIPROCESS = bool(os.environ.get(MULTIPROC_ENV))
CONTENT_TYPE = CONTENT_TYPE_LATEST

REQUEST_SECONDS = Histogram(
    "largesse_http_request_duration_seconds", "HTTP request latency by route template (no IDs or tokens) and status",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
ORDERS = Counter("largesse_orders_created_total", "Orders created (replays not counted)", ["currency"])
ORDER_CENTS = Counter("largesse_order_amount_cents_total",
                      "Sum of created orders' totals, in cents of the currency", ["currency"])
DELIVERIES = Counter("largesse_deliveries_total",
                     "Reward email delivery attempts by outcome: sent, skipped (nothing to send), retry (failed, "
                     "retried later), dead (failed for good), lost (lease taken over)", ["outcome"])
WEBHOOK_FAILURES = Counter("largesse_webhook_delivery_failures_total",
                           "Failed webhook POSTs (network error or non-2xx answer) by what follows: retry, dead, lost",
                           ["outcome"])
REDEMPTIONS = Counter("largesse_redemptions_total",
                      "Redemption attempts by outcome (redeemed, or why not)", ["outcome"])
DB_RETRIES = Counter("largesse_db_retries_total",
                     "Transactions re-run after a serialization failure, deadlock or lost connection", ["reason"])

_children: dict[tuple, object] = {}


def _child(metric, *labels: str):
    """metric.labels(*labels), looked up once: labels() validates and locks on every call."""
    key = (metric, labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    _child(REQUEST_SECONDS, method, route, str(status)).observe(seconds)


def order_created(currency: str, total_cents: int) -> None:
    _child(ORDERS, currency).inc()
    _child(ORDER_CENTS, currency).inc(total_cents)


def delivery(outcome: str) -> None:
    DELIVERIES.labels(outcome).inc()


def job_failed(kind: str, status: str) -> None:
    """A failed attempt of a job (delivery/tasks.fail); status is the job's next state."""
    outcome = "retry" if status == "queued" else status
    if kind == "deliver_reward":
        DELIVERIES.labels(outcome).inc()
    elif kind == "deliver_webhook":
        WEBHOOK_FAILURES.labels(outcome).inc()


def redemption(outcome: str) -> None:
    REDEMPTIONS.labels(outcome).inc()


def db_retry(reason: str) -> None:
    DB_RETRIES.labels(reason).inc()


def prepare_multiprocess_dir(environ=os.environ) -> str:
    """Make PROMETHEUS_MULTIPROC_DIR usable before worker processes start; returns it.

    Unset: a new private temporary directory (removed by `cleanup`). Set by the operator: the
    files of processes that no longer run are removed (a restart starts counters afresh, as a
    Prometheus counter reset), files of live processes (e.g. `largesse worker` sharing the
    directory) are kept.
    """
    path = environ.get(MULTIPROC_ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="largesse-metrics-")
        environ[MULTIPROC_ENV] = path
        return path
    Path(path).mkdir(parents=True, exist_ok=True)
    for file in Path(path).glob("*.db"):
        pid = file.stem.rsplit("_", 1)[-1]
        if not pid.isdigit() or not _alive(int(pid)):
            file.unlink(missing_ok=True)
    return path


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobQueueCollector:
    """Job queue gauges from the jobs table at scrape time: two index-backed queries.

    Only unfinished and dead jobs are counted (done jobs are history, and may be many).
    If the database cannot be reached, largesse_database_up is 0 and the job gauges are absent.
    """

    def __init__(self, engine):
        self.engine = engine

    def collect(self):
        from largesse import db
        from largesse.ops import health

        up = GaugeMetricFamily("largesse_database_up", "1 if the database answered this scrape's queries")
        try:
            with db.read(self.engine) as conn:
                counts, oldest_due_seconds = health.job_queue(conn)
        except Exception:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        depth = GaugeMetricFamily("largesse_jobs", "Jobs in the queue by status and kind (done jobs not counted)",
                                  labels=["status", "kind"])
        for (status, kind), count in sorted(counts.items()):
            depth.add_metric([status, kind], count)
        yield depth
        yield GaugeMetricFamily("largesse_jobs_oldest_due_seconds",
                                "Age of the oldest queued job that is due (0 when none is waiting)",
                                value=oldest_due_seconds)


def render(engine) -> bytes:
    """The exposition text: this process's (or every process's) samples, then the job gauges."""
    if MULTIPROCESS:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        samples = generate_latest(registry)
    else:
        samples = generate_latest(REGISTRY)
    scraped = CollectorRegistry()
    scraped.register(JobQueueCollector(engine))
    return samples + generate_latest(scraped)
