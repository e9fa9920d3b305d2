"""Shared plumbing of the benchmarks: wrk, server processes, databases, organizations.

The load generator is wrk (C, one thread): a Python load generator would eat one of the two
cores and halve what we measure. Servers run as separate processes (`largesse serve`, or the
bare baseline), each started in its own process group and stopped by that group's id.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(__file__).resolve().parent
LUA = BENCH_DIR / "wrk.lua"
VENV_BIN = Path(sys.executable).parent
PG_ADMIN_URL = os.environ.get("LARGESSE_BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
PRODUCT = "PGCNWBOOKS01US"
API = "/api/v2"
FUNDING_CENTS = 10**13  # 100 billion USD: no 402 whatever the run length


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- wrk ----------------------------------------------------------------------------------------

def ensure_wrk() -> str | None:
    """Path of wrk; installs Debian's package when missing and we are root with apt-get."""
    path = shutil.which("wrk")
    if path:
        return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("installing Debian's wrk for the benchmarks")
        cmd = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", "wrk"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if subprocess.run(cmd, **quiet).returncode != 0:
            subprocess.run(["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=300"], **quiet)
            subprocess.run(cmd, **quiet)
        return shutil.which("wrk")
    return None


@dataclass
class WrkResult:
    rps: float
    ok_rps: float
    requests: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    statuses: dict[str, int]
    socket_errors: int
    cpu_ms: float | None = None  # server CPU (all its processes) per request

    @property
    def non_ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "200")


def run_wrk(url: str, *, duration: float, connections: int = 16, mode: str = "get", api_key: str = "",
            email: str = "", threads: int = 1, timeout_s: int = 10, server: Server | None = None,
            orgs: list[BenchOrg] | None = None, external_id: bool = False) -> WrkResult:
    """wrk against url. Orders (mode "order") go to `orgs` at random (else api_key/email), each
    with a unique external_id when `external_id`."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    env = {**os.environ, "BENCH_MODE": mode, "BENCH_PATH": path, "BENCH_API_KEY": api_key,
           "BENCH_EMAIL": email, "BENCH_PRODUCT": PRODUCT, "BENCH_EXTERNAL_ID": "1" if external_id else "0",
           "BENCH_ORGS": ";".join(f"{o.api_key} {o.member_email}" for o in orgs or [])}
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s", f"--timeout={timeout_s}s",
           "--latency", "-s", str(LUA), f"{parts.scheme}://{parts.netloc}{path}"]
    cpu_before = server.cpu_seconds() if server else 0.0
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=duration + 60)
    cpu_used = server.cpu_seconds() - cpu_before if server else None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    data = json.loads(line[len("BENCH_JSON "):])
    seconds = data["duration_us"] / 1e6
    statuses = {str(k): v for k, v in sorted(data["statuses"].items())}
    ok = statuses.get("200", 0)
    return WrkResult(
        rps=data["requests"] / seconds, ok_rps=ok / seconds, requests=data["requests"],
        p50_ms=data["p50_us"] / 1000, p90_ms=data["p90_us"] / 1000, p99_ms=data["p99_us"] / 1000,
        max_ms=data["max_us"] / 1000, statuses=statuses,
        socket_errors=data["connect_errors"] + data["read_errors"] + data["write_errors"] + data["timeouts"],
        cpu_ms=cpu_used * 1000 / data["requests"] if cpu_used is not None and data["requests"] else None,
    )


@dataclass
class Series:
    """Repeated measurements of one configuration; reported as medians."""

    runs: list[WrkResult] = field(default_factory=list)

    def add(self, result: WrkResult) -> None:
        self.runs.append(result)

    def summary(self) -> dict:
        med = statistics.median
        statuses: dict[str, int] = {}
        for r in self.runs:
            for status, n in r.statuses.items():
                statuses[status] = statuses.get(status, 0) + n
        return {
            "rps": round(med(r.ok_rps for r in self.runs), 1),
            "rps_runs": [round(r.ok_rps, 1) for r in self.runs],
            "p50_ms": round(med(r.p50_ms for r in self.runs), 2),
            "p99_ms": round(med(r.p99_ms for r in self.runs), 2),
            "max_ms": round(max(r.max_ms for r in self.runs), 1),
            "cpu_ms_per_req": (round(med(r.cpu_ms for r in self.runs), 3)
                               if all(r.cpu_ms is not None for r in self.runs) else None),
            "requests": sum(r.requests for r in self.runs),
            "statuses": statuses,
            "non_200": sum(r.non_ok for r in self.runs),
            "socket_errors": sum(r.socket_errors for r in self.runs),
        }


# --- servers ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A server process in its own process group; `stop` ends that group (and only it)."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], port: int, log_dir: Path):
        self.name, self.cmd, self.env, self.port = name, cmd, env, port
        self.log_path = log_dir / f"{name}-{port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> Server:
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); see {self.log_path}:\n"
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        # With several workers, give the others a moment to bind too.
                        time.sleep(0.5)
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not start within {timeout}s; see {self.log_path}")

    def worker_pids(self) -> list[int]:
        """The processes serving requests (the uvicorn workers, or the single process)."""
        if self.proc is None:
            return []
        try:
            out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True,
                                 text=True).stdout.split()
        except OSError:
            out = []
        # Not the delivery processes that `largesse serve` supervises: they serve no request.
        children = [int(p) for p in out if not _is_delivery_worker(int(p))]
        # uvicorn with --workers N>1 spawns N children (plus a resource tracker on some versions).
        return children if len(children) > 1 else [self.proc.pid]

    def delivery_pids(self) -> list[int]:
        if self.proc is None:
            return []
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True,
                             text=True).stdout.split()
        return [int(p) for p in out if _is_delivery_worker(int(p))]

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by the server process and its workers."""
        if self.proc is None:
            return 0.0
        total = 0.0
        for pid in {self.proc.pid, *self.worker_pids()}:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self._log.close()
        self.proc = None


