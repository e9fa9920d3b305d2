"""Imports every table so that `metadata` knows the whole schema (Alembic, tests)."""

from largesse.campaigns.models import campaigns
from largesse.catalog.models import products
from largesse.connected.models import (
    connected_member_sessions,
    connected_organization_members,
    connected_organizations,
)
from largesse.dashboard.models import sessions as dashboard_sessions
from largesse.dashboard.models import signin_tokens as dashboard_signin_tokens
from largesse.dashboard.models import uploads as dashboard_uploads
from largesse.db import metadata
from largesse.delivery.models import jobs
from largesse.fields.models import fields
from largesse.forex.models import forex_rates
from largesse.fraud.models import fraud_reviews, fraud_rules, redemption_signals
from largesse.funding.models import funding_sources, ledger_entries
from largesse.invoices.models import invoices
from largesse.orders.models import orders, reward_field_values, rewards
from largesse.orgs.models import api_keys, members, organizations
from largesse.ratelimit import api_rate_limits
from largesse.redemption.models import inventory_codes, payouts, redemption_tokens
from largesse.reports.models import report_chunks, reports
from largesse.topups.models import topups
from largesse.webhooks.models import webhooks

__all__ = [
    "api_keys", "api_rate_limits", "campaigns", "connected_member_sessions", "connected_organization_members",
    "connected_organizations", "dashboard_sessions", "dashboard_signin_tokens",
    "dashboard_uploads", "fields", "funding_sources", "inventory_codes", "jobs",
    "ledger_entries",
    "members", "metadata", "orders", "organizations", "payouts", "products", "redemption_tokens",
    "reward_field_values", "rewards", "webhooks",
    "forex_rates", "invoices", "topups",
    "fraud_reviews", "fraud_rules", "redemption_signals", "report_chunks", "reports",
]
