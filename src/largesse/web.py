"""HTTP helpers shared by every endpoints module.

Responses are serialized with orjson straight to bytes: FastAPI's jsonable_encoder on a
plain dict costs as much as a whole order transaction (../shared/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as time_of_day
from typing import Annotated, Any, TypeVar

import anyio.to_thread
import orjson
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine
from starlette.responses import Response

from largesse.config import Settings
from largesse.errors import BadRequest


class JSONBytes(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_response(content: Any, status_code: int = 200) -> JSONBytes:
    return JSONBytes(content, status_code=status_code)


def get_engine(request: Request) -> Engine:
    return request.app.state.engine


# Dependencies are async on purpose: FastAPI runs a plain `def` dependency in the thread
# pool, a thread hop per dependency per request for what is an attribute lookup.
async def _engine_dep(request: Request) -> Engine:
    return request.app.state.engine


async def _settings_dep(request: Request) -> Settings:
    return request.app.state.settings


EngineDep = Annotated[Engine, Depends(_engine_dep)]
SettingsDep = Annotated[Settings, Depends(_settings_dep)]

T = TypeVar("T")


async def run_db(engine: Engine, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a request's database work: inline for SQLite; for PostgreSQL, on the event loop in
    a greenlet whose round trips await (db.on_loop), or in a worker thread when the app's
    lifespan did not start the engine's twin (db.loop_engine).

    SQLite calls take microseconds and its writers are serialized anyway, so handing them
    to a thread only buys GIL switching (about 0.2 ms a hop, measured as most of the
    per-order cost); PostgreSQL waits on the network, where awaiting gives concurrency
    without a thread hop (0.60 -> 0.49 ms of API CPU per order, docs/benchmarks.md).
    """
    if engine.dialect.name == "sqlite":
        return await _run_sqlite(engine, fn, *args, **kwargs)
    from largesse import db

    twin = db.on_this_loop(engine)
    if twin is not None:
        return await db.on_loop(twin, fn, *args, **kwargs)
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_limiter())


