"""`largesse db backup`: a live SQLite database copied while orders keep coming, restored, verified."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from largesse import db
from largesse.bootstrap import prepare
from tests.conftest import ServerThread, create_org
from tests.factories import available_cents, ok, order_body, orders_count


def _largesse(*args: str, url: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(Path(sys.executable).parent / "largesse"), *args], capture_output=True, text=True,
                            env={**os.environ, "LARGESSE_DATABASE_URL": url}, cwd=cwd, timeout=120)
    if check:
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result


def test_backup_of_a_live_database_restores_and_verifies(base_settings, tmp_path, backend):
    if backend != "sqlite":
        pytest.skip("the SQLite backup runs on its own database file")
    url = f"sqlite:///{tmp_path / 'live.sqlite3'}"
    engine = db.make_engine(url)
    prepare(engine)
    server = ServerThread(replace(base_settings, database_url=url), engine).start()
    try:
        org = create_org(engine, server.url)
        stop = threading.Event()
        placed, failures = [], []

        def keep_ordering():
            with org.http() as http:
                while not stop.is_set():
                    response = http.post("/orders", json=order_body(org.member_email, denomination=6))
                    if response.status_code != 200:
                        failures.append(response.text)
                        return
                    placed.append(response)

        def wait_for(count: int) -> None:
            deadline = time.monotonic() + 30
            while len(placed) < count:
                assert not failures and worker.is_alive() and time.monotonic() < deadline, failures
                stop.wait(0.01)

        with org.http() as http:
            for _ in range(5):
                ok(http.post("/orders", json=order_body(org.member_email, denomination=9)))
            worker = threading.Thread(target=keep_ordering)
            worker.start()
            try:
                wait_for(3)  # the backup runs while orders are being written
                result = _largesse("db", "backup", str(tmp_path / "backup.sqlite3"), url=url, cwd=tmp_path)
                assert "backed up" in result.stdout
                during = len(placed)
                wait_for(during + 3)  # and orders go on after it
            finally:
                stop.set()
                worker.join(timeout=60)
            live_orders = orders_count(http)
        assert live_orders >= 5 + during + 3
    finally:
        server.stop()
        engine.dispose()

    # Restore: copy the backup into place as the new database file and point the server at it.
    restored = tmp_path / "restored" / "largesse.sqlite3"
    restored.parent.mkdir()
    shutil.copyfile(tmp_path / "backup.sqlite3", restored)
    restored_url = f"sqlite:///{restored}"
    verified = _largesse("ledger", "verify", "--json", url=restored_url, cwd=tmp_path)
    assert json.loads(verified.stdout) == {"ok": True, "problems": []}
    engine = db.make_engine(restored_url)
    prepare(engine)
    server = ServerThread(replace(base_settings, database_url=restored_url), engine).start()
    try:
        with replace(org, base_url=server.url).http() as http:
            count = orders_count(http)
            assert 5 + 3 <= count < live_orders  # what was committed when the backup began
            assert available_cents(http) == 500000 - 5 * 900 - (count - 5) * 600
            ok(http.post("/orders", json=order_body(org.member_email)))  # the restored database works
    finally:
        server.stop()
        engine.dispose()
    assert _largesse("ledger", "verify", url=restored_url, cwd=tmp_path).returncode == 0


def test_backup_refuses_to_overwrite_and_explains_postgresql(engine, database_url, backend, tmp_path):
    existing = tmp_path / "taken.sqlite3"
    existing.write_text("keep me")
    result = _largesse("db", "backup", str(existing), url=database_url, cwd=tmp_path, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert existing.read_text() == "keep me"
    if backend == "postgresql":
        result = _largesse("db", "backup", str(tmp_path / "new.dump"), url=database_url, cwd=tmp_path, check=False)
        assert result.returncode != 0 and "pg_dump" in result.stderr and "pg_restore" in result.stderr
        assert not (tmp_path / "new.dump").exists()
    else:
        assert "already exists" in result.stderr


def test_backup_takes_the_webhook_key_file_along(tmp_path, backend):
    """Without LARGESSE_SECRET_KEY, a copy without the generated key file restores webhooks that
    cannot sign: the key goes beside the copy, where a server pointed at the copy finds it."""
    if backend != "sqlite":
        pytest.skip("the SQLite backup runs on its own database file")
    live = tmp_path / "live"
    live.mkdir()
    url = f"sqlite:///{live / 'largesse.sqlite3'}"
    _largesse("db", "upgrade", url=url, cwd=tmp_path)
    (live / "largesse-secret.key").write_text("the-generated-secret\n")
    env_without_secret = {k: v for k, v in os.environ.items() if k != "LARGESSE_SECRET_KEY"}
    out = tmp_path / "backups"
    out.mkdir()

    def backup(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).parent / "largesse"), "db", "backup", str(out / name)],
                              capture_output=True, text=True, cwd=tmp_path, timeout=120,
                              env={**env_without_secret, "LARGESSE_DATABASE_URL": url})

    first = backup("one.sqlite3")
    assert first.returncode == 0 and "copied the key file" in first.stdout, first.stderr
    assert (out / "largesse-secret.key").read_text() == "the-generated-secret\n"
    assert (out / "largesse-secret.key").stat().st_mode & 0o777 == 0o600
    (out / "largesse-secret.key").write_text("another\n")
    second = backup("two.sqlite3")
    assert second.returncode == 0 and "is another key file" in second.stderr, second
    assert (out / "largesse-secret.key").read_text() == "another\n"  # never overwritten


def test_a_copy_restored_without_its_key_file_says_which_file(base_settings, tmp_path, backend):
    """Without LARGESSE_SECRET_KEY, a database restored without its key file (or a PostgreSQL
    server started in another directory) got a new key silently, and the 409 said "check
    LARGESSE_SECRET_KEY", a variable the operator never set. `worker` and `serve` now warn as
    they start, naming the missing file, and the 409 names the file it tried."""
    if backend != "sqlite":
        pytest.skip("a SQLite file and its key file, copied apart")
    live, restored = tmp_path / "live", tmp_path / "restored"
    live.mkdir()
    restored.mkdir()
    url = f"sqlite:///{live / 'largesse.sqlite3'}"
    engine = db.make_engine(url)
    prepare(engine)
    settings = replace(base_settings, database_url=url, secret_key=None)
    server = ServerThread(settings, engine).start()
    try:
        org = create_org(engine, server.url)
        with org.http() as http:
            hook = ok(http.post("/webhooks", json={"url": "http://127.0.0.1:9/hooks"}))["webhook"]
    finally:
        server.stop()
        engine.dispose()
    assert (live / "largesse-secret.key").exists()
    shutil.copy(live / "largesse.sqlite3", restored / "largesse.sqlite3")  # the key file left behind
    copy = f"sqlite:///{restored / 'largesse.sqlite3'}"
    env = {k: v for k, v in os.environ.items() if k != "LARGESSE_SECRET_KEY"}
    started = subprocess.run([str(Path(sys.executable).parent / "largesse"), "worker", "--once"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=120, env={**env, "LARGESSE_DATABASE_URL": copy})
    assert started.returncode == 0, started.stderr
    missing = str(restored / "largesse-secret.key")
    assert f"the key file {missing} does not exist" in started.stderr and "1 webhook signing key" in started.stderr
    engine = db.make_engine(copy)
    server = ServerThread(replace(settings, database_url=copy), engine).start()
    try:
        with httpx.Client(base_url=f"{server.url}/api/v2", headers={"Authorization": f"Bearer {org.api_key}"}) as http:
            refused = http.get(f"/webhooks/{hook['id']}")
    finally:
        server.stop()
        engine.dispose()
    assert refused.status_code == 409
    message = refused.json()["errors"]["message"]
    assert f"the key file {missing}" in message and "restore the key file" in message, message
