"""Webhooks: one endpoint per organization, signed event deliveries through the outbox.

An event is a `deliver_webhook` job written in the same transaction as the state change it
reports, so a committed change always produces its event and a rolled-back one never does.
Deliveries are at-least-once: receivers dedupe on the body's `uuid` (API.md §8).
"""

from __future__ import annotations

import secrets
import uuid

import orjson
from sqlalchemy import Connection, Engine, bindparam, delete, func, select, update

from largesse import crypto, db
from largesse.config import Settings
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.ids import new_id
from largesse.ops import logs
from largesse.timeutil import iso, utcnow
from largesse.webhooks import signatures
from largesse.webhooks.models import webhook_deliveries, webhooks

# The events Largesse emits (a subset of API.md §8's list; the others have no counterpart here).
EVENTS = (
    "ORDERS.CREATED",
    "ORDERS.APPROVED",
    "ORDERS.CANCELED",
    "REWARDS.DELIVERY.SUCCEEDED",
    "REWARDS.DELIVERY.FAILED",
    "REWARDS.CANCELED",
    "FUNDING_SOURCES.FUNDED",
    "INVOICES.CREATED",
    "INVOICES.DELETED",
    "INVOICES.PAID",
    "MEMBERS.CREATED",
    "MEMBERS.DELETED",
    "MEMBERS.INVITED",
    "ORGANIZATIONS.CREATED",
    "CONNECTED_ORGANIZATIONS.REGISTERED",
    "REWARDS.FLAGGED",
    "REPORTS.GENERATION.SUCCEEDED",
    "REPORTS.GENERATION.FAILED",
)
# Every event name of API.md §8 (Tremendous' public list). POST /webhooks/{id}/simulate takes any
# of them, so that a receiver can be tested for events this service does not emit as well.
SIMULATED_EVENTS = EVENTS + (
    "CAMPAIGNS.CREATED",
    "CAMPAIGNS.DELETED",
    "CONNECTED_ORGANIZATIONS.STATUS.APPROVED",
    "CONNECTED_ORGANIZATIONS.STATUS.REJECTED",
    "CONNECTED_ORGANIZATIONS.OAUTH.GRANTED",
    "FUNDING_SOURCES.CREATED",
    "FUNDING_SOURCES.DELETED",
    "ORDERS.FAILED",
    "ORGANIZATIONS.DELETED",
    "PRODUCTS.ADDED",
    "PRODUCTS.REMOVED",
)
RESOURCE_TYPES = {"ORDERS": "orders", "REWARDS": "rewards", "FUNDING_SOURCES": "funding_sources",
                  "INVOICES": "invoices", "MEMBERS": "members", "ORGANIZATIONS": "organizations",
                  "CONNECTED_ORGANIZATIONS": "connected_organizations", "CAMPAIGNS": "campaigns",
                  "PRODUCTS": "products", "REPORTS": "reports"}
SIGNATURE_HEADER = signatures.SIGNATURE_HEADER
MAX_ATTEMPTS = 10

_FOR_ORG = select(webhooks.c.id).where(webhooks.c.organization_id == bindparam("org"))
_INSERT_JOB = jobs.insert()


def for_org(conn: Connection, organization_id: str):
    return conn.execute(select(webhooks).where(webhooks.c.organization_id == organization_id)).first()


def get_or_404(conn: Connection, organization_id: str, webhook_id: str):
    return db.owned_or_404(conn, webhooks, organization_id, webhook_id, "Webhook")


def upsert(conn: Connection, organization_id: str, url: str, box: crypto.KeyBox):
    """Create the organization's webhook, or point the existing one at a new URL (same key).
    A new signing key is stored only encrypted (crypto.py). One statement (INSERT ...
    ON CONFLICT on the organization's unique webhook), so concurrent calls cannot both insert
    (two POST /webhooks at once on PostgreSQL answered 500 on the unique constraint)."""
    now = utcnow()
    insert = db.upsert_insert(conn)
    conn.execute(insert(webhooks).values(
        id=new_id(), organization_id=organization_id, url=url, private_key=None,
        private_key_encrypted=box.encrypt(secrets.token_hex(32)), created_at=now, updated_at=now,
    ).on_conflict_do_update(index_elements=["organization_id"], set_={"url": url, "updated_at": now}))
    return for_org(conn, organization_id)


