"""redemption schema additions: rate-limit counters and the CSRF secret

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "redemption_rate_limits",
        sa.Column("bucket", sa.String(length=100), nullable=False),
        sa.Column("window_start", sa.Integer(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", "window_start", name=op.f("pk_redemption_rate_limits")),
    )
    op.create_index("ix_redemption_rate_limits_window", "redemption_rate_limits", ["window_start"])
    op.create_table(
        "redemption_secrets",
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("value", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_redemption_secrets")),
    )


def downgrade() -> None:
    op.drop_table("redemption_secrets")
    op.drop_index("ix_redemption_rate_limits_window", table_name="redemption_rate_limits")
    op.drop_table("redemption_rate_limits")
