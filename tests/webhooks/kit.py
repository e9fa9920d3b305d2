"""Webhook test kit: a loopback HTTP receiver, and settling the shared queue."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A loopback HTTP server that records POSTs; answers `status` (a list consumed in order).
    `on_request(path)`, when set, runs before each answer (while the sender waits for it)."""

    def __init__(self, statuses=(), default: int = 200):
        self.requests: list[tuple[dict, bytes]] = []
        self.paths: list[str] = []
        self.statuses = list(statuses)
        self.default = default
        self.on_request = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                receiver.paths.append(self.path)
                if receiver.on_request is not None:
                    receiver.on_request(self.path)
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else receiver.default)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def events(self, name: str) -> list[dict]:
        return [json.loads(body) for _, body in self.requests if json.loads(body)["event"] == name]


def settle(engine, settings) -> None:
    """Deliver what earlier tests left in the shared queue, so the timed waits below measure
    only this test's jobs (at the end of a full run there are hundreds of them)."""
    from largesse.delivery.worker import Worker

    for _ in range(100):
        if Worker(engine, settings).drain() == 0:
            return


class Trickler:
    """A loopback server that reads a request, then answers `head` and trickles `tail` one byte
    every `interval` seconds: a receiver that would hold a per-read timeout forever."""

    def __init__(self, head: bytes, tail: bytes, interval: float = 0.5):
        self.head, self.tail, self.interval = head, tail, interval
        self.stop = threading.Event()
        self.requests = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/slow"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                self.requests += 1
                conn.sendall(self.head)
                for byte in self.tail:
                    if self.stop.wait(self.interval):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
