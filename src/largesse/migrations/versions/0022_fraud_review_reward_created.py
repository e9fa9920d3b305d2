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
    with op.batch_alter_table("fraud_reviews") as batch:
        batch.add_column(sa.Column("reward_created_at", sa.DateTime(), nullable=True))
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
    with op.batch_alter_table("fraud_reviews") as batch:
        batch.drop_column("reward_created_at")
