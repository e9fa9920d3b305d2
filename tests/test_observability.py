"""What an operator watches (docs/operations.md): request IDs, log lines, /metrics, /readyz.

Log lines are read from a real `largesse serve` process's output; metrics are scraped over
HTTP, from the shared test server and from `largesse serve --workers 2`.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from largesse import db
from largesse.bootstrap import prepare
from largesse.config import Settings
from largesse.ops import logs
from tests.conftest import ServerThread, free_port, order_body

LARGESSE = str(Path(sys.executable).parent / "largesse")
GENERATED_ID = re.compile(r"[0-9a-f]{24}")


def _serve(tmp_path: Path, *args: str, env: dict | None = None):
    """Start `largesse serve` on a fresh SQLite database; returns (process, base URL, log path, org JSON)."""
    env = {**os.environ, "LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'obs.sqlite3'}",
           "LARGESSE_MAIL_DIR": str(tmp_path / "mail"), "LARGESSE_RUN_WORKER": "0", **(env or {})}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    created = subprocess.run([LARGESSE, "org", "create", "--name", "Obs", "--member-email", "jane.doe@example.com",
                              "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as out:
        process = subprocess.Popen([LARGESSE, "serve", "--port", str(port), *args], env=env, cwd=tmp_path,
                                   stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, log_path.read_text()
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "largesse serve did not start"
        time.sleep(0.1)
    return process, base, log_path, json.loads(created.stdout)


def _stop(process) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def test_one_json_log_line_per_request_without_secrets(tmp_path):
    process, base, log_path, org = _serve(tmp_path, env={"LARGESSE_LOG_FORMAT": "json"})
    key, email = org["api_key"], "jane.doe@example.com"
    auth = {"Authorization": f"Bearer {key}"}
    sent = []
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            created = client.post("/api/v2/orders", headers={**auth, "X-Request-ID": "trace-abc_123"},
                                  json=order_body(email, denomination=5, method="LINK"))
            assert created.status_code == 200, created.text
            assert created.headers["X-Request-ID"] == "trace-abc_123"
            sent.append(("trace-abc_123", "POST", "/api/v2/orders", 200))
            link = created.json()["order"]["rewards"][0]["delivery"]["link"]
            token = link.rsplit("/", 1)[1]

            page = client.get(f"/redeem/{token}", headers={"X-Request-ID": "has spaces and ümlauts".encode()})
            assert page.status_code == 200
            assert GENERATED_ID.fullmatch(page.headers["X-Request-ID"])  # not sane: replaced
            sent.append((page.headers["X-Request-ID"], "GET", "/redeem/<token>", 200))

            for typed in (f"/REDEEM/{token}", f"/Redeem/{token}/x", f"/dashboard/signin/link/{token}"):
                # hand-typed: a 404, but the token in it is the real one (it was logged as typed)
                mistyped = client.get(typed)
                assert mistyped.status_code == 404
                prefix = "/dashboard/signin/link/" if "signin" in typed else typed[:8]
                sent.append((mistyped.headers["X-Request-ID"], "GET", prefix + "<token>", 404))

            download = client.get("/reports/download/" + "ab" * 32)  # a report link's token is a secret too
            assert download.status_code == 404
            sent.append((download.headers["X-Request-ID"], "GET", "/reports/download/<token>", 404))

            too_long = client.get("/healthz", headers={"X-Request-ID": "a" * 200})
            assert GENERATED_ID.fullmatch(too_long.headers["X-Request-ID"])
            sent.append((too_long.headers["X-Request-ID"], "GET", "/healthz", 200))

            bad_key = client.get("/api/v2/orders", headers={"Authorization": "Bearer LRG_SANDBOX_not-a-real-key-1234"})
            assert bad_key.status_code == 401 and bad_key.headers["X-Request-ID"]
            sent.append((bad_key.headers["X-Request-ID"], "GET", "/api/v2/orders", 401))

            by_email = client.get(f"/api/v2/orders/{email}", headers=auth)  # an external_id that is an address
            assert by_email.status_code in (400, 404) and by_email.headers["X-Request-ID"]
            sent.append((by_email.headers["X-Request-ID"], "GET", None, by_email.status_code))

            unknown = client.get("/no/such/route")
            assert unknown.status_code == 404 and unknown.headers["X-Request-ID"]
            sent.append((unknown.headers["X-Request-ID"], "GET", "/no/such/route", 404))
    finally:
        _stop(process)

    text = log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    ids = {rid for rid, *_ in sent}  # (the startup wait's /healthz polls have lines too)
    access = [line for line in lines if line["logger"] == "largesse.access" and line["request_id"] in ids]
    assert len(access) == len(sent), access
    for (rid, method, path, status), line in zip(sent, access, strict=True):
        assert line["request_id"] == rid and line["method"] == method and line["status"] == status
        assert isinstance(line["duration_ms"], float | int) and line["duration_ms"] >= 0
        assert line["route"] and line["ts"] and line["level"] == "info"
        if path:
            assert line["path"] == path
    assert access[0]["route"] == "/api/v2/orders"
    assert access[-1]["route"] == "<unmatched>"
    # Secrets: the API key, the redemption token, the full email address appear nowhere.
    assert key not in text and key[12:] not in text
    assert token not in text
    assert "LRG_SANDBOX_not-a-real-key-1234" not in text
    assert email not in text and "j***@example.com" in text


def test_text_access_lines_of_a_served_process(tmp_path):
    """The request lines of `largesse serve` with its own logging set-up (logs.info_fields
    writes them to the handler's stream itself): the text format, redacted, one per request."""
    process, base, log_path, org = _serve(tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            response = client.post("/api/v2/orders", headers={"Authorization": f"Bearer {org['api_key']}",
                                                              "X-Request-ID": "text-served-1"},
                                   json=order_body("jane.doe@example.com", denomination=5, method="LINK"))
            assert response.status_code == 200, response.text
            token = response.json()["order"]["rewards"][0]["delivery"]["link"].rsplit("/", 1)[1]
            assert client.get(f"/redeem/{token}", headers={"X-Request-ID": "text-served-2"}).status_code == 200
    finally:
        _stop(process)
    text = log_path.read_text()
    lines = [line for line in text.splitlines() if "request_id=text-served-" in line]
    assert len(lines) == 2, text[-3000:]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO largesse.access: request "
                        r"request_id=text-served-1 method=POST path=/api/v2/orders route=/api/v2/orders "
                        r"status=200 duration_ms=[0-9.]+", lines[0]), lines[0]
    assert " path=/redeem/<token> route=/redeem/<token> status=200 " in lines[1], lines[1]
    assert token not in text and org["api_key"] not in text


def test_text_log_lines(server, org, http):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    access = logging.getLogger("largesse.access")
    previous = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        response = http.get("/orders", headers={"X-Request-ID": "text-1"})
        # A control character in the URL (no API key even) must not start a forged line.
        forged = httpx.get(f"{server.url}/api/v2/orders/x%0AFORGED%0D%1B%5B2J", headers={"X-Request-ID": "text-2"})
    finally:
        access.removeHandler(handler)
        access.setLevel(previous)
    assert response.status_code == 200 and response.headers["X-Request-ID"] == "text-1"
    assert forged.status_code == 401
    line, forged_line = stream.getvalue().strip().split("\n")
    assert re.fullmatch(r"\S+Z INFO largesse.access: request request_id=text-1 method=GET path=/api/v2/orders "
                        r"route=/api/v2/orders status=200 duration_ms=[0-9.]+", line), line
    assert " request_id=text-2 method=GET path=/api/v2/orders/x?FORGED??[2J " in forged_line, forged_line


def test_redact():
    line = ("sent to Jane.Doe+tag@mail.example.com via smtp://user:hunter2@smtp.example.com:587 with "
            "Authorization: Bearer abc.def key LRG_PROD_AbCdEf012345-_x link https://r.example/redeem/Tok3n_x?a=1 "
            "hook https://hooks.example/in?a=1&token=s3cr3t")
    masked = logs.redact(line)
    for secret in ("Jane.Doe", "hunter2", "abc.def", "AbCdEf012345", "Tok3n_x", "s3cr3t"):
        assert secret not in masked, masked
    assert "J***@mail.example.com" in masked and "LRG_PROD_***" in masked and "/redeem/<token>" in masked
    assert logs.redact("GET /api/v2/orders 200") == "GET /api/v2/orders 200"


def _samples(text: str, name: str) -> dict[str, float]:
    """{label text: value} of one metric's samples in an exposition text."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            found[labels[len(name):]] = float(value)
    return found


def test_metrics(server, org, http, backend):
    before = httpx.get(f"{server.url}/metrics").text
    order = http.post("/orders", json=order_body(org.member_email, denomination=25)).json()["order"]
    assert http.get(f"/orders/{order['id']}").status_code == 200
    response = httpx.get(f"{server.url}/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text

    def delta(name: str, labels: str) -> float:
        return _samples(text, name).get(labels, 0) - _samples(before, name).get(labels, 0)

    assert delta("largesse_orders_created_total", '{currency="USD"}') == 1
    assert delta("largesse_order_amount_cents_total", '{currency="USD"}') == order["payment"]["total"] * 100
    count = '{method="GET",route="/api/v2/orders/{order_id}",status="200"}'
    assert delta("largesse_http_request_duration_seconds_count", count) >= 1
    assert order["id"] not in text  # route templates, never raw paths
    assert _samples(text, "largesse_database_up") == {"": 1.0}
    # Every page is counted under its template, with its prefix (FastAPI's scope["route"] lacks it).
    for path in ("/openapi.json", "/dashboard/signin", "/dashboard/rewards/NOSUCHREWARD01", "/dashboard/"):
        httpx.get(f"{server.url}{path}", follow_redirects=False)
    text = httpx.get(f"{server.url}/metrics").text
    routes = {labels.split('route="', 1)[1].split('"', 1)[0]
              for labels in _samples(text, "largesse_http_request_duration_seconds_count")}
    assert {"/openapi.json", "/dashboard/signin", "/dashboard/rewards/{reward_id}", "/dashboard/"} <= routes, routes
    assert "/signin" not in routes and "NOSUCHREWARD01" not in text
    jobs = _samples(text, "largesse_jobs")
    assert jobs.get('{kind="deliver_reward",status="queued"}', 0) >= 1  # this server runs no worker
    assert _samples(text, "largesse_jobs_oldest_due_seconds")[""] >= 0


def test_a_client_leaving_mid_body_is_a_400_not_a_500(server, org):
    """POST /orders whose client closes the connection before its declared body arrived: the
    request is counted (and logged) as 400, never as an unhandled error and a 500."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(server.url)
    route = 'method="POST",route="/api/v2/orders",status="{}"'
    before = _samples(httpx.get(f"{server.url}/metrics").text, "largesse_http_request_duration_seconds_count")
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(b"POST /api/v2/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + org.api_key.encode()
                     + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\"")
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while True:
        after = _samples(httpx.get(f"{server.url}/metrics").text, "largesse_http_request_duration_seconds_count")
        labels = {status: "{" + route.format(status) + "}" for status in ("400", "500")}
        counted = {status: after.get(key, 0) - before.get(key, 0) for status, key in labels.items()}
        if counted["400"] or counted["500"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert counted == {"400": 1, "500": 0}


def test_readyz_says_when_migrations_are_behind(tmp_path):
    url = f"sqlite:///{tmp_path / 'ready.sqlite3'}"
    engine = db.make_engine(url)
    prepare(engine)
    server = ServerThread(Settings(database_url=url, mail_dir=str(tmp_path), run_worker=False), engine).start()
    try:
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        head = ready.json()["migration"]
        with sqlite3.connect(tmp_path / "ready.sqlite3") as conn:
            conn.execute("UPDATE alembic_version SET version_num = '0001'")
        behind = httpx.get(f"{server.url}/readyz")
        assert behind.status_code == 503 and behind.headers["Retry-After"]
        assert behind.json()["errors"]["payload"] == {"migrations": ["not current"]}
        with sqlite3.connect(tmp_path / "ready.sqlite3") as conn:
            conn.execute("UPDATE alembic_version SET version_num = ?", (head,))
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        with sqlite3.connect(tmp_path / "ready.sqlite3") as conn:  # a database that was never migrated
            conn.execute("DROP TABLE alembic_version")
        never = httpx.get(f"{server.url}/readyz")
        assert never.status_code == 503 and never.json()["errors"]["payload"] == {"migrations": ["not current"]}
    finally:
        server.stop()
        engine.dispose()


@pytest.mark.parametrize("workers", [2])
def test_metrics_add_up_across_worker_processes(tmp_path, workers):
    process, base, log_path, _ = _serve(tmp_path, "--workers", str(workers))
    try:
        sent = 40
        for _ in range(sent):  # a new connection each: the kernel spreads them over the processes
            assert httpx.get(f"{base}/healthz").status_code == 200
        pids, counts = set(), set()
        for _ in range(6):
            text = httpx.get(f"{base}/metrics").text
            counts.add(_samples(text, "largesse_http_request_duration_seconds_count")
                       .get('{method="GET",route="/healthz",status="200"}'))
        log = log_path.read_text()
        pids = set(re.findall(r"Started server process \[(\d+)\]", log))
        environ = Path(f"/proc/{min(pids)}/environ").read_bytes().split(b"\0")
        metrics_dir = next(v for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")).split(b"=", 1)[1]
        assert os.path.isdir(metrics_dir) and os.listdir(metrics_dir)  # serve made it; processes write there
    finally:
        _stop(process)
    assert len(pids) == workers, log
    assert not os.path.exists(metrics_dir)  # serve removed its temporary directory when it stopped
    # Whichever process answered the scrape, it reported every process's requests (+ readiness polls).
    assert len(counts) == 1 and counts.pop() >= sent, counts


_TRACED_REQUEST = """
import contextlib, sys
from opentelemetry import trace
from starlette.testclient import TestClient

spans = []

class Tracer(trace.Tracer):
    def start_span(self, name, *args, **kwargs):
        spans.append(name)
        return trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)

    @contextlib.contextmanager
    def start_as_current_span(self, name, *args, **kwargs):
        with trace.use_span(self.start_span(name), end_on_exit=False) as span:
            yield span

class Provider(trace.TracerProvider):
    def get_tracer(self, *args, **kwargs):
        return Tracer()

trace.set_tracer_provider(Provider())  # an operator's OpenTelemetry set-up, in this process only
from largesse.app import create_app
from largesse.config import Settings

app = create_app(Settings.from_env())
assert TestClient(app).get("/healthz").status_code == 200
print(len(spans))
"""


@pytest.mark.parametrize("setting, traced", [(None, False), ("1", True)])
def test_fastapi_opentelemetry_traces_requests_only_when_asked(tmp_path, setting, traced):
    """FastAPI's own OpenTelemetry instrumentation costs a provider lookup per request: it is
    off unless LARGESSE_OPENTELEMETRY=1, even where a tracer provider is configured."""
    env = {**os.environ, "LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'otel.sqlite3'}",
           "LARGESSE_RUN_WORKER": "0"}
    env.pop("LARGESSE_OPENTELEMETRY", None)
    if setting is not None:
        env["LARGESSE_OPENTELEMETRY"] = setting
    done = subprocess.run([sys.executable, "-c", _TRACED_REQUEST], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (int(done.stdout.split()[-1]) > 0) is traced, done.stdout
