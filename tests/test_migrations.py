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
