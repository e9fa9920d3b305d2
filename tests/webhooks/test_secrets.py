"""Signing keys: hidden from read-only API keys, encrypted at rest, rotatable, migrated."""

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import select
from tremendous import ApiClient, Configuration, TremendousApi

from largesse import auth, crypto, db
from largesse.migrate import alembic_config, upgrade
from largesse.webhooks.models import webhooks
from tests.delivery.conftest import wait_for
from tests.webhooks.kit import settle


def _read_only_key(engine, org) -> str:
    with db.write(engine) as conn:
        return auth.issue_key(conn, organization_id=org.id, permission="read_only")[1]


def test_read_only_keys_never_see_the_signing_key(org, http, engine, receiver):
    created = http.post("/webhooks", json={"url": receiver.url}).json()["webhook"]
    assert len(created["private_key"]) == 64 and created["signing_secret"].startswith("whsec_")
    key = _read_only_key(engine, org)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{org.base_url}/api/v2", headers=headers, timeout=30) as ro:
        listed = ro.get("/webhooks").json()["webhooks"]
        single = ro.get(f"/webhooks/{created['id']}").json()["webhook"]
        assert listed == [{"id": created["id"], "url": receiver.url}]
        assert single == {"id": created["id"], "url": receiver.url}
        assert ro.post("/webhooks", json={"url": receiver.url}).status_code == 403
        assert created["private_key"] not in ro.get(f"/webhooks/{created['id']}/deliveries").text
    client = TremendousApi(ApiClient(Configuration(host=f"{org.base_url}/api/v2", access_token=key)))
    assert client.get_webhook(created["id"]).webhook.private_key is None
    assert client.list_webhooks().webhooks[0].url == receiver.url
    # Read-write keys still see it, unchanged.
    assert org.api().get_webhook(created["id"]).webhook.private_key == created["private_key"]



def test_read_only_keys_see_the_url_without_its_secrets(org, http, engine, receiver, fast):
    """A password or a ?token= in the webhook's URL is a credential of the receiver: read-only
    keys (reporting tools) get the URL with both masked; read-write keys get it as set."""
    secret_url = receiver.url.replace("http://", "http://hook:pa55word@", 1) + "?token=t0ken&team=7"
    created = http.post("/webhooks", json={"url": secret_url}).json()["webhook"]
    assert created["url"] == secret_url
    key = _read_only_key(engine, org)
    client = TremendousApi(ApiClient(Configuration(host=f"{org.base_url}/api/v2", access_token=key)))
    masked = receiver.url.replace("http://", "http://hook:***@", 1) + "?token=***&team=7"
    assert client.get_webhook(created["id"]).webhook.url == masked
    assert client.list_webhooks().webhooks[0].url == masked
    assert org.api().get_webhook(created["id"]).webhook.url == secret_url
    # The delivery log names the URL of each attempt: masked alike.
    settings = fast()
    settle(engine, settings)
    http.post(f"/webhooks/{created['id']}/simulate", json={"event": "ORDERS.CREATED"})
    log = f"/webhooks/{created['id']}/deliveries"
    wait_for(lambda: http.get(log).json()["total_count"] == 1, settings=settings, engine=engine)
    attempt = http.get(log).json()["deliveries"][0]
    assert attempt["url"] == secret_url
    with httpx.Client(base_url=f"{org.base_url}/api/v2", headers={"Authorization": f"Bearer {key}"}) as ro:
        assert ro.get(log).json()["deliveries"][0]["url"] == masked
        assert ro.get(f"{log}/{attempt['id']}").json()["delivery"]["url"] == masked


SCAN_FILES = """
import sqlite3, sys
from pathlib import Path
path, secret = Path(sys.argv[1]), sys.argv[2].encode()
conn = sqlite3.connect(path)
conn.execute("PRAGMA wal_checkpoint(FULL)")
conn.close()
files = [p for p in (path, Path(f"{path}-wal")) if p.exists()]
print("present" if any(secret in p.read_bytes() for p in files) else "absent")
"""


