"""Fixed-window rate limits for the redemption pages, counted in the database.

The counters live in a table rather than in process memory so that every server process
(`largesse serve --workers N`, several hosts behind a balancer) sees the same numbers.
One upsert per bucket (INSERT ... ON CONFLICT DO UPDATE ... RETURNING) counts a hit and
reads the new total in a single statement; both SQLite (3.35+) and PostgreSQL support it.

Why these limits: a token has 256 random bits, so guessing is hopeless whatever the limit;
the limits are there to keep one client (or one leaked link) from hammering the pages and
the redemption transaction. They are generous per IP because an office or a mobile carrier
puts many recipients behind one address.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, delete

from largesse import db
from largesse.redemption.models import redemption_rate_limits


@dataclass(frozen=True)
class RateLimits:
    window_seconds: int = 60
    per_ip: int = 60  # GET + POST on /redeem/* from one client address
    per_token: int = 30  # GET + POST on one link, from anywhere
    posts_per_token: int = 10  # redemption attempts (POST) on one link

    @classmethod
    def from_settings(cls, settings) -> RateLimits:
        """LARGESSE_REDEEM_* (config.Settings: checked when the server starts)."""
        return cls(window_seconds=settings.redeem_window_seconds, per_ip=settings.redeem_limit_per_ip,
                   per_token=settings.redeem_limit_per_token, posts_per_token=settings.redeem_posts_per_token)


def hit(conn: Connection, bucket: str, window_start: int) -> int:
    """Count one request in (bucket, window) and return the window's total so far."""
    table = redemption_rate_limits
    statement = (
        db.upsert_insert(conn)(table)
        .values(bucket=bucket[:100], window_start=window_start, hits=1)
        .on_conflict_do_update(index_elements=[table.c.bucket, table.c.window_start],
                               set_={"hits": table.c.hits + 1})
        .returning(table.c.hits)
    )
    return conn.execute(statement).scalar_one()


def check(conn: Connection, limits: RateLimits, buckets: list[tuple[str, int]], *,
          now: float | None = None) -> int | None:
    """Count a request in each (bucket, limit); return seconds to wait when any is over.

    Every bucket is counted even when an earlier one is already over, so a client that keeps
    retrying stays over its limit. The first hit of a window prunes windows that have ended.
    """
    if conn.dialect.name == "postgresql":
        # Counters may be lost in a crash without harm: don't wait for the WAL flush.
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
    now = time.time() if now is None else now
    window_start = int(now) // limits.window_seconds * limits.window_seconds
    over = False
    for bucket, limit in buckets:
        count = hit(conn, bucket, window_start)
        if count == 1 and bucket.startswith("ip:"):
            conn.execute(delete(redemption_rate_limits).where(redemption_rate_limits.c.window_start < window_start))
        over = over or count > limit
    if not over:
        return None
    return max(1, window_start + limits.window_seconds - int(now))
