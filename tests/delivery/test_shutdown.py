"""SIGTERM is graceful, for `largesse worker` and `largesse serve` (real processes).

The worker finishes the email in hand of each thread, hands the unstarted rest of its batch
back (queued, attempt uncounted) and exits 0; the server stops accepting connections, answers
the request in flight, then stops its worker the same way. Nothing acknowledged is lost,
nothing runs twice: after another worker drains the queue, every reward was sent exactly once.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time

import httpx

from largesse.delivery.jobs import MAIL
from largesse.delivery.worker import BATCH, Worker
from tests.delivery.conftest import tagged
from tests.delivery.procs import (
    Smtp,
    StallHandler,
    delivery_statuses,
    env_for,
    job_states,
    start_serve,
    start_worker,
    wait_until,
)
from tests.delivery.test_recovery import order, settle


def _finish_and_check(engine, fast, smtp: Smtp, ids: list[str], addresses: list[str]) -> None:
    """No job is left running; another worker delivers the rest; each email went out once."""
    assert not [j for j in job_states(engine, ids) if j.status == "running"]
    smtp.handler.stall = 0
    Worker(engine, fast(smtp_url=smtp.url)).drain()
    assert set(delivery_statuses(engine, ids).values()) == {"SUCCEEDED"}
    assert [len(smtp.handler.to(a)) for a in addresses] == [1] * len(addresses)
    assert {(j.status, j.attempts) for j in job_states(engine, ids)} == {("done", 1)}  # none ran twice


def test_sigterm_worker_finishes_jobs_in_hand_and_hands_back_the_rest(org, http, engine, database_url, fast,
                                                                      tmp_path):
    slow = Smtp(StallHandler("slow", stall=3))
    proc = None
    try:
        settle(engine, fast, slow.url)
        proc = start_worker(env_for(database_url, slow.url), tmp_path / "worker.log")
        addresses = [tagged(org.member_email, f"slow{i}") for i in range(BATCH[MAIL] + 3)]  # a batch per thread
        ids = order(http, addresses)
        wait_until(lambda: slow.handler.stalled == 2, 30, message="the worker's two email threads did not start")
        stopped = time.monotonic()
        assert proc.terminate(timeout=30) == 0, proc.text()
        print(f"\nSHUTDOWN worker: exited {time.monotonic() - stopped:.1f} s after SIGTERM")
        states = job_states(engine, ids)
        assert sorted((j.status, j.attempts, j.locked_by) for j in states) == \
            [("done", 1, None)] * 2 + [("queued", 0, None)] * (len(ids) - 2), states
        assert sorted(delivery_statuses(engine, ids).values()) == ["PENDING"] * (len(ids) - 2) + ["SUCCEEDED"] * 2
        # Its two email jobs, plus whatever else of the shared test database fell due meanwhile
        # (the periodic expiry sweep, another test's leftover): the job states above are exact.
        processed = int(re.search(r"processed (\d+) jobs", proc.text()).group(1))
        assert processed >= 2, proc.text()
        _finish_and_check(engine, fast, slow, ids, addresses)
    finally:
        if proc is not None:
            proc.kill()
        slow.stop()


def test_sigterm_serve_answers_the_request_in_flight_then_stops_its_worker(org, engine, database_url, fast,
                                                                          tmp_path):
    slow = Smtp(StallHandler("slow", stall=3))
    proc = None
    try:
        settle(engine, fast, slow.url)
        proc, base = start_serve(env_for(database_url, slow.url), tmp_path / "serve.log")
        port = int(base.rsplit(":", 1)[1])
        with httpx.Client(base_url=f"{base}/api/v2", timeout=30,
                          headers={"Authorization": f"Bearer {org.api_key}"}) as client:
            addresses = [tagged(org.member_email, f"slow{i}") for i in range(4)]
            ids = order(client, addresses)
        wait_until(lambda: slow.handler.stalled >= 1, 30, message="the server's worker did not start sending")

        # A request in flight: its headers and half of its body are sent before the SIGTERM.
        late = tagged(org.member_email, "late")
        body = json.dumps({"payment": {"funding_source_id": "balance"}, "reward": {
            "value": {"denomination": 5}, "recipient": {"name": "Late", "email": late},
            "delivery": {"method": "EMAIL"}, "products": ["PGCNWBOOKS01US"]}}).encode()
        head = (f"POST /api/v2/orders HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {org.api_key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        conn = socket.create_connection(("127.0.0.1", port), timeout=30)
        conn.sendall(head + body[:20])
        time.sleep(0.5)
        proc.popen.send_signal(signal.SIGTERM)

        def refused() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return False
            except OSError:
                return True

        wait_until(refused, 10, message="the server still accepts connections after SIGTERM")
        conn.sendall(body[20:])
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            chunk = conn.recv(65536)
            assert chunk, f"connection closed before the answer was complete: {answer!r}\n{proc.text()}"
            answer += chunk
        conn.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        late_id = json.loads(answer.split(b"\r\n\r\n", 1)[1])["order"]["rewards"][0]["id"]
        assert proc.popen.wait(60) in (0, -signal.SIGTERM), proc.text()  # uvicorn re-raises SIGTERM when done
        assert "Application shutdown complete" in proc.text()
        _finish_and_check(engine, fast, slow, [*ids, late_id], [*addresses, late])
    finally:
        if proc is not None:
            proc.kill()
        slow.stop()


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 1 << 30
