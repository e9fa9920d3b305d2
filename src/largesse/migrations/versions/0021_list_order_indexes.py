"""The other lists in their order: balance transactions, fraud reviews, invoices, top-ups, connected organizations

Revision ID: 0021
Revises: 0020
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Each index ends with its list's whole ORDER BY, so a page is a walk of the index that stops
    # after offset + limit entries, on SQLite and on PostgreSQL, with or without statistics
    # (docs/benchmarks.md, "thirteenth pass"). Before, both planners read every row of the
    # organization and sorted them (145-600 ms for the first page of 100,000 ledger entries).
    # GET /balance_transactions, newest first by id; created_at last, so its filters are checked
    # in the index, not on each row.
    op.create_index("ix_ledger_entries_org_id", "ledger_entries", ["organization_id", "id", "created_at"])
    # GET /fraud_reviews, newest redemption first (redeemed_at, reward_id); by status too.
    op.create_index("ix_fraud_reviews_org_redeemed_id", "fraud_reviews",
                    ["organization_id", "redeemed_at", "reward_id"])
    op.create_index("ix_fraud_reviews_org_status_redeemed_id", "fraud_reviews",
                    ["organization_id", "status", "redeemed_at", "reward_id"])
    op.drop_index("ix_fraud_reviews_org_redeemed", table_name="fraud_reviews")
    # GET /invoices, GET /topups, GET /connected_organizations: newest first by (created_at, id).
    op.create_index("ix_invoices_org_created_id", "invoices", ["organization_id", "created_at", "id"])
    op.drop_index("ix_invoices_org_created", table_name="invoices")
    op.create_index("ix_topups_org_created_id", "topups", ["organization_id", "created_at", "id"])
    op.drop_index("ix_topups_org_created", table_name="topups")
    op.create_index("ix_connected_organizations_platform_created_id", "connected_organizations",
                    ["platform_organization_id", "created_at", "id"])
    op.drop_index("ix_connected_organizations_platform", table_name="connected_organizations")


def downgrade() -> None:
    op.create_index("ix_connected_organizations_platform", "connected_organizations",
                    ["platform_organization_id", "created_at"])
    op.drop_index("ix_connected_organizations_platform_created_id", table_name="connected_organizations")
    op.create_index("ix_topups_org_created", "topups", ["organization_id", "created_at"])
    op.drop_index("ix_topups_org_created_id", table_name="topups")
    op.create_index("ix_invoices_org_created", "invoices", ["organization_id", "created_at"])
    op.drop_index("ix_invoices_org_created_id", table_name="invoices")
    op.create_index("ix_fraud_reviews_org_redeemed", "fraud_reviews", ["organization_id", "redeemed_at"])
    op.drop_index("ix_fraud_reviews_org_status_redeemed_id", table_name="fraud_reviews")
    op.drop_index("ix_fraud_reviews_org_redeemed_id", table_name="fraud_reviews")
    op.drop_index("ix_ledger_entries_org_id", table_name="ledger_entries")
