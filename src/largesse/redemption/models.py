from sqlalchemy import Column, DateTime, ForeignKey, Index, Integer, String, Table, Text, UniqueConstraint

from largesse.db import metadata

# A redemption link's token is random (256 bits) and only its SHA-256 is stored.
redemption_tokens = Table(
    "redemption_tokens", metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("reward_id", String(20), ForeignKey("rewards.id"), nullable=False),
    Column("created_at", DateTime, nullable=False),
    Column("revoked_at", DateTime, nullable=True),
    Index("ix_redemption_tokens_reward", "reward_id"),
)

# The payout a recipient received. reward_id is the primary key: a reward is redeemed once.
payouts = Table(
    "payouts", metadata,
    Column("reward_id", String(20), ForeignKey("rewards.id"), primary_key=True),
    Column("organization_id", String(20), nullable=False),
    Column("product_id", String(20), ForeignKey("products.id"), nullable=False),
    Column("provider", String(20), nullable=False),
    Column("code", String(500), nullable=True),
    Column("pin", String(100), nullable=True),
    Column("url", String(1000), nullable=True),
    Column("confirmation", Text, nullable=True),
    Column("created_at", DateTime, nullable=False),
)

# Operator-loaded codes for the "inventory" provider; each issued at most once.
inventory_codes = Table(
    "inventory_codes", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("product_id", String(20), ForeignKey("products.id"), nullable=False),
    Column("code", String(500), nullable=False),
    Column("pin", String(100), nullable=True),
    Column("reward_id", String(20), nullable=True, unique=True),
    Column("imported_at", DateTime, nullable=False),
    Column("issued_at", DateTime, nullable=True),
    UniqueConstraint("product_id", "code"),
    Index("ix_inventory_available", "product_id", "issued_at"),
)

# Fixed-window request counters for the redemption pages, shared by every server process.
# bucket is "ip:<address>", "token:<first 32 hex of the token hash>" or "post:<...>";
# window_start is the window's first second (Unix time), so old rows are easy to prune.
redemption_rate_limits = Table(
    "redemption_rate_limits", metadata,
    Column("bucket", String(100), primary_key=True),
    Column("window_start", Integer, primary_key=True),
    Column("hits", Integer, nullable=False),
    Index("ix_redemption_rate_limits_window", "window_start"),
)

# Secrets the redemption pages need to agree on across processes (the CSRF key when no
# LARGESSE_SECRET_KEY is set): created once by whichever process needs it first.
redemption_secrets = Table(
    "redemption_secrets", metadata,
    Column("name", String(40), primary_key=True),
    Column("value", String(128), nullable=False),
    Column("created_at", DateTime, nullable=False),
)
