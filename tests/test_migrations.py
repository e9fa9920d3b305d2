"""The shipped migrations: the fast "already at head" check agrees with Alembic."""

from __future__ import annotations

from sqlalchemy import text

from largesse import db
from largesse.migrate import alembic_head, is_at_head, shipped_head, upgrade


def test_the_head_read_from_the_scripts_is_alembics():
    assert shipped_head() == alembic_head()


def test_an_older_database_is_upgraded_and_a_current_one_left_alone(tmp_path):
    engine = db.make_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")
    assert not is_at_head(engine)  # never migrated: no alembic_version table
    upgrade(engine, "0014")
    assert not is_at_head(engine)
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == alembic_head()
    assert is_at_head(engine)
    upgrade(engine)  # at head: a no-op
    engine.dispose()


def test_the_address_foldings_are_migrated_on_stored_rows(engine, org, http):
    """0023 re-keys members and 0024 re-folds redemption signals whose addresses have non-ASCII
    letters, which the older code lower-cased with Unicode rules ("Ärger" became "ärger": another
    mailbox's key, and a recipient whose signals no longer matched their own address)."""
    import secrets

    from sqlalchemy import insert, select, update

    from largesse.fraud.models import redemption_signals
    from largesse.orgs.models import members
    from largesse.timeutil import utcnow
    from tests.factories import ok, order_body

    address = f"Ärger-{secrets.token_hex(3)}@Example.org"
    ok(http.post("/members", json={"email": address, "role": "MEMBER"}))
    reward = ok(http.post("/orders", json=order_body(address, method="LINK")))["order"]["rewards"][0]["id"]
    with db.write(engine) as conn:  # the rows as the older code wrote them
        conn.execute(update(members).where(members.c.email == address).values(email_key=address.lower()))
        conn.execute(insert(redemption_signals).values(reward_id=reward, organization_id=org.id,
                                                       email=address.lower(), created_at=utcnow()))
        conn.execute(text("UPDATE alembic_version SET version_num = '0022'"))
    upgrade(engine)
    folded = "Ä" + address[1:].lower()
    with db.read(engine) as conn:
        assert conn.execute(select(members.c.email_key).where(members.c.email == address)).scalar_one() == folded
        assert conn.execute(select(redemption_signals.c.email).where(
            redemption_signals.c.reward_id == reward)).scalar_one() == folded
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == alembic_head()


def _insert_filled(conn, table: str, **given) -> None:
    """A row of `table` as the schema of the moment has it: the given values, and a plain value
    of its type for every other NOT NULL column without a default."""
    from sqlalchemy import inspect

    values = dict(given)
    for column in inspect(conn).get_columns(table):
        if column["name"] in values or column["nullable"] or column.get("default") is not None:
            continue
        kind = str(column["type"]).upper()
        values[column["name"]] = (
            0 if any(k in kind for k in ("INT", "BOOL", "NUMERIC")) else
            "2026-01-01 00:00:00.000000" if "DATETIME" in kind or "TIMESTAMP" in kind else
            "2026-01-01" if "DATE" in kind else "{}" if "JSON" in kind else "x")
    names = ", ".join(values)
    conn.execute(text(f"INSERT INTO {table} ({names}) VALUES ({', '.join(':' + n for n in values)})"), values)


def test_an_sqlite_database_with_rows_is_upgraded_from_every_old_revision(tmp_path):
    """Migrations that rebuild a table on SQLite (batch_alter_table: copy, DROP, rename) failed
    with "FOREIGN KEY constraint failed" once other rows pointed at it: a database at 0009 or
    0010 with one organization could not be upgraded, and every command refused to run. They run
    with foreign keys off, as SQLite documents for such changes, checked before they commit."""
    for start in ("0009", "0010"):
        engine = db.make_engine(f"sqlite:///{tmp_path / f'at-{start}.sqlite3'}")
        upgrade(engine, start)
        with engine.begin() as conn:
            _insert_filled(conn, "organizations", id="org1", name="Acme")
            _insert_filled(conn, "members", id="mem1", organization_id="org1", email="ops@example.com")
            _insert_filled(conn, "funding_sources", id="fs1", organization_id="org1")
            _insert_filled(conn, "orders", id="ord1", organization_id="org1", funding_source_id="fs1")
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == alembic_head()
            assert conn.execute(text("SELECT name FROM organizations WHERE id = 'org1'")).scalar() == "Acme"
            assert conn.execute(text("SELECT organization_id FROM orders WHERE id = 'ord1'")).scalar() == "org1"
            assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1  # on again for the pool
        engine.dispose()


def test_organizations_get_the_root_of_their_line_of_parents(tmp_path):
    """0026: each organization's root_organization_id is the top of its line of parents (itself
    without one), which the webhook threads' share per customer counts by."""
    engine = db.make_engine(f"sqlite:///{tmp_path / 'roots.sqlite3'}")
    upgrade(engine, "0025")
    lines = {"top": None, "child": "top", "grandchild": "child", "alone": None, "orphan": "gone"}
    with engine.begin() as conn:
        for org_id, parent in lines.items():
            _insert_filled(conn, "organizations", id=org_id, name=org_id, parent_organization_id=parent)
    upgrade(engine)
    with engine.connect() as conn:
        roots = dict(conn.execute(text("SELECT id, root_organization_id FROM organizations")).all())
    assert roots == {"top": "top", "child": "top", "grandchild": "top", "alone": "alone", "orphan": "gone"}
    engine.dispose()


def test_a_row_that_pointed_nowhere_before_does_not_block_an_upgrade(tmp_path):
    """The foreign-key check after a migration refuses what the migration broke, not what was
    broken before it: one old orphan row made every upgrade, so every command, refuse to run."""
    import sqlite3

    path = tmp_path / "orphan.sqlite3"
    engine = db.make_engine(f"sqlite:///{path}")
    upgrade(engine, "0025")
    raw = sqlite3.connect(path)  # foreign keys off: as a row written by hand, or by a tool
    with raw:
        raw.execute("INSERT INTO fields (id, organization_id, label, data_type, required, scope, created_at) "
                    "VALUES ('F1', 'NO-SUCH-ORG', 'x', 'Text', 0, 'REWARD', '2026-01-01 00:00:00')")
    raw.close()
    upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == alembic_head()
    engine.dispose()
