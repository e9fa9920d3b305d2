"""One webhook POST with an overall deadline, to a pinned address, reading a bounded answer.

httpx's `timeout=10` bounds each socket operation, not the request: a receiver that sends
its headers and then one byte every few seconds holds the worker thread for as long as it
likes. Here every network operation (connect, TLS handshake, each write, each read) gets
the time *left* until one deadline, so the whole attempt, DNS included (addresses.resolve),
ends by then whatever the receiver does.

The connection goes to the address the guard checked (webhooks/addresses.py), never to a
fresh resolution of the name: the network backend below ignores the host httpcore asks for
and connects to the pinned address. The URL keeps the original host, so the Host header,
the TLS SNI and certificate verification are all about the hostname. No proxies from the
environment, no redirects (httpcore follows none), HTTP/1.1 only, one connection per attempt.
At most RESPONSE_CAP_BYTES of the answer are read; the rest is never received.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass

import httpcore

from largesse.webhooks.addresses import IPAddress, Target

RESPONSE_CAP_BYTES = 64 * 1024
_WRITE_CHUNK = 16 * 1024
_ssl_context: ssl.SSLContext | None = None


class SendFailed(Exception):
    """The attempt did not produce a complete answer (a temporary failure)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most RESPONSE_CAP_BYTES
    truncated: bool


class _DeadlineStream(httpcore.NetworkStream):
    """Passes each operation the time left until the deadline (never more)."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float):
        self.inner = inner
        self.deadline = deadline

    def _left(self, timeout_error: type[Exception]) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise timeout_error("the delivery deadline passed")
        return left

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._left(httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), _WRITE_CHUNK):
            self.inner.write(buffer[start:start + _WRITE_CHUNK], self._left(httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        # The handshake as a whole is bounded by the socket timeout (CPython's ssl module).
        upgraded = self.inner.start_tls(ssl_context, server_hostname, self._left(httpcore.ConnectTimeout))
        return _DeadlineStream(upgraded, self.deadline)

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked addresses (the first that accepts, in resolver order), whatever
    host the request names."""

    def __init__(self, addresses: list[IPAddress], deadline: float):
        self.addresses = [str(a) for a in addresses]
        self.deadline = deadline
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options=None) -> httpcore.NetworkStream:
        error: Exception = httpcore.ConnectError("no address to connect to")
        for address in self.addresses:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ConnectTimeout("the delivery deadline passed")
            try:
                stream = self.inner.connect_tcp(address, port, timeout=left, socket_options=socket_options)
            except httpcore.ConnectError as exc:  # e.g. ::1 refused, 127.0.0.1 listening: try the next
                error = exc
                continue
            return _DeadlineStream(stream, self.deadline)
        raise error

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise httpcore.ConnectError("webhooks are never sent to a unix socket")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _tls() -> ssl.SSLContext:
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = ssl.create_default_context()  # verifies the certificate against the hostname
    return _ssl_context


def post(target: Target, addresses: list[IPAddress], body: bytes, headers: dict[str, str],
         deadline: float) -> Answer:
    """POST body to target through one of the (checked) addresses; the answer, or SendFailed."""
    header_list = [(b"Host", target.host_header.encode("ascii")), (b"Content-Length", str(len(body)).encode())]
    header_list += [(name.encode("ascii"), value.encode("latin-1")) for name, value in headers.items()]
    url = httpcore.URL(scheme=target.scheme, host=target.host, port=target.port, target=target.path)
    left = max(0.001, deadline - time.monotonic())
    timeouts = {"connect": left, "read": left, "write": left, "pool": left}
    try:
        with httpcore.ConnectionPool(ssl_context=_tls(), network_backend=_PinnedBackend(addresses, deadline),
                                     max_connections=1, retries=0) as pool:
            with pool.stream("POST", url, headers=header_list, content=body,
                             extensions={"timeout": timeouts}) as response:
                chunks, size, truncated = [], 0, False
                for chunk in response.iter_stream():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size >= RESPONSE_CAP_BYTES:
                        truncated = True
                        break
                return Answer(response.status, b"".join(chunks)[:RESPONSE_CAP_BYTES], truncated)
    except httpcore.TimeoutException:
        raise SendFailed("no complete answer before the delivery deadline") from None
    except httpcore.ConnectError as exc:
        where = ", ".join(str(a) for a in addresses)
        raise SendFailed(f"cannot connect to {where} port {target.port}: {exc or 'refused'}") from None
    except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.UnsupportedProtocol) as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
    except (OSError, ValueError) as exc:  # e.g. TLS failures surfacing outside httpcore's mapping
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
