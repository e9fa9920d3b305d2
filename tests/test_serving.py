"""The event loop of `largesse serve` (ops/serving.py): a process alone on its socket accepts a
burst of connections at once, however long the turns of its loop are; a shared socket keeps
uvloop's own server. `largesse serve` itself runs on it in tests/test_observability.py (one
process, and --workers 2)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from largesse.ops import serving
from tests.conftest import run_in_new_loop

pytestmark = pytest.mark.skipif(serving.uvloop is None, reason="uvloop is not installed")

BURST = 60
TURN_SECONDS = 0.01


class Counting(asyncio.Protocol):
    """Counts connections made and answers each received chunk with b"ok"."""

    made: list = []

    def connection_made(self, transport):
        self.transport = transport
        Counting.made.append(transport)

    def data_received(self, data):
        self.transport.write(b"ok")


async def _busy_turns(seconds: float) -> None:
    """Let the loop run for `seconds`, every turn of it spending TURN_SECONDS on the CPU, as a
    loaded API process's turns do (each runs the requests of all its connections)."""
    loop = asyncio.get_running_loop()

    def burn():
        time.sleep(TURN_SECONDS)
        handle[0] = loop.call_soon(burn)

    handle = [loop.call_soon(burn)]
    await asyncio.sleep(seconds)
    handle[0].cancel()


async def _answered(client: socket.socket) -> bytes:
    client.sendall(b"ping")
    await asyncio.sleep(0.05)
    client.settimeout(5)
    return client.recv(2)


async def _close(clients: list[socket.socket]) -> None:
    for client in clients:
        client.close()
    for transport in Counting.made:
        transport.close()
    await asyncio.sleep(0)


def test_a_lone_process_accepts_a_burst_of_connections_in_one_turn():
    run_in_new_loop(_lone_process_burst(), loop_factory=serving.new_event_loop)


async def _lone_process_burst():
    Counting.made = []
    clients = []
    try:
        server = await asyncio.get_running_loop().create_server(Counting, "127.0.0.1", 0, backlog=128)
        assert isinstance(server, serving.Listener)
        port = server.sockets[0].getsockname()[1]
        for _ in range(BURST):  # the kernel completes each handshake; they wait to be accepted
            clients.append(socket.create_connection(("127.0.0.1", port)))
        # Turns of 10 ms until the first accept (a loaded test machine may not give the loop
        # its first turns at once): the turn that accepts takes the whole burst, where libuv's
        # own server accepts one connection per turn (1 or 2 of 60 here).
        deadline = time.monotonic() + 10
        while not Counting.made and time.monotonic() < deadline:
            await _busy_turns(TURN_SECONDS)
        assert len(Counting.made) == BURST

        # Every accepted connection is served: a request on the last one is answered.
        assert await _answered(clients[-1]) == b"ok"

        server.close()
        await server.wait_closed()
        assert not server.is_serving()
        with pytest.raises(OSError):  # nothing listens any more
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        await _close(clients)


def test_a_shared_socket_keeps_uvloops_own_server():
    """uvicorn's --workers processes share one listening socket: there the accept of one
    connection per turn spreads a burst among them, so it stays."""
    run_in_new_loop(_shared_socket(), loop_factory=serving.new_event_loop)


async def _shared_socket():
    Counting.made = []
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)
    clients = []
    try:
        server = await asyncio.get_running_loop().create_server(Counting, sock=listening, backlog=128)
        assert not isinstance(server, serving.Listener)
        clients.append(socket.create_connection(listening.getsockname()))
        assert await _answered(clients[0]) == b"ok"
        server.close()
    finally:
        await _close(clients)
