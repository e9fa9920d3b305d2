"""Faults injected into the real services, from outside their code.

- StatementFault: the Nth SQL statement from now fails with the driver's own OperationalError
  (a SQLAlchemy before_cursor_execute listener on the simulation's engine), as a database
  error at that point would: the service's transaction must roll back whole.
- Killed: the worker process dies. A BaseException, so no `except Exception` in Largesse
  handles it, exactly as nothing runs after a SIGKILL. KillingTransport raises it right after
  the SMTP server accepted a message, before the worker commits that it sent it.
"""

from __future__ import annotations

import contextlib

from sqlalchemy import Engine, event

MARK = "simulated fault"


class Killed(BaseException):
    """The worker process was killed here."""


class StatementFault:
    def __init__(self, engine: Engine):
        dbapi_error = engine.dialect.loaded_dbapi.OperationalError
        self.error_class = type("SimulatedFault", (dbapi_error,), {})
        self.countdown: int | None = None
        self.statements = 0  # every statement the services ran (for the figures)
        self.fired: str | None = None
        self.paused = False
        self.kill = False
        event.listen(engine, "before_cursor_execute", self._before)

    def arm(self, nth: int, *, kill: bool = False) -> None:
        """Fail the nth statement from now (1 = the next one); with kill, the process dies there
        instead (Killed, before the statement reaches the database)."""
        self.countdown = nth
        self.kill = kill
        self.fired = None

    def disarm(self) -> None:
        self.countdown = None

    @contextlib.contextmanager
    def pause(self):
        """The simulation's own reads (predictions, checks) neither count nor fail."""
        self.paused = True
        try:
            yield
        finally:
            self.paused = False

    def _before(self, conn, cursor, statement, parameters, context, executemany):
        if self.paused:
            return
        self.statements += 1
        if self.countdown is None:
            return
        self.countdown -= 1
        if self.countdown > 0:
            return
        self.countdown = None
        self.fired = " ".join(statement.split())[:80]
        if self.kill:
            raise Killed(f"process killed before the statement {self.fired}")
        raise self.error_class(f"{MARK}: statement failed: {self.fired}")


def is_injected(exc: BaseException | None) -> bool:
    """Did exc come from a StatementFault (possibly wrapped by SQLAlchemy or a service)?"""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if MARK in str(exc) or type(exc).__name__ == "SimulatedFault":
            return True
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return False


class KillingTransport:
    """Wraps the worker's real SMTP transport; when armed, the next accepted message kills
    the worker before anything else happens (the commit that records the delivery)."""

    def __init__(self, inner):
        self.inner = inner
        self.kill_after_send = False
        self.sent = 0

    def send(self, message) -> None:
        self.inner.send(message)
        self.sent += 1
        if self.kill_after_send:
            self.kill_after_send = False
            raise Killed("worker killed after the SMTP server accepted the message, before its commit")

    def close(self) -> None:
        self.inner.close()
