"""Redemption signals' email folds ASCII letters only, as addresses compare

Revision ID: 0024
Revises: 0023
"""

import string

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def upgrade() -> None:
    # fraud.service stored a recipient's address lower-cased with Unicode rules; it now folds
    # ASCII letters only (email_address.folded). Stored signals of addresses with non-ASCII
    # letters are recomputed from the reward's recipient, so the same recipient is not taken
    # for a second email by the rules that compare signals. Only such rows can differ.
    conn = op.get_bind()
    signals = sa.table("redemption_signals", sa.column("reward_id", sa.String), sa.column("email", sa.String))
    rewards = sa.table("rewards", sa.column("id", sa.String), sa.column("recipient_email", sa.String))
    non_ascii = (signals.c.email.op("~")("[^ -~]") if conn.dialect.name == "postgresql"
                 else signals.c.email.op("GLOB")("*[^ -~]*"))
    rows = conn.execute(sa.select(signals.c.reward_id, signals.c.email, rewards.c.recipient_email)
                        .join(rewards, rewards.c.id == signals.c.reward_id).where(non_ascii)).all()
    for reward_id, email, recipient in rows:
        folded = (recipient or "").strip().translate(_ASCII_LOWER) or None
        if folded != email:
            conn.execute(signals.update().where(signals.c.reward_id == reward_id).values(email=folded))


def downgrade() -> None:
    # Nothing to undo: the older code reads these addresses as it reads any other.
    pass
