"""The event loop of `largesse serve` (ops/serving.py): a process alone on its socket accepts a
burst of connections at once, however long the turns of its loop are; a shared socket keeps
uvloop's own server. `largesse serve` itself runs on it in tests/test_observability.py (one
process, and --workers 2)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time

import pytest

from largesse.ops import serving

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


def _busy_turns(loop, seconds: float) -> None:
    """Run the loop for `seconds`, every turn of it spending TURN_SECONDS on the CPU, as a
    loaded API process's turns do (each runs the requests of all its connections)."""

    def burn():
        time.sleep(TURN_SECONDS)
        handle[0] = loop.call_soon(burn)

    handle = [loop.call_soon(burn)]
    loop.run_until_complete(asyncio.sleep(seconds))
    handle[0].cancel()


def _connect_burst(port: int) -> list[socket.socket]:
    clients = []
    for _ in range(BURST):  # the kernel completes each handshake; they wait to be accepted
        client = socket.create_connection(("127.0.0.1", port))
        clients.append(client)
    return clients


def _in_own_thread(fn):
    """fn() in a thread of its own (another test may have left an event loop running in this one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result(timeout=60)


def test_a_lone_process_accepts_a_burst_of_connections_in_one_turn():
    _in_own_thread(_lone_process_burst)


def _lone_process_burst():
    loop = serving.new_event_loop()
    Counting.made = []
    clients = []
    try:
        server = loop.run_until_complete(loop.create_server(Counting, "127.0.0.1", 0, backlog=128))
        assert isinstance(server, serving.Listener)
        port = server.sockets[0].getsockname()[1]
        clients = _connect_burst(port)
        # 5 turns of 10 ms: libuv's own server accepts one connection per turn (5 of 60).
        _busy_turns(loop, 5 * TURN_SECONDS)
        assert len(Counting.made) == BURST

        # Every accepted connection is served: a request on the last one is answered.
        clients[-1].sendall(b"ping")
        loop.run_until_complete(asyncio.sleep(0.05))
        clients[-1].settimeout(5)
        assert clients[-1].recv(2) == b"ok"

        server.close()
        loop.run_until_complete(server.wait_closed())
        assert not server.is_serving()
        with pytest.raises(OSError):  # nothing listens any more
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        for client in clients:
            client.close()
        for transport in Counting.made:
            transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_a_shared_socket_keeps_uvloops_own_server():
    """uvicorn's --workers processes share one listening socket: there the accept of one
    connection per turn spreads a burst among them, so it stays."""
    _in_own_thread(_shared_socket)


def _shared_socket():
    loop = serving.new_event_loop()
    Counting.made = []
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)
    client = None
    try:
        server = loop.run_until_complete(loop.create_server(Counting, sock=listening, backlog=128))
        assert not isinstance(server, serving.Listener)
        client = socket.create_connection(listening.getsockname())
        client.sendall(b"ping")
        loop.run_until_complete(asyncio.sleep(0.05))
        client.settimeout(5)
        assert client.recv(2) == b"ok"
        server.close()
    finally:
        if client is not None:
            client.close()
        for transport in Counting.made:
            transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
