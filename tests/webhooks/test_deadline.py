"""Every webhook POST ends by one overall deadline, and reads a bounded answer."""

import time

import pytest

from largesse.delivery.worker import Worker
from largesse.webhooks import addresses, sender
from tests.webhooks.kit import Trickler, settle

TIMEOUT = 2.0


def _deliver_one(http, engine, settings, url: str) -> tuple[dict, float]:
    hook = http.post("/webhooks", json={"url": url}).json()["webhook"]
    assert http.post(f"/webhooks/{hook['id']}/simulate", json={"event": "ORDERS.CREATED"}).status_code == 200
    started = time.monotonic()
    Worker(engine, settings).drain()  # the first attempt only: the retry is not due yet
    elapsed = time.monotonic() - started
    log = http.get(f"/webhooks/{hook['id']}/deliveries").json()
    assert log["total_count"] == 1, log
    return log["deliveries"][0], elapsed


@pytest.mark.parametrize("head, tail", [
    # headers, then the body one byte at a time
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"x" * 100),
    # the status line, then the headers one byte at a time
    (b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"y" * 100 + b"\r\n\r\n"),
], ids=["trickled-body", "trickled-headers"])
def test_trickling_receiver_is_cut_off_at_the_deadline(http, engine, fast, head, tail):
    settings = fast(webhook_timeout_seconds=TIMEOUT, job_retry_base_seconds=60, job_retry_max_seconds=60)
    settle(engine, settings)
    trickler = Trickler(head, tail, interval=0.5)  # 50 s of trickle in all
    try:
        delivery, elapsed = _deliver_one(http, engine, settings, trickler.url)
    finally:
        trickler.close()
    assert trickler.requests == 1
    assert delivery["status"] == "FAILED" and delivery["will_retry"] is True, delivery
    assert "deadline" in delivery["error"]
    assert delivery["duration_ms"] < (TIMEOUT + 1.0) * 1000, delivery
    assert elapsed < TIMEOUT + 5, f"the worker was held {elapsed:.1f} s"


def test_response_is_read_up_to_the_cap():
    """A receiver answering a huge body: the attempt reads 64 KiB and stops."""
    size = 50 * 1024 * 1024
    trickler = Trickler(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"z" * (1024 * 1024), b"",
                        interval=0.01)
    try:
        target = addresses.parse(trickler.url)
        answer = sender.post(target, [target.literal], b"{}", {"Content-Type": "application/json"},
                             time.monotonic() + 5)
    finally:
        trickler.close()
    assert answer.status == 200 and answer.truncated
    assert len(answer.body) == sender.RESPONSE_CAP_BYTES


def test_connection_refused_is_a_temporary_failure(http, engine, fast):
    settings = fast(webhook_timeout_seconds=TIMEOUT, job_retry_base_seconds=60, job_retry_max_seconds=60)
    settle(engine, settings)
    trickler = Trickler(b"", b"")
    url = trickler.url
    trickler.close()  # nothing listens there any more
    delivery, _ = _deliver_one(http, engine, settings, url)
    assert delivery["status"] == "FAILED" and delivery["will_retry"] is True
    assert "cannot connect" in delivery["error"]


def test_redirects_are_not_followed(http, engine, fast, receiver):
    """A 3xx is a failed attempt; the Location (here another loopback receiver) gets nothing."""
    settings = fast(job_retry_base_seconds=60, job_retry_max_seconds=60)
    settle(engine, settings)
    redirect = (b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + receiver.url.encode()
                + b"\r\nContent-Length: 0\r\n\r\n")
    redirector = Trickler(redirect, b"")
    try:
        delivery, _ = _deliver_one(http, engine, settings, redirector.url)
    finally:
        redirector.close()
    assert delivery["status"] == "FAILED" and delivery["response_status"] == 307
    assert receiver.requests == []
