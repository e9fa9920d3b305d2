"""Supervised delivery defers to a burst of requests, for a bounded time.

Niceness (supervisor.lower_priority) gives requests the CPU when both want it, but not the
database: the delivery process's statements run in its PostgreSQL backend at full priority,
and on SQLite they take the same write lock as the orders. In a burst of orders, sending each
email as it is queued cost a quarter of the API's throughput (PostgreSQL, 2 API processes:
1,104 orders/s with delivery off, 829 with it on; docs/benchmarks.md). Delivery is background
work: it can wait for a short burst to pass, as long as it never falls behind for good.

So a delivery child of `largesse serve`, before each batch of emails while they arrive in a
burst (its previous claim filled its batch, or it claimed at least BURST emails over the last
BURST_WINDOW seconds: a lone email, or a trickle, is sent at once however busy the API),
checks whether the server's own processes (the API: the supervisor's process and its
children but the delivery processes) used at least API_SHARE of the cores they can use
(min(API processes, CPUs)) over the last WINDOW seconds (/proc). While they do, its email
threads wait (webhooks never do); but they defer at most LARGESSE_DELIVERY_YIELD_SECONDS
(default 10) in a row: then it sends at full speed until it has caught up (a claim that does
not fill its batch: the queue is empty), and only then may it defer again. A burst shorter
than that is absorbed by the queue and sent right after it; under sustained load, emails go
out at most that much later than without deferring, and the queue never grows without bound
because of it.

Linux only (/proc); elsewhere, and for a standalone `largesse worker`, delivery never waits.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path

from largesse.delivery.supervisor import SUPERVISOR_ENV

WINDOW = 0.1  # seconds between two readings of the counters (ticks are 10 ms: 0.1 core of resolution)
# The API is busy at this share of the cores it can use. Not higher: at full load on 2 cores,
# 2 API processes on PostgreSQL use 1.0-1.1 cores (the database's backends the rest), and with
# delivery sending alongside only 0.8 (measured): at 0.4 that equilibrium read as "not busy".
API_SHARE = 0.25
REFRESH = 2.0  # seconds between two listings of the server's processes (a worker restarts)
# Emails claimed over BURST_WINDOW seconds that make a burst. A fast worker keeps up with a
# burst of orders in claims that never fill their batch (measured: 1,000 orders/s arrived as
# claims of 5-15 emails), so a full claim alone does not tell a burst from a trickle.
BURST = 20
BURST_WINDOW = 1.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ApiLoad:
    """Whether the server `server_pid` (its process and its non-delivery children) is busy,
    and the email threads' deferral budget. Thread-safe; reads the counters at most once per
    WINDOW."""

    def __init__(self, server_pid: int, *, budget: float, proc: Path = Path("/proc")):
        self.server_pid = server_pid
        self.budget = budget
        self.proc = proc
        self.cpus = os.cpu_count() or 1
        self._lock = threading.Lock()
        self._pids: list[int] = []  # the server's, then its API children's
        self._listed = -REFRESH
        self._last: tuple[float, int] | None = None  # (when, the API's CPU ticks)
        self._busy = False
        # When the current deferral began (None: not deferring), and whether the budget is
        # spent, so that the queue must be caught up before deferring again.
        self._since: float | None = None
        self._owing = False
        self._claims: collections.deque[tuple[float, int]] = collections.deque()  # (when, emails)
        self._recent = 0  # emails claimed over the last BURST_WINDOW

    @classmethod
    def for_supervised_child(cls, budget: float) -> ApiLoad | None:
        raw = os.environ.get(SUPERVISOR_ENV, "")
        if budget <= 0 or not raw.isdigit() or not Path("/proc/self/stat").exists():
            return None
        return cls(int(raw), budget=budget)

    def busy(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < WINDOW:
                return self._busy
            try:
                reading = (now, self._api_ticks(now))
            except OSError:  # a process gone between the listing and the reading: next time
                self._listed = -REFRESH
                return self._busy
            if self._last is not None:
                cores = (reading[1] - self._last[1]) / _TICKS / (reading[0] - self._last[0])
                usable = min(max(1, len(self._pids) - 1), self.cpus)  # `serve --workers N`: its N children
                self._busy = cores >= API_SHARE * usable
            self._last = reading
            return self._busy

    def wait_while_busy(self, stopping: threading.Event) -> None:
        """Return once the API is not busy, the budget is spent, or stopping is set."""
        while not stopping.is_set() and self.busy():
            with self._lock:
                if self._owing:
                    return
                now = time.monotonic()
                if self._since is None:
                    self._since = now
                if now - self._since >= self.budget:
                    self._owing, self._since = True, None
                    return
            stopping.wait(WINDOW / 2)

    def claimed(self, count: int, *, full: bool) -> bool:
        """Record a claim of `count` emails (`full`: it filled its batch). Returns whether they
        come in a burst: the claim was full, or at least BURST emails were claimed over the
        last BURST_WINDOW seconds. A claim that was not full found the queue empty: delivery
        has caught up, and may defer again."""
        now = time.monotonic()
        with self._lock:
            if count:
                self._claims.append((now, count))
                self._recent += count
            while self._claims and now - self._claims[0][0] > BURST_WINDOW:
                self._recent -= self._claims.popleft()[1]
            if not full:
                self._owing, self._since = False, None
            return full or self._recent >= BURST

    def _api_ticks(self, now: float) -> int:
        if now - self._listed >= REFRESH:
            self._pids = [self.server_pid, *self._api_children()]
            self._listed = now
        total = 0
        for pid in self._pids:
            fields = _stat(self.proc / str(pid))
            total += int(fields[11]) + int(fields[12])  # utime, stime: every thread of the process
        return total

    def _api_children(self) -> list[int]:
        """The server's child processes but the delivery ones (a scan of /proc: not every
        kernel has /proc/PID/task/TID/children)."""
        api = []
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                parent = int(_stat(entry)[1])
                if parent != self.server_pid or b"largesse\0worker" in (entry / "cmdline").read_bytes():
                    continue
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            api.append(int(entry.name))
        return api


def _stat(process: Path) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces): state, ppid, ..."""
    return (process / "stat").read_text().rsplit(")", 1)[1].split()
