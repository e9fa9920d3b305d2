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
- when a wait ends and libpq has closed or replaced the socket (it closes it itself in result
  processing when it finds the connection lost);
- when the socket turns readable while nobody waits (the server closed an idle connection, or
  sent a notice): the next wait registers it again.
Waits with a timeout or for writing (large queries, pipelines, COPY) use psycopg's own wait.
"""

from __future__ import annotations

import asyncio

import psycopg
from psycopg import waiting

_INTERRUPTED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)


class KeptSocketConnection(psycopg.AsyncConnection):
    """An AsyncConnection whose reads wait on a reader kept registered with the event loop."""

    _kept_loop: asyncio.AbstractEventLoop | None = None
    _kept_fd = -1
    _kept_waiter: asyncio.Future | None = None

    async def wait(self, gen, interval=0.1, timeout=None):
        if timeout is not None:
            self._give_up()
            return await super().wait(gen, interval, timeout)
        try:
            state = next(gen)
        except StopIteration as done:
            return done.value
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
        if self._kept_loop is not loop or self._kept_fd != fd:
            self._give_up()
            loop.add_reader(fd, self._on_readable)
            self._kept_loop, self._kept_fd = loop, fd
        waiter = self._kept_waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._kept_waiter = None

    def _on_readable(self) -> None:
        waiter = self._kept_waiter
        if waiter is None:  # readable while nobody waits: EOF or a notice; no busy loop over it
            self._give_up()
        elif not waiter.done():
            waiter.set_result(None)

    def _check_socket(self) -> None:
        """Give the registration up if libpq closed or replaced the socket during the wait."""
        if self._kept_loop is None:
            return
        pgconn = self.pgconn
        if pgconn.status != psycopg.pq.ConnStatus.OK or _socket(pgconn) != self._kept_fd:
            self._give_up()

    def _give_up(self) -> None:
        loop, fd = self._kept_loop, self._kept_fd
        if loop is None:
            return
        self._kept_loop, self._kept_fd = None, -1
        if not loop.is_closed():
            loop.remove_reader(fd)


def _socket(pgconn) -> int:
    try:
        return pgconn.socket
    except psycopg.OperationalError:
        return -1


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