def remove(conn: Connection, organization_id: str, webhook_id: str) -> None:
    """Delete the webhook, its delivery log and its queued events: the worker sends an event to
    the organization's webhook of the moment, so an event left queued would reach a webhook
    created after this one (another URL, another key)."""
    get_or_404(conn, organization_id, webhook_id)
    # The webhook first: an attempt in flight records its log row only while the webhook exists
    # (deliveries.record locks it), so once this waited for that row, it deletes it below.
    conn.execute(delete(webhooks).where(webhooks.c.id == webhook_id))
    conn.execute(delete(webhook_deliveries).where(webhook_deliveries.c.webhook_id == webhook_id))
    conn.execute(update(jobs).where(
        jobs.c.status == job_queue.QUEUED, jobs.c.lane == job_queue.lane_of("deliver_webhook"),
        jobs.c.organization_id == organization_id, jobs.c.kind == "deliver_webhook",
    ).values(status=job_queue.DONE, last_error="webhook deleted", updated_at=utcnow()))


def signing_key(engine: Engine, settings: Settings, row) -> str:
    """The webhook's signing key in plaintext; crypto.KeyUnavailable when it cannot be opened.

    A key opened by an older secret (rotation), or still in plaintext (written by a process
    older than migration 0006), is re-encrypted under the current secret on the way.
    """
    box = crypto.keybox(settings)
    if row.private_key_encrypted is None:
        if not row.private_key:
            raise crypto.KeyUnavailable("the webhook has no signing key")
        plain, stale = row.private_key, True
    else:
        plain, stale = box.decrypt(row.private_key_encrypted)
    if stale:
        with db.write(engine) as conn:
            conn.execute(update(webhooks).where(
                webhooks.c.id == row.id,
                webhooks.c.private_key_encrypted.is_(None) if row.private_key_encrypted is None
                else webhooks.c.private_key_encrypted == row.private_key_encrypted,
            ).values(private_key_encrypted=box.encrypt(plain), private_key=None))
    return plain


def count_encrypted_keys(conn) -> int:
    """Webhooks whose signing key is kept encrypted at rest."""
    return conn.execute(select(func.count()).select_from(webhooks)
                        .where(webhooks.c.private_key_encrypted.is_not(None))).scalar_one()


def reencrypt_all(engine: Engine, settings: Settings) -> tuple[int, int, list[str]]:
    """Re-encrypt every signing key under the current secret (`largesse webhooks rotate-keys`):
    (re-encrypted, already current, ids of webhooks whose key no secret opens)."""
    with db.read(engine) as conn:
        rows = conn.execute(select(webhooks)).all()
    box, rotated, current, failed = crypto.keybox(settings), 0, 0, []
    for row in rows:
        try:
            stale = row.private_key_encrypted is None or box.decrypt(row.private_key_encrypted)[1]
            if stale:
                signing_key(engine, settings, row)  # re-encrypts on the way
        except crypto.KeyUnavailable:
            failed.append(row.id)
            continue
        rotated, current = rotated + stale, current + (not stale)
    return rotated, current, failed


def to_wire(row, private_key: str | None) -> dict:
    """The Webhook object. private_key (and its Standard Webhooks form, signing_secret) only
    for callers allowed to see it: omitted for read-only API keys (the client's Webhook model
    has private_key optional), who see the URL without its secrets too (a password in it, a
    ?token= parameter: logs.redact_url)."""
    if private_key is None:
        return {"id": row.id, "url": logs.redact_url(row.url)}
    return {"id": row.id, "url": row.url, "private_key": private_key,
            "signing_secret": signatures.standard_secret(private_key)}


def emit(conn: Connection, organization_id: str, events: list[tuple[str, str]], *,
         has_webhook: bool | None = None) -> int:
    """Queue (event, resource_id) pairs for the organization's webhook, if it has one.

    Call inside the transaction of the change the events report. Costs one indexed
    lookup unless the caller already knows (has_webhook) whether there is a webhook.
    """
    if has_webhook is None:
        has_webhook = conn.execute(_FOR_ORG, {"org": organization_id}).first() is not None
    if not events or not has_webhook:
        return 0
    conn.execute(_INSERT_JOB, job_rows(organization_id, events))
    return len(events)


def job_rows(organization_id: str, events: list[tuple[str, str]]) -> list[dict]:
    """The outbox rows that deliver (event, resource_id) pairs to the organization's webhook."""
    now = utcnow()
    return [job_queue.queued_row(kind="deliver_webhook", organization_id=organization_id,
                                 payload=event_body(event, resource_id, now), max_attempts=MAX_ATTEMPTS, now=now)
            for event, resource_id in events]


def event_body(event: str, resource_id: str, at=None) -> dict:
    prefix = event.split(".", 1)[0]
    return {
        "event": event,
        "uuid": str(uuid.uuid4()),
        "created_utc": iso(at or utcnow()),
        "payload": {"resource": {"id": resource_id, "type": RESOURCE_TYPES.get(prefix, prefix.lower())},
                    "meta": {}},
    }


def encode(body: dict) -> bytes:
    return orjson.dumps(body)


def sign(private_key: str, raw_body: bytes) -> str:
    return signatures.tremendous_signature(private_key, raw_body)
