"""Orders and connected organizations walk an index in their list's order: orders by (created_at, id),
and by campaign; connected organizations' index holds the live ones only

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_LIVE = sa.text("deleted_at IS NULL")


def _replace(table: str, old: str, new: str, columns: list[str], **where) -> None:
    """Index `new` on `table` instead of `old`; either step may be done already (a database at
    head whose alembic_version was set back, as tests/test_migrations.py does, re-runs this)."""
    names = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes(table)}
    if new not in names:
        op.create_index(new, table, columns, **where)
    if old in names:
        op.drop_index(old, table_name=table)


def upgrade() -> None:
    # GET /orders, newest first by (created_at, id): 0021 gave every other list an index that
    # ends with its whole ORDER BY, but orders kept (organization_id, created_at). Right after a
    # bulk load of 100,000 orders PostgreSQL read them all through ix_orders_org_campaign and
    # sorted them (112 ms for limit=100, 395-600 ms at offset=50000 with an external sort);
    # SQLite sorted each created_at's ids in a temporary B-tree (docs/benchmarks.md, "twentieth
    # pass"). The old index's prefix is the new one's; the dashboard's order pages use it too.
    _replace("orders", "ix_orders_org_created", "ix_orders_org_created_id", ["organization_id", "created_at", "id"])
    # GET /orders?campaign_id=: the campaign's orders in list order, so a campaign with no orders
    # is one seek, not a walk of every order looking up its campaign.
    _replace("orders", "ix_orders_org_campaign", "ix_orders_org_campaign_created_id",
             ["organization_id", "campaign_id", "created_at", "id"])
    # GET /connected_organizations lists the live ones (deleted_at IS NULL), which the partial
    # uq_connected_organizations_client_id also holds: PostgreSQL without statistics preferred it
    # and sorted every live row (182-238 ms at 99,000). The list's index is partial the same way.
    _replace("connected_organizations", "ix_connected_organizations_platform_created_id",
             "ix_connected_organizations_live_created_id", ["platform_organization_id", "created_at", "id"],
             sqlite_where=_LIVE, postgresql_where=_LIVE)


def downgrade() -> None:
    op.create_index("ix_connected_organizations_platform_created_id", "connected_organizations",
                    ["platform_organization_id", "created_at", "id"])
    op.drop_index("ix_connected_organizations_live_created_id", table_name="connected_organizations")
    op.create_index("ix_orders_org_campaign", "orders", ["organization_id", "campaign_id"])
    op.drop_index("ix_orders_org_campaign_created_id", table_name="orders")
    op.create_index("ix_orders_org_created", "orders", ["organization_id", "created_at"])
    op.drop_index("ix_orders_org_created_id", table_name="orders")
