"""Delivery as supervised child processes of `largesse serve`.

Why processes: the delivery worker's threads render and send emails in Python. Run inside
the API process they share its GIL with the event loop (and, on SQLite, take the write lock
between two requests): measured, `POST /orders` fell to 0.07 of a bare ASGI app with them and
its p99 to 455 ms (docs/benchmarks.md). A child process has its own interpreter; the API
process only waits on it.

- The child runs exactly what `largesse worker` runs (`python -m largesse worker`), with the
  server's settings passed as LARGESSE_* variables (config.Settings.to_env), so an in-process
  server built from a Settings object (the tests') delivers with those settings too.
- One supervisor per server, however many API processes: `largesse serve --workers N` runs it
  in its main process (cli.serve), a single-process server in its app's lifespan (app.py).
- Restarted when it dies (SIGKILL, out of memory, a crash), after 1 s, then 2 s, 4 s ... up to
  30 s while it keeps dying within a minute of its start. Jobs it held come back when their
  lease runs out (delivery/worker.py).
- Stopped with the server: SIGTERM, so it finishes the jobs in hand and hands the rest of its
  batch back, exactly as a standalone worker; SIGKILL after `stop_timeout`.
- Lower CPU priority: the child runs at niceness LARGESSE_DELIVERY_NICE (default 10, 0: as
  the server). Delivery is background work; when the API and delivery both want the CPU (a
  burst of orders on 2 cores), the kernel gives it to requests and the queue absorbs the
  burst, then drains. It is never starved: at niceness 10 a busy process still gets about a
  tenth of a contended core (CFS weights 110 against 1024), and all of an idle one. Measured
  (docs/benchmarks.md): SQLite with delivery on, 891 -> 975 orders/s and p99 47 -> 43 ms.
  Niceness does not reach the database; the child also defers its batches to a busy API for
  a bounded time (delivery/yielding.py, LARGESSE_DELIVERY_YIELD_SECONDS).
- No orphans: the child asks Linux to SIGKILL it when its parent dies (prctl
  PR_SET_PDEATHSIG, so a SIGKILLed server takes its delivery with it, and its jobs are
  reclaimed after their lease as before), and also exits by itself if its parent changes
  (other systems, or a parent that died before the prctl). It runs in its own session, so a
  Ctrl-C in the terminal reaches the server only, which then stops it in order: requests in
  flight first, delivery after.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from largesse.config import Settings

log = logging.getLogger("largesse.delivery")

SUPERVISOR_ENV = "LARGESSE_SUPERVISOR_PID"
# The PID of `largesse serve --workers N`, in its API processes: they die with it (cli.serve).
API_PARENT_ENV = "LARGESSE_API_PARENT_PID"
RESTART_MIN_S, RESTART_MAX_S, HEALTHY_AFTER_S = 1.0, 30.0, 60.0


class DeliverySupervisor:
    """Runs `processes` delivery worker children and keeps them running until stop()."""

    def __init__(self, settings: Settings, *, processes: int | None = None, stop_timeout: float = 40.0):
        self.settings = settings
        self.processes = max(1, processes if processes is not None else settings.delivery_processes)
        self.stop_timeout = stop_timeout
        self.children: list[subprocess.Popen | None] = [None] * self.processes
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "largesse", "worker"]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LARGESSE_")}
        env.update(self.settings.to_env())
        env[SUPERVISOR_ENV] = str(os.getpid())
        return env

    def _spawn(self, slot: int) -> subprocess.Popen:
        child = subprocess.Popen(self.command(), env=self.environment(), stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        self.children[slot] = child
        log.info("delivery: started worker process %s", child.pid)
        return child

    def start(self) -> DeliverySupervisor:
        # The children are created by the supervising thread, which lives until stop(): Linux
        # ties PR_SET_PDEATHSIG to the thread that forked the child, not only to the process.
        started = threading.Event()
        self._thread = threading.Thread(target=self._supervise, args=(started,), name="largesse-delivery-supervisor",
                                        daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def pids(self) -> list[int]:
        return [c.pid for c in self.children if c is not None and c.poll() is None]

    def _supervise(self, started: threading.Event) -> None:
        since = [0.0] * self.processes
        delay = [RESTART_MIN_S] * self.processes
        due = [0.0] * self.processes
        try:
            with self._lock:
                for slot in range(self.processes):
                    try:
                        self._spawn(slot)
                    except OSError as exc:  # EAGAIN, ENOMEM, EACCES: _watch tries again, as after a death
                        log.error("delivery: cannot start a worker process: %s; trying again in %.0f s",
                                  exc, delay[slot])
                        due[slot] = time.monotonic() + delay[slot]
                        delay[slot] = min(RESTART_MAX_S, delay[slot] * 2)
                    since[slot] = time.monotonic()
        finally:
            started.set()
        try:
            self._watch(since, delay, due)
        finally:
            self._stop_children()

    def _watch(self, since: list[float], delay: list[float], due: list[float]) -> None:
        while not self._stopping.wait(0.5):
            now = time.monotonic()
            for slot, child in enumerate(self.children):
                if child is not None and child.poll() is None:
                    continue
                with self._lock:
                    if self._stopping.is_set():
                        return
                    if child is not None:  # it just died: schedule the restart
                        self.children[slot] = None
                        if now - since[slot] >= HEALTHY_AFTER_S:
                            delay[slot] = RESTART_MIN_S
                        due[slot] = now + delay[slot]
                        log.warning("delivery: worker process %s exited (%s); restarting it in %.0f s", child.pid,
                                    _describe(child.returncode), delay[slot])
                        delay[slot] = min(RESTART_MAX_S, delay[slot] * 2)
                    elif now >= due[slot]:
                        try:
                            self._spawn(slot)
                            self.restarts += 1
                        except OSError as exc:
                            log.error("delivery: cannot start a worker process: %s; trying again in %.0f s",
                                      exc, delay[slot])
                            due[slot] = now + delay[slot]
                            delay[slot] = min(RESTART_MAX_S, delay[slot] * 2)
                        since[slot] = time.monotonic()

    def stop(self) -> None:
        """SIGTERM every child (each finishes its jobs in hand), wait, SIGKILL what is left.

        The supervising thread does it and stop() waits for that thread: were the thread to end
        first, PR_SET_PDEATHSIG would SIGKILL the children in the middle of their jobs."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.stop_timeout + 15)

    def _stop_children(self) -> None:
        with self._lock:
            children = [c for c in self.children if c is not None]
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for child in children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("delivery: worker process %s did not stop within %.0f s; killing it", child.pid,
                            self.stop_timeout)
                child.kill()
                child.wait(10)


def _describe(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def lower_priority(settings: Settings) -> None:
    """In a supervised child: take the niceness the server's settings give delivery."""
    if os.environ.get(SUPERVISOR_ENV) and settings.delivery_nice > 0:
        os.nice(settings.delivery_nice)


def bind_to_supervisor() -> None:
    """In a supervised child (`largesse worker` started by DeliverySupervisor): die with the parent."""
    bind_to_parent(SUPERVISOR_ENV)


def bind_to_parent(env_name: str) -> None:
    """Die with the process whose PID the environment variable env_name names, if it is set (a
    child of `largesse serve`: a delivery process, or an API process of `--workers N`).

    PR_SET_PDEATHSIG makes the kernel SIGKILL this process when its parent goes; if the parent
    is already gone (it died before this call), exit now. Elsewhere than Linux, a thread polls.
    """
    raw = os.environ.get(env_name)
    if not raw or not raw.isdigit():
        return
    parent = int(raw)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="largesse-parent-watch", daemon=True).start()
