"""GET /rewards lists an organization's rewards newest first by (created_at, id): an index in that order

Revision ID: 0017
Revises: 0016
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ix_rewards_org_created lacked the list's tie-breaker (id): without statistics (right after a
    # bulk load) PostgreSQL sorted every reward of the organization for one page (198 ms at
    # 100,000). With id in the index the page is a backward index scan that stops after
    # offset + limit entries whatever the statistics; it serves every use of the old index.
    op.create_index("ix_rewards_org_created_id", "rewards", ["organization_id", "created_at", "id"])
    op.drop_index("ix_rewards_org_created", table_name="rewards")


def downgrade() -> None:
    op.create_index("ix_rewards_org_created", "rewards", ["organization_id", "created_at"])
    op.drop_index("ix_rewards_org_created_id", table_name="rewards")
