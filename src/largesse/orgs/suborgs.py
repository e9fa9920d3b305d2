"""Sub-organizations: organizations an API caller creates under its own (POST /organizations,
and every connected organization).

A sub-organization is a full organization: its own balance, members, keys, campaigns. It
shares its parent's environment (a sandbox parent makes sandbox children, which get the
sandbox preload through the ledger; production children start at 0 and are funded by the
operator) and always inherits the parent's operator-controlled terms (fees, reward expiry):
creating a sub-organization must not be a way around the pricing the operator set. A child in
another currency gets the parent's amounts converted (_converted).
`copy_settings` (API.md §2.7) copies what Largesse has of the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, Table, select

from largesse import auth
from largesse.campaigns.models import campaigns
from largesse.errors import BadRequest
from largesse.fields.models import fields
from largesse.forex import service as forex
from largesse.funding import service as funding
from largesse.ids import new_id
from largesse.orgs import service
from largesse.orgs.models import organizations
from largesse.timeutil import utcnow

# copy_settings keys and their defaults (API.md §2.7).
COPY_SETTINGS_DEFAULTS = {
    "campaigns": False, "custom_fields": False, "order_approvals": False, "payment_methods": False,
    "users": False, "custom_roles": False, "fraud_prevention": False, "tax_management": False,
    "security_settings": True,
}

# Columns of `organizations` that describe the organization itself, never copied. Every other
# column is a setting: inherited from the parent, generically, so settings columns that other
# modules add later (order approvals...) are covered without editing this list.
IDENTITY_COLUMNS = frozenset({"id", "name", "website", "phone", "currency_code", "created_at", "environment",
                              "parent_organization_id", "root_organization_id"})


def is_order_approvals_setting(column: str) -> bool:
    """Settings columns copied only with copy_settings.order_approvals (the others, such as
    fees and reward expiry, are always inherited). Decision: any column named *approval*."""
    return "approval" in column


@dataclass
class CreatedSubOrg:
    organization_id: str
    funding_source_id: str
    api_key: str | None


def create_sub_org(conn: Connection, *, parent_id: str, name: str, website: str | None, phone: str | None = None,
                   currency_code: str | None = None, copy_settings: dict | None = None,
                   with_api_key: bool = False) -> CreatedSubOrg:
    """Create a sub-organization of parent_id in the caller's transaction."""
    parent = service.get_org(conn, parent_id)
    copy = {**COPY_SETTINGS_DEFAULTS, **(copy_settings or {})}
    settings = {column: getattr(parent, column) for column in organizations.c.keys()
                if column not in IDENTITY_COLUMNS
                and (copy["order_approvals"] or not is_order_approvals_setting(column))}
    org_id = new_id()
    currency = currency_code or parent.currency_code
    if currency != parent.currency_code:
        settings = _converted(conn, settings, parent.currency_code, currency)
    conn.execute(organizations.insert().values(
        **settings, id=org_id, name=name, website=website, phone=phone, currency_code=currency,
        environment=parent.environment, parent_organization_id=parent_id,
        root_organization_id=parent.root_organization_id or parent_id, created_at=utcnow(),
    ))
    fs_id = funding.create_balance(conn, organization_id=org_id, currency_code=currency)
    if parent.environment == "sandbox":
        funding.credit(conn, funding_source_id=fs_id, organization_id=org_id,
                       amount_cents=service.SANDBOX_CREDIT_CENTS, kind="sandbox_credit",
                       memo="Sandbox pre-loaded balance")
    if copy["campaigns"]:
        _copy_rows(conn, campaigns, parent_id, org_id)
    if copy["custom_fields"]:
        _copy_rows(conn, fields, parent_id, org_id)
    if copy["users"]:
        for member in service.list_members(conn, parent_id):
            service.add_member(conn, organization_id=org_id, email=member.email, name=member.name, role=member.role)
    if copy["fraud_prevention"]:
        copy_fraud_prevention(conn, parent_id, org_id)
    key = None
    if with_api_key:
        _, key = auth.issue_key(conn, organization_id=org_id, label="created with the organization (API)")
    return CreatedSubOrg(org_id, fs_id, key)


_INT32_MAX = 2**31 - 1  # fee_flat_cents is an `integer` column


def _converted(conn: Connection, settings: dict, source: str, target: str) -> dict:
    """The parent's money settings (the *_cents columns: the flat fee per reward, the approval
    threshold) in the child's currency, at the day's cross rate rounded half up to its minor
    unit (forex.service, as an order converts): copied as numbers, 100 yen of a JPY parent's
    fee became 100 USD on a USD child, and a USD parent's 5.00 became 5 yen. 400 at
    currency_code when no rate converts a non-zero amount."""
    amounts = {column: value for column, value in settings.items() if column.endswith("_cents") and value}
    if not amounts:
        return settings
    rates = forex.current(conn)
    converted = {column: forex.convert_between(rates, value, source, target) for column, value in amounts.items()}
    if None in converted.values():
        raise BadRequest(f"no exchange rate from {source} (the parent organization's currency) to {target} is "
                         f"configured, to convert its fees and approval threshold",
                         {"currency_code": [f"has no exchange rate from {source}"]})
    if converted.get("fee_flat_cents", 0) > _INT32_MAX:
        raise BadRequest(f"the parent organization's flat fee converted to {target} is more than a flat fee can be",
                         {"currency_code": ["makes the flat fee too large"]})
    return {**settings, **converted}


def _copy_rows(conn: Connection, table: Table, source_org: str, target_org: str) -> int:
    """Copy an organization's rows of `table` (campaigns, fields) to another, with new IDs, in
    the source's order: the lists sort by (created_at, id), and copies stamped with one instant
    came back in the order of their random IDs, so each is a microsecond after the one before."""
    now = utcnow()
    rows = []
    source = select(table).where(table.c.organization_id == source_org).order_by(table.c.created_at, table.c.id)
    for position, row in enumerate(conn.execute(source)):
        values = dict(row._mapping)
        values.update(id=new_id(), organization_id=target_org)
        for stamp in ("created_at", "updated_at"):
            if stamp in values:
                values[stamp] = now + timedelta(microseconds=position)
        rows.append(values)
    if rows:
        conn.execute(table.insert(), rows)
    return len(rows)


def copy_fraud_prevention(conn: Connection, source_org: str, target_org: str) -> None:
    """copy_settings.fraud_prevention: the source organization's fraud rules, in this transaction."""
    from largesse.fraud import service as fraud

    fraud.copy_rules(conn, source_org, target_org)
