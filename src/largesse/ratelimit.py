"""API rate limits: requests per minute per API key and per organization, across processes.

Why this design: POST /orders is the hot path (hundreds per second per process), so a
request must not pay a database round trip for its rate limit. Each process counts its
requests in memory, in fixed windows of 60 s, and about once a second (the first request
after `sync_seconds`) one background statement adds its new counts to the shared table
`api_rate_limits` and reads back every bucket's total from all processes (a multi-row
INSERT ... ON CONFLICT DO UPDATE ... RETURNING, on SQLite and PostgreSQL alike). A request
is admitted while

    total at the last sync (all processes) + this process's hits since then < limit.

Bounded overshoot: between two syncs, a process does not see the other processes' newest
hits. A window can therefore admit at most the limit plus what the *other* processes
admitted during one sync interval (plus the sync's own latency), e.g. with 2 processes at
100 requests/s each and the default 1 s sync, about 100 more. A restarted process forgets
nothing that it had synced; hits it had not yet synced (under a second's worth) are lost.

The key's organization comes from auth.verified_keys, filled by the endpoint's own caller
lookup: a key's very first request in a process is counted when its response starts, after
the endpoint verified it, and is never refused. Requests with unknown or invalid keys are
not counted here (they are answered 401 by the lookup, and counting them would let anyone
grow the table with made-up keys).

The redemption pages' limits (redemption/ratelimit.py) count in the database per request:
their traffic is human-paced and a page render costs more than the upsert. The statement
builder for the dialect's INSERT is shared with them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, String, Table, delete

from largesse import auth, db
from largesse.db import metadata
from largesse.errors import ServiceUnavailable
from largesse.web import json_response, run_db

log = logging.getLogger("largesse.ratelimit")

api_rate_limits = Table(
    "api_rate_limits", metadata,
    Column("bucket", String(100), primary_key=True),
    Column("window_start", BigInteger, primary_key=True),
    Column("hits", BigInteger, nullable=False),
    Index("ix_api_rate_limits_window", "window_start"),
)

WINDOW_SECONDS = 60
SYNC_ROWS_PER_STATEMENT = 500


@dataclass(slots=True)
class _Bucket:
    name: str  # its row in api_rate_limits: "key:<hash prefix>" or "org:<organization id>"
    limit: int
    synced: int = 0  # every process's hits in this window, as of the last sync (ours included)
    in_flight: int = 0  # our hits that the running sync is adding
    pending: int = 0  # our hits since the running (or last) sync started

    def left(self) -> int:
        return self.limit - self.synced - self.in_flight - self.pending


class ApiRateLimiter:
    """One per application (process): in-memory counts, synced with the shared table."""

    def __init__(self, engine, *, per_key: int, per_org: int, sync_seconds: float = 1.0,
                 window_seconds: int = WINDOW_SECONDS, clock=time.time):
        self.engine = engine
        self.per_key = per_key
        self.per_org = per_org
        self.sync_seconds = sync_seconds
        self.window_seconds = window_seconds
        self.clock = clock
        self.enabled = per_key > 0 or per_org > 0
        self.window_start = 0
        self.key_buckets: dict[str, _Bucket] = {}  # by key hash, this window
        self.org_buckets: dict[str, _Bucket] = {}  # by organization id, this window
        self._next_sync = 0.0
        self._sync_task: asyncio.Task | None = None
        self._pruned_window = -1

    def admit(self, key_hash: str, org_id: str, *, force: bool = False) -> tuple[bool, list, int]:
        """Count one request of (key, org) unless a limit is reached.

        Returns (admitted, response headers, seconds until the window resets). With force, the
        request is counted and admitted whatever the counts (it has already been served)."""
        # Kept lean on purpose: it runs for every API request (about 2 us, docs/api.md).
        now = self.clock()
        second = int(now)
        window_start = second - second % self.window_seconds
        if window_start != self.window_start:
            self.window_start, self.key_buckets, self.org_buckets = window_start, {}, {}
        reset = window_start + self.window_seconds - second
        key_bucket = org_bucket = None
        if self.per_key > 0:
            key_bucket = self.key_buckets.get(key_hash)
            if key_bucket is None:
                key_bucket = self.key_buckets[key_hash] = _Bucket("key:" + key_hash[:32], self.per_key)
        if self.per_org > 0:
            org_bucket = self.org_buckets.get(org_id)
            if org_bucket is None:
                org_bucket = self.org_buckets[org_id] = _Bucket("org:" + org_id, self.per_org)
        if key_bucket is None or (org_bucket is not None and org_bucket.left() < key_bucket.left()):
            tightest = org_bucket
        else:
            tightest = key_bucket
        left = tightest.left()
        admitted = force or left > 0
        if admitted:
            left -= 1
            if key_bucket is not None:
                key_bucket.pending += 1
            if org_bucket is not None:
                org_bucket.pending += 1
        if now >= self._next_sync and self._sync_task is None:
            self._next_sync = now + self.sync_seconds
            self._sync_task = asyncio.get_running_loop().create_task(self._sync())
        headers = [
            (b"ratelimit-limit", b"%d" % tightest.limit),
            (b"ratelimit-remaining", b"%d" % (left if left > 0 else 0)),
            (b"ratelimit-reset", b"%d" % reset),
        ]
        return admitted, headers, reset

    async def _sync(self) -> None:
        """Add this process's new hits to the shared counts and read back the totals."""
        window = self.window_start
        # Sorted: one lock order for every process (PostgreSQL row locks of a multi-row upsert).
        batch = sorted([*self.key_buckets.values(), *self.org_buckets.values()], key=lambda b: b.name)
        for bucket in batch:
            bucket.in_flight, bucket.pending = bucket.pending, 0
        try:
            # run_db: inline on SQLite, like the requests' own writes. In a thread, the sync held
            # SQLite's write lock while it waited for the GIL (5 ms switches on a busy event loop),
            # and every order of the process waited for the lock meanwhile.
            totals = await run_db(self.engine, self._write, window, [(b.name, b.in_flight) for b in batch])
        except Exception as exc:  # never fail a request over a counter: keep the hits for the next sync
            if isinstance(exc, ServiceUnavailable) or db.is_unavailable(exc):  # busy or away: no traceback
                log.warning("API rate-limit sync skipped, the database is unavailable (%s); retrying at the "
                            "next interval", type(exc).__name__)
            else:
                log.warning("API rate-limit sync failed; retrying at the next interval", exc_info=True)
            for bucket in batch:
                bucket.pending += bucket.in_flight
                bucket.in_flight = 0
        else:
            for bucket in batch:
                bucket.synced = max(bucket.synced, totals.get(bucket.name, 0))
                bucket.in_flight = 0
        finally:
            self._sync_task = None

    def _write(self, window: int, deltas: list[tuple[str, int]]) -> dict[str, int]:
        table = api_rate_limits
        totals: dict[str, int] = {}
        with db.write(self.engine) as conn:
            if conn.dialect.name == "postgresql":
                # Counters may be lost in a crash without harm: don't wait for the WAL flush.
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            if window != self._pruned_window:
                conn.execute(delete(table).where(table.c.window_start < window - self.window_seconds))
                self._pruned_window = window
            for i in range(0, len(deltas), SYNC_ROWS_PER_STATEMENT):
                insert = db.upsert_insert(conn)(table).values([
                    {"bucket": name, "window_start": window, "hits": delta}
                    for name, delta in deltas[i:i + SYNC_ROWS_PER_STATEMENT]])
                statement = insert.on_conflict_do_update(
                    index_elements=[table.c.bucket, table.c.window_start],
                    set_={"hits": table.c.hits + insert.excluded.hits},
                ).returning(table.c.bucket, table.c.hits)
                totals.update((row.bucket, row.hits) for row in conn.execute(statement))
        return totals


