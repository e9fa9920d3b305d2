"""money side: top-ups, invoices, exchange rates, several balances, converted orders

- funding_sources: unique (organization_id, method, currency_code) instead of (organization_id,
  method): an organization may hold a balance in each of several currencies.
- orders.fx_*: a converted order's reward currency, amounts in it, rate and rate date;
  rewards.charged_cents: a converted reward's value plus fee in the balance's currency.
- topups, invoices, forex_rates (docs/funding.md).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("funding_sources") as batch:
        batch.drop_constraint("uq_funding_sources_organization_id_method", type_="unique")
        batch.create_unique_constraint("uq_funding_sources_organization_id_method_currency_code",
                                       ["organization_id", "method", "currency_code"])
    with op.batch_alter_table("orders") as batch:
        batch.add_column(sa.Column("fx_currency_code", sa.String(3), nullable=True))
        batch.add_column(sa.Column("fx_rate", sa.String(40), nullable=True))
        batch.add_column(sa.Column("fx_rate_date", sa.Date(), nullable=True))
        batch.add_column(sa.Column("fx_subtotal_cents", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("fx_fees_cents", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("fx_total_cents", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("rewards") as batch:
        batch.add_column(sa.Column("charged_cents", sa.BigInteger(), nullable=True))
    op.create_table(
        "forex_rates",
        sa.Column("currency_code", sa.String(3), nullable=False),
        sa.Column("rate", sa.String(40), nullable=False),
        sa.Column("as_of", sa.Date(), nullable=False),
        sa.Column("imported_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("currency_code", name="pk_forex_rates"),
    )
    op.create_table(
        "topups",
        sa.Column("id", sa.String(20), nullable=False),
        sa.Column("organization_id", sa.String(20), nullable=False),
        sa.Column("funding_source_id", sa.String(20), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("currency_code", sa.String(3), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("fully_credited_at", sa.DateTime(), nullable=True),
        sa.Column("rejected_at", sa.DateTime(), nullable=True),
        sa.Column("rejected_reason", sa.String(500), nullable=True),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name="fk_topups_organization_id_organizations"),
        sa.ForeignKeyConstraint(["funding_source_id"], ["funding_sources.id"],
                                name="fk_topups_funding_source_id_funding_sources"),
        sa.PrimaryKeyConstraint("id", name="pk_topups"),
        sa.UniqueConstraint("organization_id", "idempotency_key", name="uq_topups_organization_id_idempotency_key"),
    )
    op.create_index("ix_topups_org_created", "topups", ["organization_id", "created_at"])
    op.create_table(
        "invoices",
        sa.Column("id", sa.String(20), nullable=False),
        sa.Column("organization_id", sa.String(20), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("currency_code", sa.String(3), nullable=False),
        sa.Column("po_number", sa.String(200), nullable=True),
        sa.Column("memo", sa.String(1000), nullable=True),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("paid_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("funding_source_id", sa.String(20), nullable=True),
        sa.ForeignKeyConstraint(["organization_id"], ["organizations.id"],
                                name="fk_invoices_organization_id_organizations"),
        sa.PrimaryKeyConstraint("id", name="pk_invoices"),
    )
    op.create_index("ix_invoices_org_created", "invoices", ["organization_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_invoices_org_created", table_name="invoices")
    op.drop_table("invoices")
    op.drop_index("ix_topups_org_created", table_name="topups")
    op.drop_table("topups")
    op.drop_table("forex_rates")
    with op.batch_alter_table("rewards") as batch:
        batch.drop_column("charged_cents")
    with op.batch_alter_table("orders") as batch:
        for name in ("fx_total_cents", "fx_fees_cents", "fx_subtotal_cents", "fx_rate_date", "fx_rate",
                     "fx_currency_code"):
            batch.drop_column(name)
    with op.batch_alter_table("funding_sources") as batch:
        batch.drop_constraint("uq_funding_sources_organization_id_method_currency_code", type_="unique")
        batch.create_unique_constraint("uq_funding_sources_organization_id_method", ["organization_id", "method"])
