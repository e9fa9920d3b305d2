"""The dashboard's approval queue and its count: an index on orders by status

Revision ID: 0016
Revises: 0014
"""

from alembic import op

revision = "0016"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The approvals page lists an organization's PENDING APPROVAL orders oldest first, and the
    # overview counts them: without it both walk every order of the organization (measured
    # 250-330 ms with 100,000 orders on SQLite; docs/dashboard.md).
    op.create_index("ix_orders_org_status_created", "orders", ["organization_id", "status", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_orders_org_status_created", table_name="orders")
