"""The reviewed reward's created_at on its fraud review, in the list's indexes

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # GET /fraud_reviews?created_at[gte]=... filters by the *reward's* creation: copied onto the
    # review (rewards.created_at never changes) and kept last in the list's indexes, the filter is
    # checked in the index walk instead of one reward lookup per review walked (64-176 ms for a
    # range starting 25,000 reviews deep, docs/benchmarks.md, thirteenth pass).
    # A plain ADD COLUMN on both databases (a batch copy on SQLite would reflect rewards, the
    # foreign key's table, and warn about its expression index).
    op.add_column("fraud_reviews", sa.Column("reward_created_at", sa.DateTime(), nullable=True))
    op.execute("UPDATE fraud_reviews SET reward_created_at = "
               "(SELECT rewards.created_at FROM rewards WHERE rewards.id = fraud_reviews.reward_id)")
    op.drop_index("ix_fraud_reviews_org_redeemed_id", table_name="fraud_reviews")
    op.drop_index("ix_fraud_reviews_org_status_redeemed_id", table_name="fraud_reviews")
    op.create_index("ix_fraud_reviews_org_redeemed_id", "fraud_reviews",
                    ["organization_id", "redeemed_at", "reward_id", "reward_created_at"])
    op.create_index("ix_fraud_reviews_org_status_redeemed_id", "fraud_reviews",
                    ["organization_id", "status", "redeemed_at", "reward_id", "reward_created_at"])


def downgrade() -> None:
    op.drop_index("ix_fraud_reviews_org_status_redeemed_id", table_name="fraud_reviews")
    op.drop_index("ix_fraud_reviews_org_redeemed_id", table_name="fraud_reviews")
    op.create_index("ix_fraud_reviews_org_status_redeemed_id", "fraud_reviews",
                    ["organization_id", "status", "redeemed_at", "reward_id"])
    op.create_index("ix_fraud_reviews_org_redeemed_id", "fraud_reviews", ["organization_id", "redeemed_at", "reward_id"])
    # Plain DROP COLUMN (SQLite 3.35+, as Python 3.11 ships): no batch copy, as in upgrade.
    op.execute("ALTER TABLE fraud_reviews DROP COLUMN reward_created_at")