def test_database_holds_no_usable_key(org, http, engine, database_url, backend):
    created = http.post("/webhooks", json={"url": "http://127.0.0.1:9/hooks"}).json()["webhook"]
    secret = created["private_key"]
    with db.read(engine) as conn:
        row = conn.execute(select(webhooks).where(webhooks.c.id == created["id"])).first()
    assert row.private_key is None and secret not in row.private_key_encrypted
    if backend == "sqlite":  # the whole file, as a dump would copy it
        # Read in another process: closing any descriptor of the file in this process would drop
        # the POSIX locks SQLite holds through the server's connections and corrupt the database.
        path = Path(sa.engine.make_url(database_url).database)
        scan = subprocess.run([sys.executable, "-c", SCAN_FILES, str(path), secret], capture_output=True,
                              text=True, timeout=60)
        assert scan.returncode == 0, scan.stdout + scan.stderr
        assert scan.stdout.strip() == "absent"
    http.delete(f"/webhooks/{created['id']}")


def test_rotation_and_wrong_secret(org, http, engine, make_server, base_settings):
    created = http.post("/webhooks", json={"url": "http://127.0.0.1:9/hooks"}).json()["webhook"]
    current = crypto.keybox(base_settings)  # this session's secret: the generated key file, unless configured
    old_secret = base_settings.secret_keys or [crypto.load_or_create_secret(
        crypto.key_file_path(base_settings.database_url))]
    rotated = make_server(secret_key=",".join(["a-brand-new-secret", *old_secret]))
    with httpx.Client(base_url=f"{rotated.url}/api/v2", headers={"Authorization": f"Bearer {org.api_key}"}) as new:
        assert new.get(f"/webhooks/{created['id']}").json()["webhook"]["private_key"] == created["private_key"]
    with db.read(engine) as conn:
        token = conn.execute(select(webhooks.c.private_key_encrypted)
                             .where(webhooks.c.id == created["id"])).scalar_one()
    assert crypto.KeyBox(["a-brand-new-secret"]).decrypt(token) == (created["private_key"], False)
    # The old secret alone no longer opens it: a clear 409, never a 5xx.
    with pytest.raises(crypto.KeyUnavailable):
        current.decrypt(token)
    refused = http.get(f"/webhooks/{created['id']}")
    assert refused.status_code == 409 and "LARGESSE_SECRET_KEY" in refused.json()["errors"]["message"]
    assert http.delete(f"/webhooks/{created['id']}").status_code == 204


@pytest.fixture(params=["sqlite", "postgresql"])
def old_database(request, tmp_path):
    """An empty database of either backend, for migrating from revision 0005."""
    if request.param == "sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")  # foreign keys off
        yield engine
        engine.dispose()
        return
    from tests.conftest import _pg_reachable, empty_pg_database, pg_missing

    if not _pg_reachable():
        pg_missing("PostgreSQL is not reachable")
    with empty_pg_database("largesse_mig") as url:
        engine = db.make_engine(url)
        yield engine
        engine.dispose()


def test_migration_encrypts_existing_plaintext_keys(old_database, monkeypatch):
    engine = old_database
    upgrade(engine, "0005")
    plaintext = "ab" * 32
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # the row needs no organization (superuser test role)
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        conn.execute(sa.text("INSERT INTO webhooks (id, organization_id, url, private_key, created_at, updated_at) "
                             "VALUES ('HOOK0001', 'ORG00001', 'http://127.0.0.1:9/', :k, '2026-01-01', '2026-01-01')"),
                     {"k": plaintext})
    monkeypatch.setenv("LARGESSE_SECRET_KEY", "migration-secret")
    upgrade(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT private_key, private_key_encrypted FROM webhooks")).one()
    assert row.private_key is None
    assert crypto.KeyBox(["migration-secret"]).decrypt(row.private_key_encrypted)[0] == plaintext
    with engine.connect() as conn:  # and back: the plaintext returns
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0005")
        conn.commit()
        assert conn.execute(sa.text("SELECT private_key FROM webhooks")).scalar_one() == plaintext


def test_key_file_is_created_once(tmp_path):
    path = tmp_path / "sub" / crypto.KEY_FILE_NAME
    first = crypto.load_or_create_secret(path)
    assert crypto.load_or_create_secret(path) == first and len(first) >= 40
    assert path.stat().st_mode & 0o777 == 0o600
    assert crypto.key_file_path(f"sqlite:///{tmp_path}/db.sqlite3") == tmp_path / crypto.KEY_FILE_NAME
