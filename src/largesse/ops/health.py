"""Readiness (/readyz) and the job queue's figures for /metrics.

/healthz (app.py) says the process is alive and touches nothing. /readyz says whether this
process can serve: the database answers and its schema is at the migration head this code
ships. Both are cheap: readiness is one indexed SELECT on a pooled connection.
"""

from __future__ import annotations

import functools
from datetime import datetime

from sqlalchemy import Connection, func, select, text

from largesse.delivery.models import jobs
from largesse.timeutil import utcnow

UNFINISHED = ("queued", "running", "dead")


@functools.cache
def migration_head() -> str:
    """The newest revision among the shipped migrations (read once per process)."""
    from largesse.migrate import alembic_head, shipped_head

    return shipped_head() or alembic_head()


def schema_revision(conn: Connection) -> str | None:
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def readiness(engine) -> tuple[bool, dict]:
    """(ready, body): ready when the database answers and its schema is at the head."""
    from largesse import db

    head = migration_head()
    try:
        with db.read(engine) as conn:
            current = schema_revision(conn)
    except Exception as exc:  # any failure to answer is "not ready"; the reason is logged, not shown
        if "alembic_version" in str(exc):  # it answered: a database that was never migrated
            current = None
        else:
            import logging

            logging.getLogger("largesse.ops").warning("readiness: database unreachable (%s)", type(exc).__name__)
            return False, _not_ready("The database is unreachable", {"database": ["unreachable"]})
    lost = db.sqlite_file_lost(engine)
    if lost is not None:
        return False, _not_ready(f"Not ready: {lost}; restart after restoring it", {"database": ["file lost"]})
    if current != head:
        return False, _not_ready(f"The database schema is at {current}, this code needs {head}; "
                                 "run `largesse db upgrade`", {"migrations": ["not current"]})
    return True, {"status": "ready", "database": "ok", "migration": head}


def _not_ready(message: str, payload: dict) -> dict:
    return {"errors": {"message": message, "payload": payload}}


_DEPTH = (select(jobs.c.status, jobs.c.kind, func.count())
          .where(jobs.c.status.in_(UNFINISHED)).group_by(jobs.c.status, jobs.c.kind))


def job_queue(conn: Connection, now: datetime | None = None) -> tuple[dict[tuple[str, str], int], float]:
    """({(status, kind): count} of unfinished and dead jobs, age in seconds of the oldest due job)."""
    now = now or utcnow()
    counts = {(status, kind): count for status, kind, count in conn.execute(_DEPTH)}
    oldest = conn.execute(select(func.min(jobs.c.run_after))
                          .where(jobs.c.status == "queued", jobs.c.run_after <= now)).scalar()
    if isinstance(oldest, str):  # SQLite returns an aggregate of a DateTime column as text
        oldest = datetime.fromisoformat(oldest)
    return counts, max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
