"""Test fixtures: every database test runs on SQLite and, when reachable, on PostgreSQL.

A real server (uvicorn, in a thread) serves each backend; tests talk to it over HTTP with
httpx or the official tremendous-python client, and run the `largesse` CLI as a process.
Each test creates its own organization, so tests need no cleanup between them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import psycopg
import pytest
import uvicorn

from largesse import db
from largesse.app import create_app
from largesse.bootstrap import prepare
from largesse.config import Settings
from largesse.orgs import service as orgs

PG_ADMIN_URL = os.environ.get("LARGESSE_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("LARGESSE_REQUIRE_POSTGRES") in ("1", "true", "yes")


def _pg_reachable() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


def pg_missing(why: str) -> None:
    """A PostgreSQL test cannot run: fail when PostgreSQL is required (CI), skip otherwise."""
    if REQUIRE_PG:
        pytest.fail(f"PostgreSQL is required (LARGESSE_REQUIRE_POSTGRES) but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request, tmp_path_factory):
    """A brand-new, empty database per backend for the whole session."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("sqlite") / "largesse.sqlite3"
        yield f"sqlite:///{path}"
        return
    if not _pg_reachable():
        pg_missing(f"{PG_ADMIN_URL} is unreachable")
    with empty_pg_database("largesse_test") as url:
        yield url


