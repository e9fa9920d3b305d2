"""Make a database ready to serve: migrate, then load the default catalog if it is empty."""

from __future__ import annotations

from sqlalchemy import Engine

from largesse import db
from largesse.catalog import service as catalog
from largesse.migrate import upgrade


def prepare(engine: Engine) -> None:
    upgrade(engine)
    with db.write(engine) as conn:
        catalog.ensure_default_catalog(conn)