def _is_delivery_worker(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"largesse" in argv and b"worker" in argv


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LARGESSE_")}
    env.update({
        "LARGESSE_DATABASE_URL": database_url,
        "LARGESSE_ENVIRONMENT": "sandbox",
        # The delivery worker would compete for the two cores and the database; benchmarks
        # measure the API alone.
        "LARGESSE_RUN_WORKER": "0",
        # BENCH_LARGESSE_SRC: another checkout's src/ (e.g. the previous commit's, for a before/after).
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("BENCH_LARGESSE_SRC"), str(ROOT)) if p),
    })
    env.update(extra)
    return env


def largesse_server(database_url: str, workers: int, log_dir: Path, *, delivery: bool = False) -> Server:
    """`largesse serve`; with `delivery`, as `make run` starts it: delivering (to a mail
    directory, the default transport), in its supervised child process."""
    port = free_port()
    env = server_env(database_url, LARGESSE_PUBLIC_URL=f"http://127.0.0.1:{port}")
    if delivery:
        env.update(LARGESSE_RUN_WORKER="1", LARGESSE_MAIL_DIR=str(log_dir / f"mail-{port}"))
    cmd = [str(VENV_BIN / "largesse"), "serve", "--host", "127.0.0.1", "--port", str(port),
           "--workers", str(workers)]
    return Server(f"largesse-w{workers}{'-delivery' if delivery else ''}", cmd, env, port, log_dir)


def baseline_server(database_url: str, workers: int, log_dir: Path) -> Server:
    port = free_port()
    env = server_env(database_url)
    cmd = [sys.executable, "-m", "bench.baseline", "--port", str(port), "--workers", str(workers),
           "--database-url", database_url]
    return Server(f"baseline-w{workers}", cmd, env, port, log_dir)


# --- databases ----------------------------------------------------------------------------------

def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except Exception:
        return False


@contextlib.contextmanager
def database(kind: str, workdir: Path, label: str) -> Iterator[str]:
    """A brand-new database URL; PostgreSQL databases are dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'{label}.sqlite3'}"
        return
    import psycopg

    name = f"largesse_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="largesse-bench-") as path:
        yield Path(path)


@dataclass
class BenchOrg:
    organization_id: str
    api_key: str
    funding_source_id: str
    member_email: str


def prepare_database(url: str) -> None:
    """Migrate (largesse's own migrations) and load the catalog, as `largesse serve` does."""
    from largesse import db
    from largesse.bootstrap import prepare

    engine = db.make_engine(url)
    try:
        prepare(engine)
    finally:
        engine.dispose()


def create_funded_org(url: str, name: str = "Bench Corp") -> BenchOrg:
    """An organization with a member, a key and a generously funded balance (funding service)."""
    from largesse import db
    from largesse.funding import service as funding
    from largesse.orgs import service as orgs

    engine = db.make_engine(url)
    try:
        email = f"bench-{secrets.token_hex(4)}@example.com"
        with db.write(engine) as conn:
            created = orgs.create_org(conn, name=name, member_email=email, member_name="Bench", sandbox=True)
            funding.credit(conn, funding_source_id=created.funding_source_id,
                           organization_id=created.organization_id, amount_cents=FUNDING_CENTS, kind="funding",
                           memo="benchmark funding")
    finally:
        engine.dispose()
    return BenchOrg(created.organization_id, created.api_key, created.funding_source_id, email)


def pg_version() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]
    except Exception:
        return None


