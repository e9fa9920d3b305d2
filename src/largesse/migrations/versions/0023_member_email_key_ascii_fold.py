"""Members' email_key folds ASCII letters only in the local part

Revision ID: 0023
Revises: 0022
"""

import string

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _key(email: str) -> str:
    # orgs.service.email_key as of this revision (a migration keeps its own copy).
    local, _, domain = email.strip().rpartition("@")
    local = local.translate(_ASCII_LOWER).split("+", 1)[0]
    return f"{local}@{domain.lower()}"


def upgrade() -> None:
    # str.lower() folded a KELVIN SIGN local part to "k": a lookalike address passed the
    # sandbox's member check. Only addresses with non-ASCII characters can change key, and the
    # new keys split the old ones, never merge them, so the unique index holds.
    conn = op.get_bind()
    members = sa.table("members", sa.column("id", sa.String), sa.column("email", sa.String),
                       sa.column("email_key", sa.String))
    for member_id, email, key in conn.execute(sa.select(members.c.id, members.c.email, members.c.email_key)):
        if not email.isascii() and _key(email) != key:
            conn.execute(members.update().where(members.c.id == member_id).values(email_key=_key(email)))


def downgrade() -> None:
    # Nothing to undo: the finer keys are still unique, and the older code only finds fewer
    # members by a non-ASCII address (re-folding could merge two members into one key).
    pass