async def _run_sqlite(engine: Engine, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn inline; while SQLite's write lock is held elsewhere (another process: the delivery
    worker, a CLI command; this process's WAL checkpointer), await and run fn again instead of
    blocking the event loop in SQLite's busy handler (db.EventLoopAttempt). Gives up with a 503
    after the engine's lock wait.

    One request at a time polls the lock (every 0.5-4 ms); the others wait for it to succeed
    and then all run in the same turn of the event loop, in the order they came. (Handing the
    turn on one waiter per loop iteration, as an asyncio.Lock does, drained a queue of 16
    requests in 100-400 ms on a busy loop; newcomers wait behind the queue.)"""
    from largesse import db

    busy = _busy_state()
    kept = db.on_this_loop(engine)
    if busy.freed is None:
        result = _inline(fn, args, kwargs, kept)
        if result is not _BUSY:
            return result
    wait = db.lock_wait_seconds(engine)
    # A 503 means the lock was held elsewhere through a whole lock wait with no progress here:
    # the wait restarts whenever a request of this process got the lock meanwhile, so queueing
    # behind busy peers is never refused, and a lock stuck in another process is (after one wait).
    deadline = time.monotonic() + wait
    while True:
        poll = busy.freed
        if poll is not None:  # another request polls: wait until it got the lock (or gave up)
            # No timeout of its own (asyncio.wait_for costs a task per waiter): the poller's
            # wait is never longer than one lock wait, and this request's is checked below.
            await poll.done.wait()
            if not poll.gave_up:
                deadline = time.monotonic() + wait
            result = _inline(fn, args, kwargs, kept)
            if result is not _BUSY:
                return result
            if time.monotonic() > deadline:
                _unavailable()
            continue
        poll = busy.freed = _Poll()  # this request polls
        try:
            pause = 0.0005
            while (result := _inline(fn, args, kwargs, kept)) is _BUSY:
                if time.monotonic() > deadline:
                    poll.gave_up = True
                    _unavailable()
                await asyncio.sleep(pause)
                pause = min(0.004, pause * 2)
            return result
        finally:
            busy.freed = None
            poll.done.set()  # the waiters run now (or one of them polls in turn)


_BUSY = object()  # _inline's answer when SQLite's write lock is held elsewhere


def _inline(fn: Callable[..., T], args: tuple, kwargs: dict, kept):
    """One run of fn on the event loop (db.EventLoopAttempt; its transactions on the loop's
    kept connection, db.KeptConnection), or _BUSY if it could not take the write lock (nothing
    was written: the run may be repeated)."""
    from largesse import db

    with db.event_loop_attempt(kept):
        try:
            return fn(*args, **kwargs)
        except db.WriteLockBusy:
            return _BUSY


class _Poll:
    """One request polling SQLite's write lock; the others wait for `done`."""

    __slots__ = ("done", "gave_up")

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.gave_up = False  # it answered 503: no progress was made


def _unavailable():
    from largesse.errors import ServiceUnavailable

    raise ServiceUnavailable("The database is busy; retry shortly")


class _BusyState:
    __slots__ = ("freed",)

    def __init__(self) -> None:
        self.freed: _Poll | None = None  # set while a request polls SQLite's write lock


_busy_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _busy_state() -> _BusyState:
    loop = asyncio.get_running_loop()
    state = _busy_states.get(loop)
    if state is None:
        state = _busy_states[loop] = _BusyState()
    return state


async def read_db(engine: Engine, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(conn, *args, **kwargs) in a read transaction, through run_db; re-run in a new
    transaction after a lost connection, serialization failure or deadlock (db.retrying)."""
    from largesse import db

    def work():
        with db.read(engine) as conn:
            return fn(conn, *args, **kwargs)

    return await run_db(engine, db.retrying, work)


async def write_db(engine: Engine, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(conn, *args, **kwargs) in one write transaction (committed if fn returns), through run_db.

    PostgreSQL serialization failures and deadlocks (SQLSTATE 40001, 40P01), and a connection
    lost before COMMIT, re-run fn in a new transaction (db.retrying): fn must touch nothing
    but `conn`, so that running it again is the same as running it once.
    """
    from largesse import db

    def work():
        with db.write(engine) as conn:
            return fn(conn, *args, **kwargs)

    return await run_db(engine, db.retrying, work)


# How many requests of one process may run database work at once (PostgreSQL). Measured on
# 2 cores with worker threads: 4-8 concurrent transactions give 255 orders/s with a p99 of
# 90 ms, the thread pool's default of 40 gives 195/s and 290 ms: more threads only fight over
# the GIL, and an order's balance row lock is held while its thread waits for the GIL. This
# bounds the threads of an app whose lifespan did not start the engine's twin; a served
# process's requests await on the loop, bounded by its share of the server's database
# concurrency (Settings.db_slots, the twin's pool size).
DB_CONCURRENCY = 8
_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()  # one limiter per event loop (tests run several servers)
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(DB_CONCURRENCY)
    return limiter


MAX_OFFSET = 10**9


def int_param(request: Request, name: str, default: int, *, low: int, high: int | None = None) -> int:
    """Read an integer query parameter strictly: 400 for text, values below `low` or overflow;
    values above `high` are clamped to it (a client asking for 1000 rows gets the maximum)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        if not raw.isascii() or not raw.lstrip("-").isdigit():  # int() would take "1_0" and " 5"
            raise ValueError(raw)
        value = int(raw, 10)
    except ValueError:
        raise BadRequest(f"{name} must be an integer", {name: ["must be an integer"]}) from None
    if value < low:
        raise BadRequest(f"{name} must be >= {low}", {name: [f"must be >= {low}"]})
    if high is not None and value > high:
        return high  # however large: the document says it reads as the maximum
    if value > MAX_OFFSET:
        raise BadRequest(f"{name} is too large", {name: ["is too large"]})
    return value


M = TypeVar("M", bound=BaseModel)


def parse_json_body(model: type[M], raw: bytes) -> M:
    """Validate a JSON request body straight from its bytes (pydantic's parser, no json.loads);
    failures reach the same handler, and so the same 400 body, as FastAPI's own validation."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_context=False)) from None


def q_int(name: str, default: int, *, low: int, high: int | None = None) -> dict:
    """The OpenAPI declaration of a query parameter read by int_param (same bounds): the
    maximum is `high` (API.md's, e.g. 500 rows), though a larger value is read as it, not
    refused; without one, MAX_OFFSET, beyond which int_param answers 400."""
    schema: dict = {"type": "integer", "default": default, "minimum": low,
                    "maximum": MAX_OFFSET if high is None else high}
    text = f"default {default}"
    if high is not None:
        text += f"; above {high} reads as {high}"
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": text}


def q_str(name: str, description: str, *, required: bool = False, enum: tuple[str, ...] = ()) -> dict:
    schema: dict = {"type": "string", "enum": list(enum)} if enum else {"type": "string"}
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def q_time(name: str) -> dict:
    """A timestamp_param's declaration."""
    bound = "at or before (a bare date: the whole day)" if name.endswith("[lte]") else "at or after"
    return {"name": name, "in": "query", "required": False, "schema": {"type": "string"},
            "description": f"ISO 8601 date or date-time (any offset): {bound}"}


@dataclass(frozen=True)
class Paging:
    """A list's `offset` and `limit` (default `limit`, at most `high`): read from a request and
    declared in the OpenAPI document by one object, so the two cannot disagree."""

    limit: int
    high: int

    def read(self, request: Request) -> tuple[int, int]:
        """(offset, limit), by int_param's rules (400 for text or values below the minimum)."""
        return (int_param(request, "offset", 0, low=0),
                int_param(request, "limit", self.limit, low=1, high=self.high))

    def doc(self) -> list[dict]:
        return [q_int("offset", 0, low=0), q_int("limit", self.limit, low=1, high=self.high)]


def query_doc(*params: dict | list[dict]) -> dict:
    """openapi_extra declaring the query parameters that an endpoint reads itself (int_param,
    timestamp_param, request.query_params): generated clients and the /docs page see them."""
    flat: list[dict] = []
    for param in params:
        flat.extend(param if isinstance(param, list) else [param])
    return {"parameters": flat}


def json_body_doc(model: type[BaseModel]) -> dict:
    """openapi_extra documenting a body that the endpoint parses itself (see app.py's openapi)."""
    SELF_PARSED_BODIES.append(model)
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


# Models of bodies that endpoints parse themselves; app.py adds their schemas to the document.
SELF_PARSED_BODIES: list[type[BaseModel]] = []


def timestamp_param(request: Request, name: str):
    """An ISO 8601 date or date-time query parameter as naive UTC, or None; 400 otherwise.

    A bare date is the start of that day (UTC), except as an upper bound (`...[lte]`), where it
    takes the whole day in: `created_at[lte]=2026-11-24` includes what was made that day."""
    from largesse.timeutil import parse_timestamp

    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    clean_text(raw, name, max_length=64)
    try:
        value = parse_timestamp(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an ISO 8601 date or date-time", {name: ["is not a valid date"]}) from None
    if name.endswith("[lte]") and _is_date_alone(raw):
        value = datetime.combine(value.date(), time_of_day.max)
    return value


def _is_date_alone(raw: str) -> bool:
    """Whether the text names a day without a time of day, in any ISO 8601 form that
    parse_timestamp takes (2026-11-24, 20261124, 2026-W48-2)."""
    try:
        date.fromisoformat(raw.strip())
    except ValueError:
        return False
    return True


def clean_text(value: str, name: str, *, max_length: int = 1000) -> str:
    """Query/path text: refuse NUL (PostgreSQL cannot store it) and absurd lengths. The name
    (a custom-field label is a query parameter name) is echoed with control characters as '?'."""
    if "\x00" in value:
        name = echoable(name)
        raise BadRequest(f"{name} contains a NUL character", {name: ["contains a NUL character"]})
    if len(value) > max_length:
        name = echoable(name)
        raise BadRequest(f"{name} is too long", {name: [f"must be at most {max_length} characters"]})
    return value


def echoable(name: str) -> str:
    from largesse.paths import printable  # paths imports this module

    return printable(name)
