"""Imports every table so that `metadata` knows the whole schema (Alembic, tests)."""

from largesse.campaigns.models import campaigns
from largesse.catalog.models import products
from largesse.dashboard.models import sessions as dashboard_sessions
from largesse.dashboard.models import signin_tokens as dashboard_signin_tokens
from largesse.dashboard.models import uploads as dashboard_uploads
from largesse.db import metadata
from largesse.delivery.models import jobs
from largesse.fields.models import fields
from largesse.funding.models import funding_sources, ledger_entries
from largesse.orders.models import orders, reward_field_values, rewards
from largesse.orgs.models import api_keys, members, organizations
from largesse.ratelimit import api_rate_limits
from largesse.redemption.models import inventory_codes, payouts, redemption_tokens
from largesse.webhooks.models import webhooks

__all__ = [
    "api_keys", "api_rate_limits", "campaigns", "dashboard_sessions", "dashboard_signin_tokens",
    "dashboard_uploads", "fields", "funding_sources", "inventory_codes", "jobs",
    "ledger_entries",
    "members", "metadata", "orders", "organizations", "payouts", "products", "redemption_tokens",
    "reward_field_values", "rewards", "webhooks",
]
