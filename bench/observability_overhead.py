"""What the observability middleware costs per request (docs/operations.md has the figures).

Calls an ASGI app that answers 200 at once, N times, bare and wrapped in
ops.middleware.ObservabilityMiddleware (request ID, one log line written to a file through
the JSON or text formatter with the logging set-up of `largesse serve`, the latency
histogram), and prints the difference in microseconds per request. The route is POST
/api/v2/orders's template, as on the hot path.
Run it once per metrics mode: the multiprocess mode (serve --workers N) writes to mmap files.

    python -m bench.observability_overhead [--requests 100000] [--format json|text] [--multiprocess]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time


class _Route:
    path = "/orders"


async def _bare(scope, receive, send):
    scope["route"] = _Route
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def _run(app, n: int) -> float:
    headers = [(b"authorization", b"Bearer x"), (b"content-type", b"application/json")]

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        return None

    started = time.perf_counter()
    for _ in range(n):
        scope = {"type": "http", "method": "POST", "path": "/api/v2/orders", "headers": headers}
        await app(scope, receive, send)
    return time.perf_counter() - started


def measure(n: int, log_format: str) -> None:
    import logging

    from largesse.ops import logs, metrics
    from largesse.ops.middleware import ObservabilityMiddleware

    # The set-up `largesse serve` installs (logs.log_config): one stream handler on the
    # "largesse" logger, which largesse.access propagates to; here its stream is a file.
    log_file = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    handler = logging.StreamHandler(log_file)
    handler.setFormatter(logs.formatter_class(log_format)())
    parent = logging.getLogger("largesse")
    parent.handlers[:] = [handler]
    parent.setLevel(logging.INFO)
    parent.propagate = False
    wrapped = ObservabilityMiddleware(_bare)

    async def main():
        await _run(_bare, 2000)
        await _run(wrapped, 2000)
        bare = min([await _run(_bare, n) for _ in range(3)])
        full = min([await _run(wrapped, n) for _ in range(3)])
        return bare, full

    bare, full = asyncio.run(main())
    mode = "multiprocess (mmap files)" if metrics.MULTIPROCESS else "single process"
    print(f"{log_format} logs, {mode} metrics: bare {bare / n * 1e6:.1f} us, with middleware {full / n * 1e6:.1f} us"
          f" -> overhead {(full - bare) / n * 1e6:.1f} us per request")
    os.unlink(log_file.name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--format", choices=("json", "text"), default="json")
    parser.add_argument("--multiprocess", action="store_true", help="PROMETHEUS_MULTIPROC_DIR mode")
    args = parser.parse_args()
    if args.multiprocess and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        with tempfile.TemporaryDirectory() as path:  # set before prometheus_client is imported
            env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": path}
            subprocess.run([sys.executable, "-m", "bench.observability_overhead", "--requests", str(args.requests),
                            "--format", args.format, "--multiprocess"], env=env, check=True)
        return
    measure(args.requests, args.format)


if __name__ == "__main__":
    main()
