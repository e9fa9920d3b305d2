"""Order approvals

- organizations.approval_mode ("off" | "api" | "all" | "above"), approval_above_cents,
  approval_api_allowed: which new orders wait as PENDING APPROVAL, and whether API keys may
  approve or reject them (orders/approvals.py, docs/approvals.md).
- orders.approved_at/_by_key_id/_by_member_id, rejected_at/_by_key_id/_by_member_id: who
  decided, and when.
- uq_ledger_entries_order_refund: a rejected order's total is refunded at most once.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_DECISION_COLUMNS = ("approved", "rejected")


def upgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.add_column(sa.Column("approval_mode", sa.String(length=10), nullable=False, server_default="off"))
        batch.add_column(sa.Column("approval_above_cents", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("approval_api_allowed", sa.Boolean(), nullable=False,
                                   server_default=sa.true()))
    with op.batch_alter_table("orders") as batch:
        for decision in _DECISION_COLUMNS:
            batch.add_column(sa.Column(f"{decision}_at", sa.DateTime(), nullable=True))
            batch.add_column(sa.Column(f"{decision}_by_key_id", sa.String(length=20), nullable=True))
            batch.add_column(sa.Column(f"{decision}_by_member_id", sa.String(length=20), nullable=True))
    op.create_index("uq_ledger_entries_order_refund", "ledger_entries", ["order_id"], unique=True,
                    sqlite_where=sa.text("kind = 'order_refund'"),
                    postgresql_where=sa.text("kind = 'order_refund'"))


def downgrade() -> None:
    op.drop_index("uq_ledger_entries_order_refund", table_name="ledger_entries")
    with op.batch_alter_table("orders") as batch:
        for decision in _DECISION_COLUMNS:
            for suffix in ("by_member_id", "by_key_id", "at"):
                batch.drop_column(f"{decision}_{suffix}")
    with op.batch_alter_table("organizations") as batch:
        for name in ("approval_api_allowed", "approval_above_cents", "approval_mode"):
            batch.drop_column(name)
