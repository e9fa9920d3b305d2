"""psycopg connections for a PostgreSQL engine's asyncio twin (db.loop_engine) whose socket
stays registered with the event loop between waits.

Why. psycopg's own wait (psycopg.waiting.wait_async) registers the socket with the loop for
each wait and unregisters it after: under uvloop an add_reader and a remove_reader each, which
create and close a libuv poll handle, 12 epoll_ctl system calls per order (half of them failing
with EEXIST). Measured, 2 API processes, delivery off, alternating: 1,342-1,383 against
1,252-1,310 orders/s, 0.83-0.85 against 0.91-0.94 ms of API CPU per order (docs/benchmarks.md,
seventh and eighth passes).

The registration's life. A descriptor closed while registered can be handed to the next
socket opened, and a stale libuv watcher for that number would leave a request waiting forever
or make libuv abort. So the registration is given up, always on the loop's thread and before
anything else can run on it:
- before `close()`;
- after any error or interruption of a wait, before psycopg takes over (on a cancelled query
  psycopg's own wait sends the cancel request and drains the connection, as before);
- when a wait ends, or sending a query fails, and libpq has closed or replaced the socket (it
  closes it itself when it finds the connection lost), or the loop has dropped the reader (below);
- when the socket turns readable while nobody waits (the server closed an idle connection, or
  sent a notice): the next wait registers it again.
Waits with a timeout or for writing (large queries, pipelines, COPY) use psycopg's own wait.

The loop may also give the registration up by itself. uvloop does when the socket reports an
error (POLLERR: the server reset the connection, e.g. a backend terminated while this side sent a
query): libuv stops the watcher and reports UV_EBADF, and uvloop calls the reader once more and
closes its handle, silently. The data before the reset (PostgreSQL's FATAL message) is read on
that call, and the next wait of the same query - for the ReadyForQuery that never comes, or the
EOF after it - would have waited forever on a registration that was gone, the socket readable
and nobody told (an audit's `pg_terminate_backend` under load: 1-3 requests a round stranded,
each holding a slot of db.on_loop and a pooled connection until SIGTERM). So the reader is
registered with an argument of its own, which only the loop's handle references: a weak
reference to it tells, at no system call's cost, whether the loop still holds the reader. A wait
that finds it gone registers afresh (uvloop's closed handle is removed first: adding a reader on
top of it would raise), and a wait that ends with it gone gives it up (so no closed handle is left
in uvloop under a descriptor number that the next socket may get).

And a bound, in case a loop loses a registration some other way: while a connection holds one,
a timer checks it every WATCH_INTERVAL seconds. A wait that was already under way at the previous
check, on a socket that a zero-timeout poll finds ready, missed its wake-up: the registration is
given up and the wait woken (the next one registers afresh). A slow query's socket is not ready,
so it is left waiting, however long; a spurious wake-up only makes libpq read nothing and wait
again. The timer is the connection's, not the wait's: nothing of this runs per wait.
"""

from __future__ import annotations

import asyncio
import select
import weakref

import psycopg
from psycopg import waiting

_INTERRUPTED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)

WATCH_INTERVAL = 1.0  # seconds between two checks of a kept registration (_watch)


class _Registration:
    """The argument a kept reader is registered with: alive while the loop holds the reader."""

    __slots__ = ("__weakref__",)


def _gone() -> None:
    return None


