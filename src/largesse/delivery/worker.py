"""The delivery worker: threads that claim due jobs and run them, and a heartbeat.

It runs as `largesse worker` processes, which `largesse serve` starts and supervises itself
by default (delivery/supervisor.py; never as threads of the API process); any number of them
may share a database.

- Lanes. Email threads (LARGESSE_WORKER_CONCURRENCY) claim only "mail" jobs (emails, the
  expiry sweep); webhook threads (LARGESSE_WEBHOOK_CONCURRENCY) claim only webhook POSTs, one
  at a time. A slow webhook receiver can hold webhook threads, never email delivery.
- Fairness. Each claim takes one job per organization in turn before filling the batch
  (jobs.claim), so one organization's backlog does not delay another's jobs; and one
  organization's webhooks run on at most N - 1 of the N webhook threads.
- Leases and heartbeat. A claimed job is leased for LARGESSE_JOB_LEASE_SECONDS (10 s); the
  heartbeat thread renews the lease of every job still in hand every lease/4 and, every
  second or so, requeues jobs whose lease ran out (a killed worker's): they run again about
  one lease after their worker died, and never while a live worker still works on them.
- Stopping. stop() (SIGTERM) lets each thread finish the job in hand, hands the unstarted
  rest of its batch back, then stops the heartbeat.
- The database going away. Each thread waits poll, 2 x poll, 4 x poll ... (capped at
  LARGESSE_WORKER_BACKOFF_MAX_SECONDS) between attempts, one log line when the outage starts
  and one when it ends, and carries on without a restart.

Nothing is lost on a restart or a kill: a job is only "done" after its work committed.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from largesse import db
from largesse.config import Settings
from largesse.delivery import jobs as job_queue
from largesse.delivery.tasks import Context, complete_sent, prepare_batch, run_claimed
from largesse.delivery.transport import open_transport
from largesse.delivery.yielding import ApiLoad

log = logging.getLogger("largesse.delivery")

# Jobs per claim: emails are quick (a few ms each) and a batch shares its claim, its reads, its
# token writes and its completions (a handful of statements for the whole batch: at 5 per batch
# they were half of a worker's time on PostgreSQL); a webhook POST can take its whole deadline,
# so a webhook thread holds only the job it runs.
BATCH = {job_queue.MAIL: 20, job_queue.WEBHOOK: 1}
# An organization's webhooks may use 1 in ORG_WEBHOOK_SHARE of a worker's webhook threads at once.
ORG_WEBHOOK_SHARE = 8
# A batch's sent emails are completed together, at its end (20 emails to a local relay: ~12 ms),
# or every COMPLETE_EVERY_SECONDS when the relay is slow: the emails a crash can send twice are
# those sent since the last completion, at most this long (plus the email in flight).
COMPLETE_EVERY_SECONDS = 0.1


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Outage:
    """Whether this worker can reach its database: one log line when an outage starts and one
    when it ends, however many threads and attempts fail in between."""

    def __init__(self, worker: str):
        self.worker = worker
        self.lock = threading.Lock()
        self.since: float | None = None
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        with self.lock:
            self.failures += 1
            if self.since is not None:
                return
            self.since = time.monotonic()
        log.warning("delivery worker %s: the database is unreachable (%s: %s); waiting for it with backoff",
                    self.worker, type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")

    def ok(self, started: float) -> None:
        """An attempt that began at `started` (time.monotonic) succeeded. One that began before
        the outage was seen proves nothing: with several threads, one still finishing on a
        connection opened before the outage would report the database back, and the next
        failure would start a second outage in the log."""
        if self.since is None:  # the common case, without the lock
            return
        with self.lock:
            if self.since is None or started < self.since:
                return
            down, failures = time.monotonic() - self.since, self.failures
            self.since, self.failures = None, 0
        log.warning("delivery worker %s: the database is back after %.1f s (%s failed attempts); resuming",
                    self.worker, down, failures)


class Worker:
    def __init__(self, engine, settings: Settings, *, concurrency: int | None = None,
                 webhook_concurrency: int | None = None):
        self.engine = engine
        self.settings = settings
        mail = settings.worker_concurrency if concurrency is None else concurrency
        webhook = settings.webhook_concurrency if webhook_concurrency is None else webhook_concurrency
        self.lanes = {job_queue.MAIL: max(0, mail), job_queue.WEBHOOK: max(0, webhook)}
        if not any(self.lanes.values()):
            self.lanes[job_queue.MAIL] = 1
        self.concurrency = sum(self.lanes.values())
        self.id = worker_id()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.processed = 0
        self._count_lock = threading.Lock()
        self.cursors = {lane: job_queue.Cursor() for lane in self.lanes}
        # One organization's webhook POSTs run on at most ORG_WEBHOOK_SHARE of the webhook threads
        # (counted across workers; at least 1, at most N - 1): with the default 8, one POST per
        # organization at a time, so seven slow receivers still leave a thread to the others.
        webhook_threads = self.lanes[job_queue.WEBHOOK]
        self.org_caps = ({job_queue.WEBHOOK: max(1, min(webhook_threads - 1, webhook_threads // ORG_WEBHOOK_SHARE))}
                         if webhook_threads > 1 else {})
        self.outage = Outage(self.id)
        # Jobs this worker has claimed and not finished: the heartbeat renews their leases.
        self.held: set[int] = set()
        self._held_lock = threading.Lock()
        # The heartbeat's last renewal (monotonic, taken before it ran) and the held jobs it did
        # not renew: a job not yet run that a renewal missed was taken over (_still_ours).
        self._renewed_at = 0.0
        self._unrenewed: set[int] = set()
        self._beat_stop = threading.Event()
        self._beat: threading.Thread | None = None
        # A child of `largesse serve` waits between batches while the API saturates the machine.
        self.api_load = ApiLoad.for_supervised_child(settings.delivery_yield_seconds)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> Worker:
        self._housekeeping(ensure_periodic=True)
        self._start_heartbeat()
        for lane, count in self.lanes.items():
            for n in range(count):
                thread = threading.Thread(target=self._loop, args=(lane, False), daemon=True,
                                          name=f"largesse-{lane}-{n}")
                thread.start()
                self.threads.append(thread)
        log.info("delivery worker %s started with %s email and %s webhook threads (lease %s s)", self.id,
                 self.lanes[job_queue.MAIL], self.lanes[job_queue.WEBHOOK], self.settings.job_lease_seconds)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the jobs in hand (their leases kept alive), hand back the rest of each batch,
        then stop the heartbeat. A job still running after `timeout` is abandoned to its lease."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        if stuck:
            log.warning("delivery worker %s: %s still busy after %.0f s; their jobs will be reclaimed when the "
                        "lease runs out", self.id, ", ".join(stuck), timeout)
        self._stop_heartbeat()

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
        self._housekeeping(ensure_periodic=True)
        before = self.processed
        self._start_heartbeat()
        try:
            threads = [threading.Thread(target=self._loop, args=(lane, True), daemon=True)
                       for lane, count in self.lanes.items() for _ in range(count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            self._stop_heartbeat()
        return self.processed - before

    # --- the claiming threads ---------------------------------------------------------------

    def _loop(self, lane: str, once: bool) -> None:
        ctx = Context(self.engine, self.settings, self.id, open_transport(self.settings))
        backoff = self.settings.worker_poll_seconds
        # Emails defer to a busy API only while they come in a burst (a full claim, or BURST
        # emails a second): a lone email is sent at once, however busy the API (yielding.py).
        defers = self.api_load is not None and not once and lane == job_queue.MAIL
        backlog = False
        try:
            while not self.stopping.is_set():
                if defers and backlog:
                    self.api_load.wait_while_busy(self.stopping)
                attempt = time.monotonic()
                try:
                    done = self._step(ctx, lane)
                    backlog = defers and self.api_load.claimed(done, full=done >= BATCH[lane])
                    self.outage.ok(attempt)
                    backoff = self.settings.worker_poll_seconds
                except Exception as exc:
                    ctx.transport.close()
                    if not db.is_unavailable(exc):
                        log.exception("delivery worker %s: claiming or running jobs failed", self.id)
                    elif once:
                        return
                    else:
                        self.outage.failed(exc)
                        self.stopping.wait(backoff)
                        backoff = min(self.settings.worker_backoff_max_seconds, max(backoff, 0.05) * 2)
                        continue
                    done = 0
                if done:
                    continue
                ctx.transport.close()  # do not hold an idle SMTP connection open
                if once:
                    return
                self.stopping.wait(self.settings.worker_poll_seconds)
        finally:
            ctx.transport.close()

    def _step(self, ctx: Context, lane: str) -> int:
        started = time.monotonic()  # the claim's lease runs from (after) here
        rows = job_queue.claim(self.engine, self.id, limit=BATCH[lane],
                               lease_seconds=self.settings.job_lease_seconds,
                               lane=lane, cursor=self.cursors[lane], org_cap=self.org_caps.get(lane),
                               environment=self.settings.environment)
        if not rows:
            return 0
        self._hold([r.id for r in rows])
        try:
            claimed = prepare_batch(ctx, rows)
            self._forget([c.job.id for c in claimed if c.skipped])  # done in the claim's transaction
            completed = time.monotonic()
            leased_at, taken = started, set()
            for i, item in enumerate(claimed):
                if self.stopping.is_set():
                    rest = [c.job.id for c in claimed[i:] if not c.skipped]
                    job_queue.release(self.engine, self.id, rest)
                    break
                if not item.skipped:
                    leased_at = self._still_ours(claimed[i:], leased_at, taken)
                    if item.job.id in taken:
                        continue
                run_claimed(ctx, item)
                if not ctx.sent or ctx.sent[-1] is not item.job:
                    # Its outcome is written (done, requeued for a retry, dead): no longer held,
                    # so the heartbeat neither renews it nor calls it lost.
                    self._forget([item.job.id])
                with self._count_lock:
                    self.processed += 1
                if ctx.sent and time.monotonic() - completed >= COMPLETE_EVERY_SECONDS:
                    self._complete(ctx, leased_at)
                    completed = time.monotonic()
            self._complete(ctx, leased_at)
        finally:
            # Whatever was not run, completed or released (the database failed under us) is
            # left to its lease: not renewed any more, it is reclaimed once the lease runs out.
            ctx.sent.clear()
            self._forget([r.id for r in rows])
        return len(rows)

    def _still_ours(self, rest, leased_at: float, taken: set[int]) -> float:
        """Before running rest[0]: add to `taken` the jobs of `rest` another worker took over,
        so that this worker does not send them again. A job not yet run that the heartbeat's
        last renewal missed was taken. And when neither the heartbeat nor this batch has renewed
        the lease for half of it (the process was paused or starved: a VM freeze, SIGSTOP, a
        stalled database), the rest of the batch is renewed here: what comes back is still this
        worker's, the others were taken over. Returns when the lease was last known renewed."""
        lease = self.settings.job_lease_seconds
        renewed_at = max(leased_at, self._renewed_at)
        if not self._unrenewed and time.monotonic() - renewed_at <= lease / 2:
            return renewed_at  # every email of a healthy batch: nothing to look up
        pending = [c.job.id for c in rest if not c.skipped and c.job.id not in taken]
        with self._held_lock:
            found = {j for j in pending if j in self._unrenewed and j in self.held}
            renewed_at = max(leased_at, self._renewed_at)
        pending = [j for j in pending if j not in found]
        if pending and time.monotonic() - renewed_at > lease / 2:
            renewed_at = time.monotonic()
            found |= set(pending) - job_queue.renew(self.engine, self.id, pending, lease)
        if found:
            taken |= found
            self._forget(found)
            log.warning("delivery worker %s lost the lease of jobs %s before running them (it was paused or "
                        "starved); it leaves them to the worker that took them over", self.id, sorted(found))
        return renewed_at

    def _complete(self, ctx: Context, leased_at: float) -> None:
        """Step 3 for the emails sent since the last call: one transaction (tasks.complete_sent).
        A batch completes at its end, or every COMPLETE_EVERY_SECONDS while a slow relay makes
        it long: a crash can send again only what was sent since the last completion."""
        ids = [job.id for job in ctx.sent]
        # A moment without the database (a blip, a restart) is waited out while the leases hold,
        # with their heartbeat: given up at once, the batch was sent again a lease later, every
        # email of it (an audit: 40 duplicates for a 0.2 s loss). Past half a lease (or three
        # quarters of one since the last renewal, when the heartbeat missed some: past the lease
        # another worker may take the jobs), or stopping, the batch is left to its lease.
        lease = self.settings.job_lease_seconds
        deadline = min(time.monotonic() + lease / 2, max(leased_at, self._renewed_at) + lease * 0.75)
        pause = 0.05
        while True:
            try:
                complete_sent(ctx)
                break
            except Exception as exc:
                if (not db.is_unavailable(exc) or self.stopping.is_set()
                        or time.monotonic() + pause > deadline):
                    raise
                self.outage.failed(exc)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
        self._forget(ids)

    def _hold(self, ids) -> None:
        with self._held_lock:
            self.held.update(ids)

    def _forget(self, ids) -> None:
        with self._held_lock:
            self.held.difference_update(ids)

    # --- the heartbeat ----------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        if self._beat is not None and self._beat.is_alive():
            return
        self._beat_stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="largesse-heartbeat", daemon=True)
        self._beat.start()

    def _stop_heartbeat(self) -> None:
        self._beat_stop.set()
        if self._beat is not None:
            self._beat.join(10)

    def _heartbeat(self) -> None:
        """Renew the leases of jobs in hand every lease/4; requeue expired leases every tick."""
        lease = self.settings.job_lease_seconds
        renew_every = max(0.05, lease / 4)
        tick = min(1.0, renew_every)
        last_renew = last_ensure = time.monotonic()
        unrenewed: set[int] = set()  # held but not renewed at the previous renewal
        while not self._beat_stop.wait(tick):
            attempt = time.monotonic()
            db.sqlite_file_lost(self.engine)  # a deleted or replaced file: its writes refused from here on
            try:
                if time.monotonic() - last_ensure >= 60:  # in case it was deleted or the start failed
                    last_ensure = time.monotonic()
                    job_queue.ensure_periodic(self.engine, "expire_rewards")
                if time.monotonic() - last_renew >= renew_every:
                    last_renew = time.monotonic()
                    with self._held_lock:
                        held = set(self.held)
                    asked = time.monotonic()
                    kept = job_queue.renew(self.engine, self.id, held, lease)
                    with self._held_lock:
                        missed = (held - kept) & self.held  # in hand, but not renewed
                        self._renewed_at, self._unrenewed = asked, missed
                    # Lost: missed at two renewals in a row. Once is also what a job whose outcome
                    # this worker has just written looks like, until its thread lets it go.
                    lost, unrenewed = missed & unrenewed, missed
                    if lost:
                        log.warning("delivery worker %s lost the lease of jobs %s (taken over after it ran out)",
                                    self.id, sorted(lost))
                self._housekeeping()
                self.outage.ok(attempt)
            except Exception as exc:
                if db.is_unavailable(exc):
                    self.outage.failed(exc)
                else:
                    log.exception("delivery worker %s: heartbeat failed", self.id)

    def _housekeeping(self, ensure_periodic: bool = False) -> None:
        """Requeue jobs whose lease ran out; make sure the periodic expiry sweep exists."""
        try:
            if ensure_periodic:
                job_queue.ensure_periodic(self.engine, "expire_rewards")
            reclaimed = job_queue.reclaim_expired(self.engine)
            if reclaimed:
                log.warning("requeued %s jobs whose worker's lease expired", reclaimed)
        except Exception as exc:
            if not ensure_periodic:
                raise
            if db.is_unavailable(exc):
                self.outage.failed(exc)
            else:
                log.exception("delivery worker %s: housekeeping failed", self.id)
