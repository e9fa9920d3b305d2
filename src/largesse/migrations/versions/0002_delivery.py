"""delivery schema additions

Revision ID: 0002
Revises: 0001

jobs.dedupe_key: a periodic job (the expiry sweep) is one row that reschedules itself;
a unique key lets every worker "ensure it exists" without ever creating two.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dedupe_key", sa.String(length=60), nullable=True))
        batch_op.create_index("uq_jobs_dedupe_key", ["dedupe_key"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("uq_jobs_dedupe_key")
        batch_op.drop_column("dedupe_key")