class KeptSocketConnection(psycopg.AsyncConnection):
    """An AsyncConnection whose reads wait on a reader kept registered with the event loop."""

    _kept_loop: asyncio.AbstractEventLoop | None = None
    _kept_fd = -1
    _kept_waiter: asyncio.Future | None = None
    _kept_alive = staticmethod(_gone)  # a weak reference to the _Registration while registered
    _kept_watch: asyncio.TimerHandle | None = None
    _kept_watched: asyncio.Future | None = None  # the wait under way at the previous check

    async def wait(self, gen, interval=0.1, timeout=None):
        if timeout is not None:
            self._give_up()
            return await super().wait(gen, interval, timeout)
        try:
            state = next(gen)
        except StopIteration as done:
            return done.value
        except BaseException:
            self._check_socket()  # sending the query, libpq may have found the connection lost
            raise
        try:
            while state == waiting.WAIT_R:
                await self._readable()
                state = gen.send(waiting.READY_R)
        except StopIteration as done:
            self._check_socket()
            return done.value
        except _INTERRUPTED as interruption:
            self._give_up()
            # psycopg's wait, handed the generator where it stands, cancels the query on the
            # server, drains the connection and raises the interruption again.
            return await super().wait(_Resumed(gen, state, interruption), interval)
        except OSError as exc:
            self._give_up()
            raise psycopg.OperationalError("connection socket closed") from exc
        except BaseException:
            self._give_up()
            raise
        # A write to wait for: psycopg's own wait from here.
        self._give_up()
        return await super().wait(_Resumed(gen, state), interval)

    async def close(self) -> None:
        self._give_up()
        await super().close()

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        fd = self.pgconn.socket  # raises OperationalError if libpq has no socket any more
        if self._kept_loop is not loop or self._kept_fd != fd or self._kept_alive() is None:
            self._give_up()  # also removes a reader the loop dropped by itself (its closed handle)
            self._register(loop, fd)
        waiter = self._kept_waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._kept_waiter = None

    def _register(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        registration = _Registration()  # referenced by the loop's handle only
        loop.add_reader(fd, self._on_readable, registration)
        self._kept_loop, self._kept_fd, self._kept_alive = loop, fd, weakref.ref(registration)
        self._kept_watched = None
        self._kept_watch = loop.call_later(WATCH_INTERVAL, self._watch)

    def _on_readable(self, _registration: _Registration) -> None:
        waiter = self._kept_waiter
        if waiter is None:  # readable while nobody waits: EOF or a notice; no busy loop over it
            self._give_up()
        elif not waiter.done():
            waiter.set_result(None)

    def _watch(self) -> None:
        """The bound (module docstring): wake a wait that its registration failed to wake."""
        loop = self._kept_loop
        if loop is None:
            return
        waiter = self._kept_waiter
        if waiter is not None and waiter is self._kept_watched and not waiter.done() \
                and _ready(self._kept_fd):
            self._give_up()
            waiter.set_result(None)
            return
        self._kept_watched = waiter
        self._kept_watch = loop.call_later(WATCH_INTERVAL, self._watch)

    def _check_socket(self) -> None:
        """Give the registration up if libpq closed or replaced the socket during the wait, or
        if the loop dropped it."""
        if self._kept_loop is None:
            return
        pgconn = self.pgconn
        if pgconn.status != psycopg.pq.ConnStatus.OK or _socket(pgconn) != self._kept_fd \
                or self._kept_alive() is None:
            self._give_up()

    def _give_up(self) -> None:
        loop, fd, watch = self._kept_loop, self._kept_fd, self._kept_watch
        if loop is None:
            return
        self._kept_loop, self._kept_fd, self._kept_alive = None, -1, _gone
        self._kept_watch = self._kept_watched = None
        if not loop.is_closed():
            if watch is not None:
                watch.cancel()
            loop.remove_reader(fd)


def _socket(pgconn) -> int:
    try:
        return pgconn.socket
    except psycopg.OperationalError:
        return -1


def _ready(fd: int) -> bool:
    """Whether the socket has something to read, or an error or hang-up, now (no waiting)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _Resumed:
    """A psycopg generator handed to psycopg's own wait where it stands: its first step answers
    the state it waits for (or raises `interruption`, so that the wait cancels the query), the
    next ones go on with it."""

    __slots__ = ("_gen", "_state", "_interruption")

    def __init__(self, gen, state, interruption: BaseException | None = None) -> None:
        self._gen, self._state, self._interruption = gen, state, interruption

    def __iter__(self):
        return self

    def __next__(self):
        if self._interruption is not None:
            interruption, self._interruption = self._interruption, None
            raise interruption
        if self._state is not None:
            state, self._state = self._state, None
            return state
        return next(self._gen)

    def send(self, value):
        return self._gen.send(value)