class ApiRateLimit:
    """ASGI middleware: 429 beyond a limit, RateLimit-* headers on every counted response."""

    def __init__(self, app, limiter: ApiRateLimiter, prefix: str):
        self.app = app
        self.limiter = limiter
        self.prefix = prefix

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.limiter.enabled or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        key_hash = _key_hash(scope["headers"])
        if key_hash is None:
            return await self.app(scope, receive, send)
        org_id = auth.verified_keys.get(key_hash)
        if org_id is not None:
            admitted, headers, reset = self.limiter.admit(key_hash, org_id)
            if not admitted:
                return await _too_many(headers, reset)(scope, receive, send)
        else:
            headers = None  # first request of this key here: counted once the endpoint verified it

        async def send_with_headers(message):
            nonlocal headers
            if message["type"] == "http.response.start":
                if headers is None:
                    verified_org = auth.verified_keys.get(key_hash)
                    if verified_org is not None:
                        headers = self.limiter.admit(key_hash, verified_org, force=True)[1]
                if headers:
                    message = {**message, "headers": [*message.get("headers", ()), *headers]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


def _key_hash(headers) -> str | None:
    """The hash auth.verify knows the request's key by (auth.bearer_key reads the header)."""
    for name, value in headers:
        if name == b"authorization":
            key = auth.bearer_key(value.decode("latin-1"))
            return auth.hash_key(key) if key is not None else None
    return None


def _too_many(headers: list, reset: int):
    limit = int(headers[0][1])
    response = json_response({"errors": {
        "message": f"Rate limit exceeded: at most {limit} requests per minute; retry in {reset} s",
        "payload": {},
    }}, status_code=429)
    response.headers["Retry-After"] = str(reset)
    for name, value in headers:
        response.headers[name.decode()] = value.decode()
    return response


def install(app, settings, engine, prefix: str) -> None:
    """Limit the API under `prefix` with the settings' limits (a limit of 0 is off)."""
    limiter = ApiRateLimiter(engine, per_key=settings.api_rate_limit_per_key, per_org=settings.api_rate_limit_per_org,
                             sync_seconds=settings.api_rate_limit_sync_seconds)
    app.state.api_rate_limiter = limiter
    app.add_middleware(ApiRateLimit, limiter=limiter, prefix=prefix)
