"""funding: operator credits with a reference (credited once)

Revision ID: 0008
Revises: 0007

`largesse balance fund --reference R` stores R on its ledger entry; the unique index on
(organization_id, reference) is what makes a repeated or concurrent run credit once: the
second INSERT fails and its transaction (balance update included) rolls back. Entries
without a reference (NULL) are never equal to each other, so they are unaffected.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ledger_entries", sa.Column("reference", sa.String(200), nullable=True))
    op.create_index("uq_ledger_entries_org_reference", "ledger_entries", ["organization_id", "reference"],
                    unique=True)


def downgrade() -> None:
    op.drop_index("uq_ledger_entries_org_reference", table_name="ledger_entries")
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("reference")
