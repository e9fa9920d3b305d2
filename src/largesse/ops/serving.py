"""The event loop of `largesse serve`'s API processes: uvloop's, except that a process which has
its listening socket to itself accepts every pending connection at each turn of the loop.

Why. libuv (1.45 and later, in uvloop 0.18 and later) accepts one connection per turn, so that
processes sharing a listening socket take turns. A process alone on its socket only loses by
it: under load each turn runs the requests of every connection it already holds (25-35 ms at
64 connections on SQLite), and new connections wait in the kernel's queue one turn each.
Measured with 64 connections opened at once against one busy process: the last was accepted
270-410 ms after it connected, its first request answered after up to 560 ms while every
other request took at most 95 ms (docs/benchmarks.md, eighth pass). That was the p99 of the
bench at 64 connections, and what any client that opens connections in a burst (a restart, a
pool refilled, no keep-alive) meets.

What. `uvicorn.run(loop="largesse.ops.serving:new_event_loop")` (cli.serve). create_server for a
host and port (the socket is this process's own: `serve --workers 1`) listens itself and accepts
up to ACCEPT_BATCH connections per turn, as asyncio's own loop does; each is handed to uvloop
(connect_accepted_socket) and served as before. Sockets passed in (uvicorn's `--workers N`
processes share one) and TLS keep uvloop's own server: there one accept per turn spreads a
burst among the processes, which is the point of it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket

log = logging.getLogger("largesse")

ACCEPT_BATCH = 128  # connections accepted per turn of the loop, at most
ACCEPT_RETRY_SECONDS = 1.0  # after running out of file descriptors (as asyncio does)

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard] on every supported platform
    uvloop = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory for `largesse serve`."""
    if uvloop is None:  # pragma: no cover
        return asyncio.new_event_loop()
    return Loop()


if uvloop is not None:
    class Loop(uvloop.Loop):
        """uvloop's loop; create_server accepts greedily when the socket is its own (see above)."""

        async def create_server(self, protocol_factory, host=None, port=None, *, sock=None, ssl=None,
                                backlog=100, start_serving=True, **kwargs):
            own_socket = sock is None and ssl is None
            server = await super().create_server(protocol_factory, host, port, sock=sock, ssl=ssl, backlog=backlog,
                                                 start_serving=start_serving and not own_socket, **kwargs)
            if not own_socket:
                return server
            # uvloop resolved and bound the addresses; its handles have not listened yet. The
            # listening sockets go on as duplicates of its descriptors, and its server is closed.
            sockets = [socket.socket(fileno=os.dup(pseudo.fileno())) for pseudo in server.sockets]
            server.close()
            listener = Listener(self, sockets, protocol_factory, backlog)
            if start_serving:
                await listener.start_serving()
            return listener


class Listener(asyncio.AbstractServer):
    """Listening sockets whose pending connections are all accepted at each turn (up to
    ACCEPT_BATCH), each served by the loop's transport for an accepted socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sockets: list[socket.socket], protocol_factory,
                 backlog: int) -> None:
        self._loop = loop
        self._sockets = sockets
        self._protocol_factory = protocol_factory
        self._backlog = backlog
        self._serving = False
        self._closed = False
        for sock in sockets:
            sock.setblocking(False)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        if self._serving or self._closed:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def serve_forever(self) -> None:
        await self.start_serving()
        await asyncio.Future()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._serving = False
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()

    async def wait_closed(self) -> None:
        return None

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors or memory: stop accepting for a moment; the kernel keeps
                    # the connections queued meanwhile (asyncio's own answer).
                    log.error("accepting connections paused for %.0f s: %s", ACCEPT_RETRY_SECONDS, exc)
                    self._loop.remove_reader(sock.fileno())
                    self._loop.call_later(ACCEPT_RETRY_SECONDS, self._resume, sock)
                    return
                raise
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._loop.create_task(self._serve(conn))

    def _resume(self, sock: socket.socket) -> None:
        if self._serving:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._protocol_factory, conn)
        except Exception as exc:  # the protocol could not be set up: this connection only
            log.warning("connection dropped before its first request: %s", exc)
            conn.close()