@contextlib.contextmanager
def empty_pg_database(prefix: str):
    """A new, empty PostgreSQL database (its URL), dropped afterwards."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def backend(database_url) -> str:
    return "sqlite" if database_url.startswith("sqlite") else "postgresql"


@pytest.fixture(scope="session")
def engine(database_url):
    engine = db.make_engine(database_url)
    prepare(engine)
    yield engine
    engine.dispose()


def run_in_new_loop(coroutine, *, loop_factory=None, timeout: float = 60):
    """Run a coroutine in its own thread and event loop (another test may have left one running
    here); loop_factory: the loop's, e.g. `largesse serve`'s (ops.serving.new_event_loop)."""

    def run():
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(coroutine)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """uvicorn serving create_app(settings) on a free loopback port, in this process."""

    def __init__(self, settings: Settings, engine):
        self.port = free_port()
        self.settings = replace(settings, public_url=f"http://127.0.0.1:{self.port}")
        self.app = create_app(self.settings, engine=engine)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture(scope="session")
def base_settings(database_url, tmp_path_factory) -> Settings:
    return Settings(
        database_url=database_url, environment="sandbox", reward_list_timestamps="iso8601",
        mail_dir=str(tmp_path_factory.mktemp("mail")), run_worker=False,
        webhook_allow_private=True,  # tests' webhook receivers listen on loopback
    )


def failing(email: str) -> str:
    """The sandbox recipient whose delivery fails at its first attempt (docs/sandbox.md): only a
    reward whose delivery failed can be canceled (API.md §2.5)."""
    local, _, domain = email.partition("@")
    return f"{local}+fail@{domain}"


@pytest.fixture
def deliver(engine, base_settings):
    """Run the delivery worker over the queue until it is empty: rewards sent to failing()
    addresses end with delivery FAILED, the others SUCCEEDED."""
    from dataclasses import replace

    from largesse.delivery.worker import Worker

    def run() -> int:
        return Worker(engine, replace(base_settings, worker_poll_seconds=0.05, job_retry_base_seconds=0.05,
                                      job_retry_max_seconds=0.2)).drain()

    return run


@pytest.fixture(scope="session")
def server(base_settings, engine):
    """The shared API server (no background worker) for this backend."""
    thread = ServerThread(base_settings, engine).start()
    yield thread
    thread.stop()


@pytest.fixture
def make_server(base_settings, engine):
    """Start an extra server with other settings: make_server(environment="production")."""
    started = []

    def start(**overrides) -> ServerThread:
        thread = ServerThread(replace(base_settings, **overrides), engine).start()
        started.append(thread)
        return thread

    yield start
    for thread in started:
        thread.stop()


@dataclass
class Org:
    id: str
    api_key: str
    funding_source_id: str
    member_email: str
    base_url: str

    def http(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=f"{self.base_url}/api/v2", timeout=30,
                            headers={"Authorization": f"Bearer {self.api_key}"}, **kwargs)

    def api(self):
        from tremendous import ApiClient, Configuration, TremendousApi

        return TremendousApi(ApiClient(Configuration(host=f"{self.base_url}/api/v2", access_token=self.api_key)))


def create_org(engine, base_url: str, *, sandbox: bool = True, name: str = "Acme") -> Org:
    email = f"owner-{secrets.token_hex(4)}@example.com"
    with db.write(engine) as conn:
        created = orgs.create_org(conn, name=name, member_email=email, member_name="Owner", sandbox=sandbox)
    return Org(created.organization_id, created.api_key, created.funding_source_id, email, base_url)


def production_org(engine, base_url: str, *, dollars: int = 1000) -> Org:
    """A production organization (LRG_PROD_ key), funded as an operator would."""
    from largesse.funding import service as funding

    org = create_org(engine, base_url, sandbox=False, name="Prod Corp")
    funding.fund(engine, organization_id=org.id, amount_cents=dollars * 100, memo="test funding", reference=None)
    return org


@pytest.fixture
def org(engine, server) -> Org:
    return create_org(engine, server.url)


@pytest.fixture
def prod_org(engine, make_server) -> Org:
    """A funded production organization on a production server of the test database (the
    sandbox server `server` shares it): real fulfillment, such as inventory codes, is there only."""
    return production_org(engine, make_server(environment="production").url)


@pytest.fixture
def other_org(engine, server) -> Org:
    return create_org(engine, server.url, name="Other Corp")


@pytest.fixture
def http(org):
    with org.http() as client:
        yield client


@pytest.fixture
def api(org):
    return org.api()


@pytest.fixture
def cli(database_url, tmp_path):
    """Run the installed `largesse` command against this backend's database."""

    def run(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        full_env = {**os.environ, "LARGESSE_DATABASE_URL": database_url, **(env or {})}
        command = [str(Path(sys.executable).parent / "largesse"), *args]
        result = subprocess.run(command, capture_output=True, text=True, env=full_env, cwd=tmp_path, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"largesse {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    return run


# A few products of the shipped catalog that tests rely on.
GIFT_CARD_USD = "PGCNWBOOKS01US"


def order_body(email: str, *, denomination=25, products=(GIFT_CARD_USD,), method="EMAIL", **reward_extra) -> dict:
    reward = {
        "value": {"denomination": denomination},
        "recipient": {"name": "Recipient", "email": email},
        "delivery": {"method": method},
        **reward_extra,
    }
    if products is not None:
        reward["products"] = list(products)
    return {"payment": {"funding_source_id": "balance"}, "reward": reward}


# --- the browser (redemption, connected-organization and dashboard pages) ---

@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole session (Debian's, driven by Playwright). Defined
    here, once: Playwright's sync API allows one instance per thread, so a second session
    fixture in another folder would fail to start."""
    from tests.redemption.conftest import CHROMIUM_ARGS, browser_required, chromium_path

    executable, looked = chromium_path()
    if executable is None:
        why = f"no Chromium found ({looked}); run `make browser` or set LARGESSE_CHROMIUM=/path/to/chromium"
        if browser_required():
            pytest.fail(f"the browser tests are required (CI or LARGESSE_REQUIRE_BROWSER) but {why}",
                        pytrace=False)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    except Exception:
        playwright.stop()
        raise
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture
def browser_page(browser):
    """A fresh browser context (own cookies) with its own client address."""
    from tests.redemption.conftest import fake_ip

    context = browser.new_context(viewport={"width": 390, "height": 844},
                                  extra_http_headers={"X-Forwarded-For": fake_ip()})
    page = context.new_page()
    yield page
    context.close()
