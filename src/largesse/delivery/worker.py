"""The delivery worker: threads that claim due jobs and run them.

It runs inside `largesse serve` (one per server process, started and stopped by the app's
lifespan) and as `largesse worker` processes; any number of them may share a database.
Each thread loops: claim a small batch (jobs.claim: SKIP LOCKED on PostgreSQL, BEGIN
IMMEDIATE on SQLite), run each job, and when nothing is due, sleep for the poll interval.
One thread per process also requeues jobs whose lease expired (a killed worker's) and
makes sure the periodic expiry sweep exists.

Nothing is lost on a restart or a kill: a job is only "done" after its work committed, and
a job held by a dead process comes back when its lease expires.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from sqlalchemy import update

from largesse import db
from largesse.config import Settings
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.delivery.tasks import Context, preparer, run_claimed
from largesse.delivery.transport import open_transport
from largesse.timeutil import utcnow

log = logging.getLogger("largesse.delivery")

BATCH = 5


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    def __init__(self, engine, settings: Settings, *, concurrency: int | None = None):
        self.engine = engine
        self.settings = settings
        self.concurrency = max(1, concurrency or settings.worker_concurrency)
        self.id = worker_id()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.processed = 0
        self._count_lock = threading.Lock()
        self._last_reclaim = 0.0

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> Worker:
        self._housekeeping(force=True)
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._loop, args=(n, False), name=f"largesse-worker-{n}", daemon=True)
            thread.start()
            self.threads.append(thread)
        log.info("delivery worker %s started with %s threads", self.id, self.concurrency)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the job in hand, hand back the rest of the batch, and return."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def run_forever(self) -> None:
        self.start()
        try:
            while any(t.is_alive() for t in self.threads):
                time.sleep(0.5)
        finally:
            self.stop()

    def drain(self) -> int:
        """Run every job that is due now (and those that become due while it runs), then
        return how many were processed: `largesse worker --once`, tests, benchmarks."""
        self._housekeeping(force=True)
        before = self.processed
        threads = [threading.Thread(target=self._loop, args=(n, True), daemon=True) for n in range(self.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.processed - before

    # --- the loop --------------------------------------------------------------------------

    def _loop(self, n: int, once: bool) -> None:
        ctx = Context(self.engine, self.settings, self.id, open_transport(self.settings))
        try:
            while not self.stopping.is_set():
                if n == 0 and not once:
                    self._housekeeping()
                try:
                    done = self._step(ctx)
                except Exception:
                    log.exception("delivery worker %s: claiming jobs failed", self.id)
                    done = 0
                if done:
                    continue
                ctx.transport.close()  # do not hold an idle SMTP connection open
                if once:
                    return
                self.stopping.wait(self.settings.worker_poll_seconds)
        finally:
            ctx.transport.close()

    def _step(self, ctx: Context) -> int:
        claimed = job_queue.claim(self.engine, self.id, limit=BATCH, lease_seconds=self.settings.job_lease_seconds,
                                  prepare=preparer(ctx))
        for i, item in enumerate(claimed):
            if self.stopping.is_set():
                self._release([c.job for c in claimed[i:] if not c.skipped])
                break
            run_claimed(ctx, item)
            with self._count_lock:
                self.processed += 1
        return len(claimed)

    def _release(self, rows) -> None:
        """Put claimed but unstarted jobs back, so a stop does not wait for their lease."""
        with db.write(self.engine) as conn:
            conn.execute(
                update(jobs).where(jobs.c.id.in_([r.id for r in rows]), jobs.c.locked_by == self.id,
                                   jobs.c.status == job_queue.RUNNING)
                .values(status=job_queue.QUEUED, locked_by=None, locked_until=None, updated_at=utcnow(),
                        attempts=jobs.c.attempts - 1)
            )

    def _housekeeping(self, force: bool = False) -> None:
        """Requeue expired leases (at most every few seconds) and ensure the expiry sweep."""
        interval = min(10.0, max(0.2, self.settings.job_lease_seconds / 4))
        now = time.monotonic()
        if not force and now - self._last_reclaim < interval:
            return
        self._last_reclaim = now
        try:
            if force:
                job_queue.ensure_periodic(self.engine, "expire_rewards")
            reclaimed = job_queue.reclaim_expired(self.engine)
            if reclaimed:
                log.warning("requeued %s jobs whose worker's lease expired", reclaimed)
        except Exception:
            log.exception("delivery worker %s: housekeeping failed", self.id)


class _Stopper:
    def __init__(self, worker: Worker):
        self.worker = worker

    def stop(self) -> None:
        self.worker.stop()


def start_background(engine, settings: Settings) -> _Stopper:
    """The in-process worker of `largesse serve` (settings.run_worker)."""
    return _Stopper(Worker(engine, settings).start())
