"""webhooks

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("private_key", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name=op.f("fk_webhooks_organization_id_organizations")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
        sa.UniqueConstraint("organization_id", name=op.f("uq_webhooks_organization_id")),
    )


def downgrade() -> None:
    op.drop_table("webhooks")