def pg_setting(name: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3) as conn:
            return conn.execute(f"SHOW {name}").fetchone()[0]
    except Exception:
        return None


def seed_history(url: str, orgs: list[BenchOrg], per_org: int) -> None:
    """`per_org` earlier orders for each organization (order, reward, ledger entry and a done
    delivery job each, bulk-inserted), so that the bench runs against balances and tables
    with history, as a live service has."""
    from datetime import timedelta

    from largesse import db
    from largesse.delivery.models import jobs
    from largesse.funding.models import funding_sources, ledger_entries
    from largesse.ids import new_id
    from largesse.orders.models import orders, rewards
    from largesse.timeutil import utcnow

    engine = db.make_engine(url)
    start = utcnow() - timedelta(days=30)
    try:
        for org in orgs:
            order_rows, reward_rows, ledger_rows, job_rows = [], [], [], []
            balance = FUNDING_CENTS
            for i in range(per_org):
                at = start + timedelta(seconds=i)
                order_id, reward_id = new_id(), new_id()
                balance -= 500
                order_rows.append({
                    "id": order_id, "organization_id": org.organization_id, "external_id": f"history-{i}",
                    "request_hash": "0" * 64, "campaign_id": None, "status": "EXECUTED", "channel": "API",
                    "funding_source_id": org.funding_source_id, "currency_code": "USD", "subtotal_cents": 500,
                    "fees_cents": 0, "discount_cents": 0, "total_cents": 500, "refund_cents": 0, "created_at": at})
                reward_rows.append({
                    "id": reward_id, "organization_id": org.organization_id, "order_id": order_id,
                    "campaign_id": None, "products": [PRODUCT], "denomination_cents": 500, "fee_cents": 0,
                    "currency_code": "USD", "recipient_name": "Earlier", "recipient_email": org.member_email,
                    "recipient_phone": None, "delivery_method": "EMAIL", "delivery_status": "SUCCEEDED",
                    "delivery_meta": None, "delivered_at": at, "deliver_at": None, "language": "en",
                    "status": "ACTIVE", "expires_at": None, "created_at": at})
                ledger_rows.append({
                    "funding_source_id": org.funding_source_id, "organization_id": org.organization_id,
                    "amount_cents": -500, "balance_after_cents": balance, "kind": "order", "memo": None,
                    "order_id": order_id, "reward_id": None, "created_at": at})
                job_rows.append({
                    "kind": "deliver_reward", "lane": "mail", "organization_id": org.organization_id,
                    "reward_id": reward_id, "payload": None, "status": "done", "attempts": 1, "max_attempts": 8,
                    "run_after": at, "created_at": at, "updated_at": at})
            with db.write(engine) as conn:
                for table, rows in ((orders, order_rows), (rewards, reward_rows), (ledger_entries, ledger_rows),
                                    (jobs, job_rows)):
                    for n in range(0, len(rows), 1000):
                        conn.execute(table.insert(), rows[n:n + 1000])
                conn.execute(funding_sources.update().where(funding_sources.c.id == org.funding_source_id)
                             .values(available_cents=funding_sources.c.available_cents - 500 * per_org))
        if engine.dialect.name == "postgresql":
            with db.write(engine) as conn:
                conn.exec_driver_sql("ANALYZE")
            # Flush the bulk load's dirty pages now: otherwise the checkpoint it triggers lands in
            # the first measurement (of Largesse and the bare app alike), which then read 30-40 %
            # below the next ones. Needs a superuser (the bench's own databases have one).
            with contextlib.suppress(Exception), engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("CHECKPOINT")
    finally:
        engine.dispose()
