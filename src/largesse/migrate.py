"""Schema migrations, shipped inside the package and applied programmatically.

`largesse serve` and `largesse db upgrade` call upgrade(); a brand-new empty database
gets the whole schema. Concurrent upgrades (several processes starting at once) wait for each
other instead of racing: on PostgreSQL through an advisory lock, on SQLite through an flock of
a lock file beside the database (_sqlite_migration_lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

MIGRATIONS = Path(__file__).parent / "migrations"
ADVISORY_LOCK_ID = 7_245_811_903


_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=\n]*=\s*['\"]?([^'\"\s]+)", re.MULTILINE)


class MigrationError(RuntimeError):
    """A migration that cannot or must not run; its message is the operator's one line."""


@functools.cache
def _shipped() -> tuple[dict[str, str], bool]:
    """({revision: down_revision} of the shipped scripts, whether every script named its
    revision), read once per process from their text, without importing them (or Alembic)."""
    graph, complete = {}, True
    for path in (MIGRATIONS / "versions").glob("*.py"):
        found = dict(_REVISION_LINE.findall(path.read_text()))
        if "revision" not in found:
            complete = False
            continue
        graph[found["revision"]] = found.get("down_revision", "None")
    return graph, complete


def shipped_revisions() -> set[str]:
    """Every revision this version ships (that its script's text names)."""
    return set(_shipped()[0])


def shipped_head() -> str | None:
    """The newest shipped revision: the one that no script names as its down_revision; None if
    a script names no revision or that is not exactly one (then Alembic decides)."""
    graph, complete = _shipped()
    heads = set(graph) - set(graph.values())
    return heads.pop() if complete and len(heads) == 1 else None


def is_at_head(engine: Engine) -> bool:
    """True when the database's alembic_version is the shipped head: nothing to upgrade.

    Every command and process start calls upgrade(); this check lets the common case (an
    up-to-date database) skip loading Alembic and all the scripts, about 0.4 s of CPU per
    `largesse` command."""
    head = shipped_head()
    if head is None:
        return False
    try:
        with engine.connect() as conn:
            versions = [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]
    except DBAPIError:  # never migrated: no alembic_version table yet
        return False
    return versions == [head]


def alembic_head() -> str:
    """The head as Alembic computes it (loads every script)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def alembic_config(url: str | None = None):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


@contextlib.contextmanager
def _sqlite_migration_lock(engine: Engine, timeout: float = 120.0) -> Iterator[None]:
    """Hold an exclusive flock of `<database>-migrate.lock` (beside the database, as its -wal
    and -shm files are) while migrating. Without it, `serve`, `worker` and `org create` started
    together on a new database raced: one migrated, the others met "database is locked" or
    tables that already existed. Not a lock on the database file itself: closing another
    descriptor of it would drop the POSIX locks SQLite holds in this process (flock and those
    do not interact on Linux). A folder where the lock file cannot be made or locked (read-only,
    a filesystem without flock) migrates without it, as before."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    try:
        lock = os.open(f"{Path(database).resolve()}-migrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another process has been migrating {database} for {timeout:.0f} s") from None
                time.sleep(0.05)
            except OSError:  # ENOLCK, EOPNOTSUPP: no flock on this filesystem
                break
        yield
    finally:
        os.close(lock)  # releases the flock


# What this process's last upgrade() did: (the revision it found, None for a new database;
# the revision it left), read under the migration lock. None when it found nothing to do.
# `largesse db upgrade` reports from it: two of them at once both said they had migrated.
last_upgrade: tuple[str | None, str | None] | None = None


def upgrade(engine: Engine, revision: str = "head") -> None:
    global last_upgrade
    last_upgrade = None
    if revision == "head" and is_at_head(engine):
        return
    with _sqlite_migration_lock(engine):
        if revision == "head" and is_at_head(engine):  # another process migrated while we waited
            return
        _upgrade(engine, revision)


def _broken_foreign_keys(conn) -> set[tuple]:
    """SQLite's foreign_key_check: (table, rowid, parent table, key index) of rows pointing nowhere."""
    return {tuple(row) for row in conn.exec_driver_sql("PRAGMA foreign_key_check").all()}


def current_revision(conn) -> str | None:
    """The database's revision, None before its first migration (no failing query: on
    PostgreSQL one would abort the migration's transaction)."""
    from sqlalchemy import inspect

    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _upgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": ADVISORY_LOCK_ID})
            conn.commit()
        elif sqlite:
            # A migration that rebuilds a table (batch_alter_table: a copy, DROP TABLE, a rename)
            # fails with foreign keys on once other rows point at the table. SQLite's documented
            # procedure: foreign keys off (outside a transaction: inside one the pragma does
            # nothing), the change, foreign_key_check before the commit, foreign keys on again.
            raw = conn.connection.dbapi_connection
            foreign_keys = raw.execute("PRAGMA foreign_keys").fetchone()[0]  # on: the app's connections
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            # Read in the migration's own transaction (which Alembic then joins, committed below
            # after the checks): a failure rolls every step back, as one transaction.
            found = current_revision(conn)
            if found is not None and found not in shipped_revisions():
                # A newer Largesse migrated it (a package rolled back, a newer backup restored):
                # Alembic's "Can't locate revision" was a traceback on every command.
                raise MigrationError(
                    f"the database is at revision {found}, which this version of Largesse does not know "
                    f"(its newest is {shipped_head() or alembic_head()}): run the newer Largesse, "
                    "or restore a backup made by this one")
            # Rows that pointed nowhere before are not the migration's doing (nor its to refuse).
            broken_before = _broken_foreign_keys(conn) if sqlite and foreign_keys else set()
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            if sqlite and foreign_keys:  # (a connection that enforces none, some tests', checks none)
                broken = sorted(_broken_foreign_keys(conn) - broken_before)
                if broken:
                    raise MigrationError(f"the migration to {revision} left {len(broken)} rows whose foreign keys "
                                       f"point nowhere (first: {tuple(broken[0])}); nothing was changed")
            left = current_revision(conn)
            conn.commit()
            global last_upgrade
            last_upgrade = (found, left) if found != left else None
        finally:
            if conn.dialect.name == "postgresql":
                conn.rollback()  # a failed migration's aborted transaction (nothing after a commit)
                conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": ADVISORY_LOCK_ID})
                conn.commit()
            elif sqlite:
                conn.rollback()  # nothing left to roll back after a commit; the pragma needs no transaction
                raw.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
