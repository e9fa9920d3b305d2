"""What the `largesse` command refuses, and how it says so: option ranges, missing or unusable
databases, fees, blank names and memos, money as it is written, help texts, serve's warnings.

Each failing command must be one line on stderr (no traceback), a non-zero exit, and no change."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from largesse import db
from largesse.orgs.models import organizations
from tests.conftest import PG_ADMIN_URL, free_port
from tests.factories import available_cents, ok, unique

LARGESSE = str(Path(sys.executable).parent / "largesse")


def _run(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`largesse *args` in cwd, with the default database (./var/largesse.sqlite3) unless env names one."""
    full_env = {k: v for k, v in os.environ.items() if k != "LARGESSE_DATABASE_URL"}
    full_env.update({"COLUMNS": "200", **(env or {})})
    return subprocess.run([LARGESSE, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120)


def _one_line_error(result: subprocess.CompletedProcess, code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stderr.startswith("error: "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def _usage_error(result: subprocess.CompletedProcess, option: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and option in result.stderr, result.stderr


# --- item 1: serve's options -------------------------------------------------------------------

def test_serve_refuses_a_port_out_of_range_and_zero_workers(tmp_path):
    for args, option in ((("--port", "99999"), "--port"), (("--port", "0"), "--port"),
                         (("--workers", "0"), "--workers")):
        result = _run(tmp_path, "serve", *args)
        _usage_error(result, option)
        assert "LARGESSE_API_PROCESSES" not in result.stderr
    assert list(tmp_path.iterdir()) == [], "a refused serve creates nothing"


# --- item 2: a SQLite database that does not exist ---------------------------------------------

READING_COMMANDS = [
    ("org", "list"), ("ledger", "verify"), ("products", "list"), ("jobs", "list"), ("invoices", "list"),
    ("topups", "list"), ("forex", "show"), ("inventory", "status"), ("balance", "show", "--org", "X"),
    ("keys", "list", "--org", "X"), ("members", "list", "--org", "X"), ("orders", "pending", "--org", "X"),
    ("org", "fees", "--org", "X"), ("balance", "fund", "--org", "X", "--amount", "1", "--memo", "m"),
    ("webhooks", "deliveries", "--org", "X"), ("keys", "revoke", "K"),
]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_commands_refuse_a_sqlite_database_that_does_not_exist(tmp_path, command):
    line = _one_line_error(_run(tmp_path, *command))
    assert str(tmp_path / "var" / "largesse.sqlite3") in line and "largesse db upgrade" in line
    assert list(tmp_path.iterdir()) == [], "no file and no folder"
    mistyped = tmp_path / "typo" / "larges.sqlite3"
    line = _one_line_error(_run(tmp_path, *command, env={"LARGESSE_DATABASE_URL": f"sqlite:///{mistyped}"}))
    assert str(mistyped) in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [*READING_COMMANDS[:3], ("db", "upgrade"), ("serve", "--port", "1")],
                         ids=" ".join)
def test_a_file_that_is_not_a_sqlite_database_is_one_line(tmp_path, command):
    """A wrong file restored in the database's place: one line naming it, not a traceback."""
    wrong = tmp_path / "restored.sqlite3"
    wrong.write_text("this is not a database\n")
    env = {"LARGESSE_DATABASE_URL": f"sqlite:///{wrong}"}
    if command[0] == "serve":
        env["LARGESSE_RUN_WORKER"] = "0"
        command = ("serve", "--port", str(free_port()))
    line = _one_line_error(_run(tmp_path, *command, env=env))
    assert str(wrong) in line and "file is not a database" in line
    assert wrong.read_text() == "this is not a database\n"


def test_serve_on_a_port_in_use_is_one_line_and_starts_nothing(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(tmp_path, "serve", "--port", str(port))
    line = _one_line_error(result)
    assert f"port {port} on 127.0.0.1 is already in use" in line
    assert "delivery" not in result.stdout + result.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("setting", "expected"), [
    ({"LARGESSE_SMTP_URL": "smtp//127.0.0.1:2525"}, "must start with smtp:// or smtps://"),
    ({"LARGESSE_SMTP_URL": "smtp://127.0.0.1:notaport"}, "cannot deliver email"),
    ({"LARGESSE_SMTP_URL": "smtp://127.0.0.1:2525?starttls=maybe"}, "starttls must be one of"),
    ({"LARGESSE_SMTP_URL": "smtp://127.0.0.1:2525?tls=1"}, "takes one query parameter, starttls; not tls"),
    ({"LARGESSE_MAIL_DIR": "/proc/largesse-no-such-dir"}, "cannot deliver email"),
    ({"LARGESSE_SMTP_URL": "smtp://"}, "names no host"),  # silently localhost:25
    ({"LARGESSE_SMTP_URL": "smtps://user:pw@:465"}, "names no host"),
])
def test_a_transport_that_cannot_send_stops_worker_and_serve_in_one_line(tmp_path, setting, expected):
    """Every delivery thread died with a traceback and the worker exited 0 (no restart by a
    supervisor); serve started, answered ready, and its delivery child died in a loop."""
    port = free_port()
    for command in (("worker", "--once"), ("worker",), ("serve", "--port", str(port))):
        line = _one_line_error(_run(tmp_path, *command, env=setting))
        assert expected in line, (command, line)
    # Without delivery in the server, the transport is not its business.
    env = {**setting, "LARGESSE_RUN_WORKER": "0"}
    server = subprocess.Popen([LARGESSE, "serve", "--port", str(port)], cwd=tmp_path, env={**os.environ, **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for_health(port), "serve did not start"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_worker_without_threads_is_refused(tmp_path):
    """`worker --concurrency 0 --webhook-concurrency 0` started anyway (with a thread the
    operator had not asked for)."""
    for args, env in ((("--concurrency", "0", "--webhook-concurrency", "0"), {}),
                      (("--concurrency", "0"), {"LARGESSE_WEBHOOK_CONCURRENCY": "0"})):
        for once in (("--once",), ()):  # (before: --once ran, the worker ran until stopped)
            line = _one_line_error(_run(tmp_path, "worker", *args, *once, env=env))
            assert "leaves the worker no thread to deliver with" in line, line
    assert list(tmp_path.iterdir()) == []


def test_jobs_retry_says_which_of_its_two_forms_to_give(tmp_path):
    """Both a JOB_ID and --all-dead were told "give a JOB_ID or --all-dead"."""
    both = _one_line_error(_run(tmp_path, "jobs", "retry", "1", "--all-dead"))
    assert "give either a JOB_ID or --all-dead, not both" in both, both
    neither = _one_line_error(_run(tmp_path, "jobs", "retry"))
    assert "give a JOB_ID or --all-dead" in neither and "not both" not in neither, neither
    assert list(tmp_path.iterdir()) == []


def test_a_lone_server_removes_its_metrics_folder_when_stopped(tmp_path):
    """With one process, uvicorn ended SIGTERM by raising it again: the process died before
    serve's cleanup, and each `make run` stopped left a /tmp/largesse-metrics-* behind."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("LARGESSE_DATABASE_URL", "PROMETHEUS_MULTIPROC_DIR")}
    server = subprocess.Popen([LARGESSE, "serve", "--port", str(port)], cwd=tmp_path, env={**env, "TMPDIR": str(temp)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for_health(port), "serve did not start"
        assert [p.name for p in temp.iterdir() if p.name.startswith("largesse-metrics-")]
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert not [p.name for p in temp.iterdir() if p.name.startswith("largesse-metrics-")]


def test_api_processes_die_with_a_killed_serve(tmp_path):
    """`serve --workers 2` killed with SIGKILL: its API processes kept serving, and the next
    start was refused ("port ... already in use")."""
    import signal
    import socket

    port = free_port()
    children: list[int] = []
    env = {k: v for k, v in os.environ.items() if k != "LARGESSE_DATABASE_URL"}
    server = subprocess.Popen([LARGESSE, "serve", "--port", str(port), "--workers", "2"], cwd=tmp_path,
                              env={**env, "LARGESSE_RUN_WORKER": "0"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        assert _wait_for_health(port), "serve did not start"
        children += [int(p) for p in subprocess.run(["ps", "-o", "pid=", "--ppid", str(server.pid)],
                                                    capture_output=True, text=True).stdout.split()]
        assert children
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        deadline = time.monotonic() + 15
        while any(map(_running, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in children if _running(pid)] == []
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))  # free for the next start
    finally:
        if server.poll() is None:
            server.kill()
        for pid in children:  # none is left when the test passes
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # not a zombie
    except (OSError, IndexError):
        return False


def _wait_for_health(port: int, timeout: float = 60) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.2)
    return False


def test_db_upgrade_creates_a_new_database_and_says_so(tmp_path):
    created = _run(tmp_path, "db", "upgrade")
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("created the database schema at revision 0"), created.stdout
    revision = created.stdout.split("revision ")[1].split(":")[0]
    again = _run(tmp_path, "db", "upgrade")
    assert f"database is up to date (revision {revision})" in again.stdout
    listed = _run(tmp_path, "org", "list")
    assert listed.returncode == 0 and listed.stdout.strip() == "no organizations"

def test_operations_doc_shows_what_db_upgrade_and_readyz_print_now(tmp_path):
    """docs/operations.md showed revision 0022 and `db upgrade` lines without the database URL
    the command appends: its examples are the current head and the command's own lines."""
    from largesse.migrate import shipped_head

    doc = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()
    head = shipped_head()
    created = _run(tmp_path, "db", "upgrade").stdout.strip()
    again = _run(tmp_path, "db", "upgrade").stdout.strip()
    assert created == f"created the database schema at revision {head}: sqlite:///var/largesse.sqlite3"
    assert again == f"database is up to date (revision {head}): sqlite:///var/largesse.sqlite3"
    assert created in doc and again in doc
    assert f"migrated the database from revision 0022 to {head}: postgresql://largesse:***@db" in doc
    assert f'"migration":"{head}"' in doc and f"{head} at the time of writing" in doc


def test_commands_starting_together_on_a_new_sqlite_database_wait_for_each_other(tmp_path):
    """serve, worker and org create started at once on an empty folder: one migrated and the
    others failed with "database is locked" (PostgreSQL's upgrades already waited)."""
    commands = [("db", "upgrade"), ("db", "upgrade"), ("db", "upgrade"),
                ("org", "create", "--name", "Together", "--member-email", "t@example.com")]
    env = {k: v for k, v in os.environ.items() if k != "LARGESSE_DATABASE_URL"}
    started = [subprocess.Popen([LARGESSE, *command], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for command in commands]
    results = [(p.wait(timeout=120), *p.communicate()) for p in started]
    assert [code for code, _, _ in results] == [0, 0, 0, 0], results
    assert "Together" in _run(tmp_path, "org", "list").stdout
    # Each `db upgrade` says what it did itself: at most one created the schema (org create may
    # have), the others found it done (all three said they had created it).
    said = [out.split(" at revision")[0].split(" (revision")[0] for _, out, _ in results[:3]]
    assert said.count("created the database schema") <= 1, said
    assert set(said) <= {"created the database schema", "database is up to date"}, said


@pytest.mark.parametrize("command", [
    ("org", "create", "--name", "First", "--member-email", "first@example.com"),  # README's first step
    ("worker", "--once"),
])
def test_bootstrapping_commands_still_create_the_database(tmp_path, command):
    result = _run(tmp_path, *command, env={"LARGESSE_MAIL_DIR": str(tmp_path / "mail")})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "var" / "largesse.sqlite3").is_file()
    assert _run(tmp_path, "ledger", "verify").returncode == 0


# --- item 3: unusable database URLs --------------------------------------------------------------

def test_an_unusable_database_url_is_one_line_without_its_password(tmp_path):
    host = PG_ADMIN_URL.split("@", 1)[1].rsplit("/", 1)[0]  # 127.0.0.1:5432
    missing = f"largesse_missing_{secrets.token_hex(4)}"
    cases = {
        "mysql://ops:hunter2@db.internal/largesse": "must be a SQLite",
        "notaurl": "is not a database URL",
        f"postgresql://postgres:hunter2@{host}/{missing}": missing,  # no such database (or no server)
        "postgresql://postgres:hunter2@127.0.0.1:1/largesse": "127.0.0.1:1",  # nothing listens there
    }
    for url, expected in cases.items():
        for command in (("db", "upgrade"), ("ledger", "verify")):
            line = _one_line_error(_run(tmp_path, *command, env={"LARGESSE_DATABASE_URL": url}))
            assert expected in line and "hunter2" not in line, line
    # Only a password is masked: a URL without one is shown as it is.
    line = _one_line_error(_run(tmp_path, "org", "list",
                                env={"LARGESSE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/largesse"}))
    assert "postgresql://postgres@127.0.0.1:1/largesse" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("LARGESSE_CANCEL_ANY_UNREDEEMED", "2", None),  # was read as on, as "False" was
    ("LARGESSE_RUN_WORKER", "maybe", None),
    ("LARGESSE_WEBHOOK_ALLOW_PRIVATE", "enabled", None),
    ("LARGESSE_REWARD_EXPIRY_DAYS", "-3", "from 1 to 3650"),  # rewards created already expired
    ("LARGESSE_REWARD_EXPIRY_DAYS", "3000000", "from 1 to 3650"),  # past year 9999: every order a 500
    ("LARGESSE_WORKER_CONCURRENCY", "abc", "whole number"),  # "invalid literal for int()", no name
    ("LARGESSE_JOB_LEASE_SECONDS", "0", "above 0"),  # every claim a lost lease: emails sent twice
    ("LARGESSE_DB_TIMEOUT_SECONDS", "-1", "of at least 0"),
    ("LARGESSE_SMTP_TIMEOUT_SECONDS", "nan", "above 0"),
    ("LARGESSE_REDEEM_LIMIT_PER_IP", "60/min", "whole number"),  # read at the first /redeem: every page a 500
    ("LARGESSE_DELIVERY_PROCESSES", "100000", "from 1 to 256"),  # forked until the host starved
    ("LARGESSE_WORKER_CONCURRENCY", "100000", "from 1 to 256"),
    ("LARGESSE_WORKER_CONCURRENCY", "0", "from 1 to 256"),  # serve would start a worker that sends no email
    ("LARGESSE_PUBLIC_URL", "127.0.0.1:8615", "http:// or https://"),  # links without a scheme in every email
    ("LARGESSE_PUBLIC_URL", "http://127.0.0.1:8615?x=1", "without query"),  # ...?x=1/redeem/...
    ("LARGESSE_PUBLIC_URL", "https://", "with a host"),
    # every reward email failed for good on its first attempt, every reward FAILED
    ("LARGESSE_MAIL_FROM", "notanaddress", "must be an email address"),
    ("LARGESSE_MAIL_FROM", "rewards@localhost", "must be an email address"),
    ("LARGESSE_MAIL_FROM", "Rewards <rewards@example.com>", "LARGESSE_MAIL_FROM_NAME"),
])
def test_a_setting_out_of_its_values_is_one_line(tmp_path, name, value, expected):
    line = _one_line_error(_run(tmp_path, "org", "list", env={name: value}))
    assert name in line and repr(value) in line and (expected is None or expected in line), line


def test_serve_and_worker_refuse_a_mail_from_that_is_not_an_address(tmp_path):
    """LARGESSE_MAIL_FROM=notanaddress started; then each reward email failed permanently."""
    for command in (("worker", "--once"), ("serve", "--port", str(free_port()))):
        line = _one_line_error(_run(tmp_path, *command, env={"LARGESSE_MAIL_FROM": "notanaddress"}))
        assert "LARGESSE_MAIL_FROM must be an email address" in line, (command, line)
    assert list(tmp_path.iterdir()) == []


def test_on_off_settings_take_any_capitals():
    from largesse.config import Settings

    for off in ("0", "false", "False", "NO", "off"):
        settings = Settings.from_env({"LARGESSE_CANCEL_ANY_UNREDEEMED": off, "LARGESSE_RUN_WORKER": off})
        assert settings.cancel_any_unredeemed is False and settings.run_worker is False, off
    for on in ("1", "TRUE", "Yes", "on"):
        settings = Settings.from_env({"LARGESSE_CANCEL_ANY_UNREDEEMED": on, "LARGESSE_WEBHOOK_ALLOW_PRIVATE": on})
        assert settings.cancel_any_unredeemed is True and settings.webhook_allow_private is True, on
    # 0 turns the API rate limits off; the redemption pages' limits come from the settings too.
    settings = Settings.from_env({"LARGESSE_API_RATE_LIMIT_PER_KEY": "0", "LARGESSE_REDEEM_LIMIT_PER_IP": "7"})
    assert settings.api_rate_limit_per_key == 0 and settings.redeem_limit_per_ip == 7
    # 0 keeps its documented meaning where it has one: no cap, never.
    settings = Settings.from_env({"LARGESSE_DB_TIMEOUT_SECONDS": "0", "LARGESSE_DB_STATEMENT_TIMEOUT_SECONDS": "0",
                                  "LARGESSE_REWARD_EXPIRY_DAYS": "0", "LARGESSE_API_RATE_LIMIT_SYNC_SECONDS": "0"})
    assert (settings.db_timeout_seconds, settings.db_statement_timeout_seconds) == (0, 0)
    assert settings.reward_expiry_days is None and settings.api_rate_limit_sync_seconds == 0
    assert Settings.from_env(settings.to_env()) == settings
    # A public URL under a path is a base like any other; its trailing slash goes.
    assert Settings.from_env({"LARGESSE_PUBLIC_URL": "https://rewards.example.com/largesse/"}).public_url == \
        "https://rewards.example.com/largesse"
    assert Settings.from_env({}).mail_from == "rewards@largesse.localhost"
    assert Settings.from_env({"LARGESSE_MAIL_FROM": "gifts@mail.example.com"}).mail_from == "gifts@mail.example.com"


def test_names_from_api_clients_reach_the_terminal_escaped(org, http, cli):
    """An organization or member name set through the API is printed with its control
    characters escaped: no terminal escape sequence, bell or carriage return gets through, and
    a line feed in a name cannot print a line that looks like another row."""
    name = "Esc\x1b]0;pwned\x07 Co\rFAKE\nLINE"
    ok(http.post("/organizations", json={"name": name, "website": "example.com", "with_api_key": False}))
    ok(http.post("/members", json={"email": "ctrl@example.com", "name": "Eve\r\nROOT", "role": "MEMBER"}))
    for command in (("org", "list"), ("members", "list", "--org", org.id)):
        out = cli(*command).stdout
        assert not any(c in out for c in "\x1b\x07\r"), repr(out)
    assert "Esc\\x1b]0;pwned\\x07 Co\\rFAKE\\nLINE" in cli("org", "list").stdout
    assert any(line.endswith("ctrl@example.com  Eve\\r\\nROOT")
               for line in cli("members", "list", "--org", org.id).stdout.splitlines())
    assert name in [o["name"] for o in json.loads(cli("org", "list", "--json").stdout)["organizations"]]


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://postgres:pw@127.0.0.1:notaport/x", "is not a database URL"),  # a traceback
    ("sqlite://", "names no SQLite file"),  # a database in memory: "ledger OK"
    ("sqlite:///", "names no SQLite file"),
    ("sqlite:///:memory:", "names no SQLite file"),
    # libpq's default database (the user's name) was picked, and migrated
    ("postgresql://", "names no PostgreSQL database"),
    ("postgresql://postgres:pw@127.0.0.1:5432/", "names no PostgreSQL database"),
])
def test_a_database_url_without_a_database_is_one_line(tmp_path, url, expected):
    for command in (("ledger", "verify"), ("org", "list")):
        line = _one_line_error(_run(tmp_path, *command, env={"LARGESSE_DATABASE_URL": url, "PGDATABASE": ""}))
        assert expected in line and "pw" not in line, line


def test_a_migration_that_fails_is_one_line(tmp_path, backend):
    """A migration the database refuses (here: its revision set back to 0021, so 0022 adds a
    column that is there) is one line and exit 1, not a 250-line traceback."""
    import psycopg

    from tests.conftest import _pg_reachable, empty_pg_database

    if backend != "postgresql" or not _pg_reachable():
        pytest.skip("PostgreSQL's own error (ProgrammingError); SQLite's are already one line")
    with empty_pg_database("largesse_migration") as url:
        env = {"LARGESSE_DATABASE_URL": url}
        assert _run(tmp_path, "db", "upgrade", env=env).returncode == 0
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE alembic_version SET version_num = '0021'")
        line = _one_line_error(_run(tmp_path, "db", "upgrade", env=env))
        assert line.startswith("error: migrating the database") and "already exists" in line, line


def test_a_database_at_an_unknown_revision_is_one_line_and_serve_does_not_start(tmp_path):
    """A database a newer Largesse migrated (a package rolled back, a newer backup restored):
    Alembic's "Can't locate revision" was a traceback box on every command, two from serve."""
    import sqlite3

    from largesse.migrate import shipped_head

    env = {"LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'newer.sqlite3'}"}
    assert _run(tmp_path, "db", "upgrade", env=env).returncode == 0
    with sqlite3.connect(tmp_path / "newer.sqlite3") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    port = free_port()
    for command in (("org", "list"), ("db", "upgrade"), ("ledger", "verify"), ("worker", "--once"),
                    ("serve", "--port", str(port))):
        line = _one_line_error(_run(tmp_path, *command, env=env))
        assert (f"the database is at revision 0099, which this version of Largesse does not know "
                f"(its newest is {shipped_head()})") in line, (command, line)
    assert not _wait_for_health(port, timeout=0.5), "serve started"
    with sqlite3.connect(tmp_path / "newer.sqlite3") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0099",)]


def test_a_query_password_in_the_database_url_is_masked(tmp_path):
    line = _one_line_error(_run(tmp_path, "org", "list", env={
        "LARGESSE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/largesse?password=hunter2"}))
    assert "hunter2" not in line and "password=***" in line, line


def test_free_text_options_longer_than_their_column_are_one_line(org, cli):
    """PostgreSQL refused them with a traceback quoting the statement's parameters (the key's
    hash, the member's address); SQLite stored them."""
    long = "x" * 201
    for command, option in ((("keys", "create", "--org", org.id, "--label", long), "--label"),
                            (("members", "add", "--org", org.id, "--email", "long@example.com", "--name", long),
                             "--name"),
                            (("org", "create", "--name", "Co", "--member-email", "o@example.com",
                              "--member-name", long), "--member-name")):
        result = cli(*command, check=False)
        line = _one_line_error(result)
        assert f"{option} must be at most 200 characters" in line, line
    assert "long@example.com" not in cli("members", "list", "--org", org.id).stdout


# --- items 3 and 4: whole numbers and fees -------------------------------------------------------

def _fees(engine, org_id: str) -> tuple[int, int]:
    with db.read(engine) as conn:
        row = conn.execute(select(organizations.c.fee_basis_points, organizations.c.fee_flat_cents)
                           .where(organizations.c.id == org_id)).one()
    return row.fee_basis_points, row.fee_flat_cents


def test_whole_number_options_have_ranges(org, engine, cli):
    cli("org", "fees", "--org", org.id, "--basis-points", "250", "--flat", "0.50")
    for args, option in [
        (("org", "fees", "--org", org.id, "--basis-points", "99999999999999999999999"), "--basis-points"),
        (("org", "fees", "--org", org.id, "--basis-points", "2147483648"), "--basis-points"),
        (("org", "fees", "--org", org.id, "--basis-points", "-1"), "--basis-points"),
        (("balance", "show", "--org", org.id, "--entries", "99999999999999999999"), "--entries"),
        (("balance", "show", "--org", org.id, "--entries", "-1"), "--entries"),
        (("jobs", "list", "--limit", "99999999999999999999"), "--limit"),
        (("jobs", "list", "--limit", "-1"), "--limit"),
        (("jobs", "retry", "99999999999999999999"), "job_id"),
        (("jobs", "retry", "-1"), "job_id"),
        (("worker", "--concurrency", "-1"), "--concurrency"),
        (("worker", "--webhook-concurrency", "-1"), "--webhook-concurrency"),
        (("invoices", "list", "--limit", "0"), "--limit"),
        (("topups", "list", "--limit", "1001"), "--limit"),
        (("webhooks", "deliveries", "--org", org.id, "--limit", "99999999999999999999"), "--limit"),
        (("webhooks", "deliveries", "--org", org.id, "--limit", "0"), "--limit"),
        (("org", "settings", "--org", org.id, "--reward-expiry-days", "99999999999999999999"),
         "--reward-expiry-days"),
    ]:
        _usage_error(cli(*args, check=False), option)
    assert _fees(engine, org.id) == (250, 50)
    # A kind no job has (it listed nothing, as if the queue held none), as a status is.
    assert "--kind must be one of deliver_reward" in _one_line_error(cli("jobs", "list", "--kind", "bogus",
                                                                         check=False))


def test_org_fees_are_bounded_and_shown_without_options(org, engine, cli):
    cli("org", "fees", "--org", org.id, "--basis-points", "250", "--flat", "0.50")
    for args in (("--basis-points", "100000"), ("--basis-points", "10001"), ("--flat", "100000.01"),
                 ("--flat", "99999999999"), ("--basis-points", "10", "--flat", "1e3")):
        line = _one_line_error(cli("org", "fees", "--org", org.id, *args, check=False))
        assert "fee" in line or "--flat" in line, line
    assert _fees(engine, org.id) == (250, 50), "a refused change changes nothing"

    shown = cli("org", "fees", "--org", org.id)
    assert shown.stdout.strip() == f"fees of {org.id}: 2.50% + 0.50 USD per reward"
    assert json.loads(cli("org", "fees", "--org", org.id, "--json").stdout)["basis_points"] == 250
    assert _fees(engine, org.id) == (250, 50), "showing the fees does not reset them"

    cli("org", "fees", "--org", org.id, "--basis-points", "10000")  # 100 %: the most
    assert _fees(engine, org.id) == (10000, 50), "an option not given keeps its fee"
    cli("org", "fees", "--org", org.id, "--flat", "0", "--basis-points", "0")
    assert _fees(engine, org.id) == (0, 0)


def test_fee_and_threshold_amounts_say_zero_is_allowed_and_what_is_too_large(org, engine, cli):
    """`org fees --flat` and `org approvals --above` take 0 but said "must be a plain positive
    amount"; an amount of 21 digits was "not a plain amount", when its size was the problem."""
    for command, option in ((("org", "fees"), "--flat"), (("org", "approvals"), "--above")):
        line = _one_line_error(cli(*command, "--org", org.id, option, "-1", check=False))
        assert f"{option} must be a plain amount of zero or more" in line and "positive" not in line, line
    huge = "100000000000000000000"
    line = _one_line_error(cli("org", "fees", "--org", org.id, "--flat", huge, check=False))
    assert "--flat is too large: at most 100000.00" in line, line
    line = _one_line_error(cli("org", "fees", "--org", org.id, "--flat", "100000.01", check=False))
    assert "--flat is too large: at most 100000.00" in line, line
    line = _one_line_error(cli("org", "approvals", "--org", org.id, "--above", huge, check=False))
    assert "--above is too large: at most 100000000000.00" in line, line
    line = _one_line_error(cli("balance", "fund", "--org", org.id, "--memo", "m", "--amount", "0", check=False))
    assert "--amount must be greater than 0" in line, line  # a funding of nothing stays refused
    cli("org", "fees", "--org", org.id, "--flat", "00")
    assert _fees(engine, org.id)[1] == 0
    assert "orders above 0.00 USD" in cli("org", "approvals", "--org", org.id, "--above", "0").stdout


# --- item 5: money as it is written ---------------------------------------------------------------

def test_invoice_payment_and_topup_credit_print_two_decimals(org, http, cli):
    invoice = ok(http.post("/invoices", json={"amount": 210.1}))["invoice"]
    paid = cli("invoices", "pay", invoice["id"]).stdout
    assert "credited 210.10 USD;" in paid, paid
    topup = ok(http.post("/topups", json={"funding_source_id": org.funding_source_id,
                                          "idempotency_key": unique("k"), "amount": 100.5}))["topup"]
    credited = cli("topups", "credit", topup["id"]).stdout
    assert f"credited top-up {topup['id']}: 100.50 USD;" in credited, credited
    balance = f"{available_cents(http) // 100}.{available_cents(http) % 100:02d} USD"
    assert credited.strip().endswith(f"balance {balance}"), credited


def test_a_zero_decimal_currency_is_printed_in_whole_units(cli, engine, backend):
    if backend != "sqlite":
        pytest.skip("formatting only: one backend is enough")
    created = cli("org", "create", "--name", "Yen", "--member-email", "yen@example.com", "--currency", "JPY")
    assert "5000 JPY" in created.stdout and "5000.00 JPY" not in created.stdout, created.stdout


# --- item 7: blank names and memos, unknown currencies --------------------------------------------

def test_org_create_refuses_a_blank_name(cli, engine):
    before = json.loads(cli("org", "list", "--json").stdout)["organizations"]
    for name in ("", "   ", "x" * 201):
        line = _one_line_error(cli("org", "create", "--name", name, "--member-email", "b@example.com", check=False))
        assert "name" in line, line
    assert json.loads(cli("org", "list", "--json").stdout)["organizations"] == before
    created = json.loads(cli("org", "create", "--name", "  Trimmed  ", "--member-email", "t@example.com",
                             "--json").stdout)
    assert created["name"] == "Trimmed"


def test_balance_fund_refuses_a_blank_memo(org, http, cli):
    before = available_cents(http)
    for memo in ("", "   "):
        line = _one_line_error(cli("balance", "fund", "--org", org.id, "--amount", "5", "--memo", memo, check=False))
        assert "--memo" in line, line
    assert available_cents(http) == before


# --- item 7: serve in production without a secret --------------------------------------------------

def _serve_output(tmp_path: Path, env: dict) -> str:
    """stderr of `largesse serve` on a new SQLite database, up to the moment it listens."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("LARGESSE_SECRET_KEY", "LARGESSE_PUBLIC_URL", "PROMETHEUS_MULTIPROC_DIR")}
    full_env.update({"LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'prod.sqlite3'}", "LARGESSE_RUN_WORKER": "0",
                     "LARGESSE_MAIL_DIR": str(tmp_path / "mail"), **env})
    with open(log, "w") as out:
        process = subprocess.Popen([LARGESSE, "serve", "--port", str(port)], env=full_env, cwd=tmp_path,
                                   stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while "Uvicorn running" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return log.read_text()


def test_serve_in_production_warns_once_without_a_secret_key(tmp_path):
    unset = [line for line in _serve_output(tmp_path, {"LARGESSE_ENVIRONMENT": "production"}).splitlines()
             if "LARGESSE_SECRET_KEY" in line]
    assert len(unset) == 1 and "WARNING" in unset[0] and "Production must set LARGESSE_SECRET_KEY" in unset[0]
    quiet = _serve_output(tmp_path, {"LARGESSE_ENVIRONMENT": "production", "LARGESSE_SECRET_KEY": "s3cret-value"})
    assert "LARGESSE_SECRET_KEY" not in quiet and "s3cret-value" not in quiet


def test_serve_and_worker_in_production_warn_once_without_a_public_url(tmp_path):
    """Reward emails of a production server without LARGESSE_PUBLIC_URL linked to
    http://127.0.0.1:PORT (a separate worker's to :8000, whatever port serve used), silently."""
    def unset(output: str) -> list[str]:
        return [line for line in output.splitlines() if "LARGESSE_PUBLIC_URL is unset" in line]

    lines = unset(_serve_output(tmp_path, {"LARGESSE_ENVIRONMENT": "production"}))
    assert len(lines) == 1 and "WARNING" in lines[0] and "http://127.0.0.1:" in lines[0], lines
    assert "Production must set LARGESSE_PUBLIC_URL" in lines[0]
    public = {"LARGESSE_PUBLIC_URL": "https://rewards.example.com"}
    assert not unset(_serve_output(tmp_path, {"LARGESSE_ENVIRONMENT": "production", **public}))
    assert not unset(_serve_output(tmp_path, {"LARGESSE_ENVIRONMENT": "sandbox"}))

    env = {k: v for k, v in os.environ.items() if k != "LARGESSE_PUBLIC_URL"}
    env.update({"LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'worker.sqlite3'}",
                "LARGESSE_ENVIRONMENT": "production", "LARGESSE_MAIL_DIR": str(tmp_path / "mail")})

    def worker(extra: dict) -> subprocess.CompletedProcess:
        return subprocess.run([LARGESSE, "worker", "--once"], env={**env, **extra}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)

    done = worker({})
    assert done.returncode == 0 and len(lines := unset(done.stderr)) == 1, done.stderr
    assert "http://127.0.0.1:8000" in lines[0]
    assert not unset(worker(public).stderr)
    assert not unset(worker({"LARGESSE_ENVIRONMENT": "sandbox"}).stderr)


# --- help texts ---------------------------------------------------------------------------------------

def test_help_texts_show_plain_types_and_describe_every_command(tmp_path):
    for command in (("serve",), ("org", "fees"), ("keys", "revoke"), ("keys", "create"), ("worker",),
                    ("jobs", "retry"), ("ledger", "verify")):
        text = _run(tmp_path, *command, "--help").stdout
        for stray in ("<int>", "<str>", "<bool>", "%%"):
            assert stray not in text, (command, stray, text)
    assert "1<=x<=65535" in _run(tmp_path, "serve", "--help").stdout
    members = _run(tmp_path, "members", "--help").stdout
    assert [line for line in members.splitlines() if " list " in line and "members" in line], members
    verify = _run(tmp_path, "ledger", "verify", "--help").stdout
    assert "every money invariant" not in verify and "consistency, not history" in verify, verify
    assert list(tmp_path.iterdir()) == []


# --- serve's links follow its port ------------------------------------------------------------------

def test_serve_links_name_its_own_port_without_a_public_url(tmp_path):
    """Without LARGESSE_PUBLIC_URL, `serve --port N` puts http://127.0.0.1:N in its links (it
    was always :8000, so every emailed link of a server on another port was dead)."""
    import httpx

    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("LARGESSE_PUBLIC_URL", "LARGESSE_SECRET_KEY", "PROMETHEUS_MULTIPROC_DIR")}
    env.update({"LARGESSE_DATABASE_URL": f"sqlite:///{tmp_path / 'links.sqlite3'}", "LARGESSE_RUN_WORKER": "0",
                "LARGESSE_ENVIRONMENT": "sandbox"})
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        process = subprocess.Popen([LARGESSE, "serve", "--host", "0.0.0.0", "--port", str(port)], env=env,
                                   cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "Uvicorn running" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        created = subprocess.run([LARGESSE, "org", "create", "--name", "Links", "--member-email", "m@example.com",
                                  "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert created.returncode == 0, created.stderr
        key = json.loads(created.stdout)["api_key"]
        response = httpx.post(f"http://127.0.0.1:{port}/api/v2/orders", timeout=30,
                              headers={"Authorization": f"Bearer {key}"},
                              json={"payment": {"funding_source_id": "balance"}, "reward": {
                                  "value": {"denomination": 5}, "products": ["PGCNWBOOKS01US"],
                                  "recipient": {"name": "M", "email": "m@example.com"},
                                  "delivery": {"method": "LINK"}}})
        assert response.status_code == 200, response.text
        link = response.json()["order"]["rewards"][0]["delivery"]["link"]
        assert link.startswith(f"http://127.0.0.1:{port}/redeem/"), link
        assert httpx.get(link, timeout=30).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_login_link_says_which_address_it_names_when_public_url_is_unset(cli, org):
    env = {k: v for k, v in os.environ.items() if k != "LARGESSE_PUBLIC_URL"}
    bare = cli("members", "login-link", "--org", org.id, "--email", org.member_email, env=env)
    assert bare.stdout.startswith("http://127.0.0.1:8000/dashboard/signin/link?token=")
    assert "LARGESSE_PUBLIC_URL is unset, so the link names http://127.0.0.1:8000" in bare.stderr
    named = cli("members", "login-link", "--org", org.id, "--email", org.member_email,
                env={"LARGESSE_PUBLIC_URL": "http://127.0.0.1:9000"})
    assert named.stdout.startswith("http://127.0.0.1:9000/dashboard/signin/link?token=") and named.stderr == ""
