from sqlalchemy import (
                        JSON,
                        BigInteger,
                        Column,
                        Date,
                        DateTime,
                        ForeignKey,
                        Index,
                        String,
                        Table,
                        Text,
                        UniqueConstraint,
                        func,
)

from largesse.db import metadata

# The status of an order that waits for a decision (orders/approvals.py); one spelling for every
# module that reads or writes it.
PENDING_APPROVAL = "PENDING APPROVAL"

orders = Table(
    "orders", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("external_id", String(200), nullable=True),
    # SHA-256 of the canonical request: an external_id replay is "identical" when it matches.
    Column("request_hash", String(64), nullable=True),
    Column("campaign_id", String(20), nullable=True),
    Column("status", String(40), nullable=False),
    Column("channel", String(20), nullable=False, default="API"),
    Column("funding_source_id", String(20), ForeignKey("funding_sources.id"), nullable=False),
    Column("currency_code", String(3), nullable=False),
    Column("subtotal_cents", BigInteger, nullable=False),
    Column("fees_cents", BigInteger, nullable=False),
    Column("discount_cents", BigInteger, nullable=False, default=0),
    Column("total_cents", BigInteger, nullable=False),
    Column("refund_cents", BigInteger, nullable=False, default=0),
    Column("created_at", DateTime, nullable=False),
    # Who decided a PENDING APPROVAL order, and when (orders/approvals.py): an API key or a member.
    Column("approved_at", DateTime, nullable=True),
    Column("approved_by_key_id", String(20), nullable=True),
    Column("approved_by_member_id", String(20), nullable=True),
    Column("rejected_at", DateTime, nullable=True),
    Column("rejected_by_key_id", String(20), nullable=True),
    Column("rejected_by_member_id", String(20), nullable=True),
    # A converted order (its rewards' currency differs from the balance's, forex/conversion.py):
    # the amounts above are in the balance's currency; these record the rewards' currency, their
    # amounts in it, and the rate (exact decimal text) and rate date that converted them. NULL otherwise.
    Column("fx_currency_code", String(3), nullable=True),
    Column("fx_rate", String(40), nullable=True),
    Column("fx_rate_date", Date, nullable=True),
    Column("fx_subtotal_cents", BigInteger, nullable=True),
    Column("fx_fees_cents", BigInteger, nullable=True),
    Column("fx_total_cents", BigInteger, nullable=True),
    # Enforced by the database, so concurrent duplicates cannot both be created.
    UniqueConstraint("organization_id", "external_id"),
    # The list, newest first by (created_at, id), and by campaign: walks that stop after offset +
    # limit orders (migration 0028).
    Index("ix_orders_org_created_id", "organization_id", "created_at", "id"),
    Index("ix_orders_org_campaign_created_id", "organization_id", "campaign_id", "created_at", "id"),
    Index("ix_orders_org_status_created", "organization_id", "status", "created_at", "id"),  # approvals queue
)

rewards = Table(
    "rewards", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("order_id", String(20), ForeignKey("orders.id"), nullable=False),
    Column("campaign_id", String(20), nullable=True),
    Column("products", JSON, nullable=False),
    Column("denomination_cents", BigInteger, nullable=False),
    Column("fee_cents", BigInteger, nullable=False, default=0),
    Column("currency_code", String(3), nullable=False),
    Column("recipient_name", String(200), nullable=True),
    Column("recipient_email", String(320), nullable=True),
    Column("recipient_phone", String(40), nullable=True),
    Column("delivery_method", String(10), nullable=False),
    # PENDING | SCHEDULED | SUCCEEDED | FAILED
    Column("delivery_status", String(10), nullable=False),
    Column("delivery_meta", JSON, nullable=True),
    Column("delivery_error", Text, nullable=True),
    Column("delivered_at", DateTime, nullable=True),
    Column("deliver_at", Date, nullable=True),
    Column("language", String(10), nullable=True),
    # Redemption lifecycle: ACTIVE | REDEEMED | CANCELED | EXPIRED
    Column("status", String(10), nullable=False, default="ACTIVE"),
    Column("expires_at", DateTime, nullable=True),
    Column("redeemed_at", DateTime, nullable=True),
    Column("canceled_at", DateTime, nullable=True),
    Column("created_at", DateTime, nullable=False),
    # Converted orders only: denomination + fee in the balance's currency, what a refund gives back.
    Column("charged_cents", BigInteger, nullable=True),
    Index("ix_rewards_order", "order_id"),
    Index("ix_rewards_org_created_id", "organization_id", "created_at", "id"),  # lists: newest first
    # The dashboard's status filter, newest first, and the overview's counts (migration 0020 added id).
    Index("ix_rewards_org_status_created_id", "organization_id", "status", "created_at", "id"),
    Index("ix_rewards_expiry", "status", "expires_at"),
)
# The dashboard's search by recipient (orders/browse.py): an address in any capitals, newest first.
Index("ix_rewards_org_email_created", rewards.c.organization_id, func.lower(rewards.c.recipient_email),
      rewards.c.created_at, rewards.c.id)

# One row per custom field value on a reward. Label and the reward's creation time are
# copied here (both immutable) so a search is one range scan of one index, ordered the
# way the list is, whatever the size of the table.
reward_field_values = Table(
    "reward_field_values", metadata,
    Column("reward_id", String(20), ForeignKey("rewards.id"), primary_key=True),
    Column("field_id", String(20), ForeignKey("fields.id"), primary_key=True),
    Column("organization_id", String(20), nullable=False),
    Column("label", String(100), nullable=False),
    Column("value", String(1000), nullable=False),
    Column("reward_created_at", DateTime, nullable=False),
    Index("ix_rfv_search", "organization_id", "label", "value", "reward_created_at", "reward_id"),
)
