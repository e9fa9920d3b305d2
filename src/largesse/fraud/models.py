from sqlalchemy import JSON, Column, DateTime, ForeignKey, Index, String, Table, Text

from largesse.db import metadata

# One row per (organization, rule type): the rule's validated config (fraud/rules.py).
fraud_rules = Table(
    "fraud_rules", metadata,
    Column("organization_id", String(20), ForeignKey("organizations.id"), primary_key=True),
    Column("rule_type", String(40), primary_key=True),
    Column("config", JSON, nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("updated_at", DateTime, nullable=False),
)

# A redemption held by a rule. reward_id is the primary key: a reward is reviewed once.
# status: flagged (held, nothing paid) -> released (paid) | blocked (canceled and refunded);
# the conditional UPDATE ... WHERE status = 'flagged' is what lets exactly one review win.
fraud_reviews = Table(
    "fraud_reviews", metadata,
    Column("reward_id", String(20), ForeignKey("rewards.id"), primary_key=True),
    Column("organization_id", String(20), nullable=False),
    Column("status", String(10), nullable=False),
    Column("reasons", JSON, nullable=False),
    Column("risk", String(10), nullable=False),
    Column("product_id", String(20), nullable=False),  # the recipient's choice, paid on release
    Column("ip", String(64), nullable=True),
    Column("country", String(2), nullable=True),
    Column("device_id", String(64), nullable=True),
    Column("redeemed_at", DateTime, nullable=False),  # when the recipient chose
    Column("reviewed_by", String(40), nullable=True),  # the API key id that released or blocked
    Column("reviewed_at", DateTime, nullable=True),
    # The reward's created_at, for GET /fraud_reviews' created_at filters (migration 0022
    # backfills it; fraud.service.evaluate writes it with the review).
    Column("reward_created_at", DateTime, nullable=True),
    # The bank account a held bank deposit pays to (redemption/recipient.seal: a Fernet token under
    # LARGESSE_SECRET_KEY, never plain text); NULL once released, blocked, canceled or expired,
    # and for every product that needs no details (migration 0027).
    Column("encrypted_details", Text, nullable=True),
    # The list, newest redemption first, with or without a status: walks of these (migration 0021).
    Index("ix_fraud_reviews_org_redeemed_id", "organization_id", "redeemed_at", "reward_id", "reward_created_at"),
    Index("ix_fraud_reviews_org_status_redeemed_id", "organization_id", "status", "redeemed_at", "reward_id",
          "reward_created_at"),
)

# What the redemption page saw for every redemption attempt that reached the rules, held or
# paid: the history the "multiple emails" and "previously blocked" rules look up.
redemption_signals = Table(
    "redemption_signals", metadata,
    Column("reward_id", String(20), ForeignKey("rewards.id"), primary_key=True),
    Column("organization_id", String(20), nullable=False),
    Column("email", String(320), nullable=True),  # email_address.folded (ASCII letters lower-cased)
    Column("ip", String(64), nullable=True),
    Column("country", String(2), nullable=True),
    Column("device_id", String(64), nullable=True),
    Column("created_at", DateTime, nullable=False),
    Index("ix_redemption_signals_ip", "organization_id", "ip"),
    Index("ix_redemption_signals_device", "organization_id", "device_id"),
    Index("ix_redemption_signals_email", "organization_id", "email", "created_at"),
)
