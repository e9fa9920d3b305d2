"""Fraud rules (storage), their evaluation at redemption, and the reviews of held redemptions.

evaluate() is called by redemption.service.redeem inside the redemption's write transaction,
after the reward row is locked and the choice validated. It records what the page saw
(redemption_signals) and, when a rule matches, inserts a `flagged` review instead of letting
the payout happen: the reward stays ACTIVE (nothing paid, nothing refunded) until the
organization releases it (the payout the recipient chose, issued by the same provider path
as a normal redemption) or blocks it (canceled and refunded through delivery.service.refund).

Exactly one review decision wins: release and block both start with the conditional
UPDATE fraud_reviews ... WHERE status = 'flagged' (the row lock serialises them on
PostgreSQL, BEGIN IMMEDIATE on SQLite), then go through orders.lifecycle's conditional
UPDATE of the reward, which also excludes a concurrent cancel or expiry.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, and_, delete, func, or_, select, update

from largesse import db, email_address
from largesse.errors import NotFound
from largesse.fraud import rules as R
from largesse.fraud.models import fraud_reviews, fraud_rules, redemption_signals
from largesse.orders.models import rewards
from largesse.orgs.models import organizations
from largesse.orgs.service import email_key
from largesse.timeutil import utcnow
from largesse.webhooks import service as webhooks

log = logging.getLogger("largesse.fraud")

FLAGGED, RELEASED, BLOCKED = "flagged", "released", "blocked"
REVIEW_STATUSES = (FLAGGED, BLOCKED, RELEASED)
# Product category -> FraudReview.redemption_method (API.md §5 RedemptionMethod).
REDEMPTION_METHODS = {"merchant_card": "merchant card", "charity": "charity", "paypal": "paypal", "venmo": "venmo",
                      "visa_card": "visa card", "ach": "bank transfer",
                      "instant_debit_transfer": "instant debit transfer",
                      "international_bank": "international bank transfer"}
RELATED_LIMIT = 100


@dataclass(frozen=True)
class Client:
    """What the redemption page knows about the recipient's browser."""

    ip: str | None = None
    device_id: str | None = None


def country_of(ip: str | None) -> str | None:
    """ISO alpha-2 country of a public address, from iptocc's offline database; None for
    private, loopback and unknown addresses."""
    if not ip:
        return None
    try:
        import iptocc

        code = iptocc.country_code(ip)
    except Exception:  # an address the library cannot read: no country, never a failed redemption
        return None
    return code.upper() if isinstance(code, str) and len(code) == 2 else None


def _address(raw: str | None):
    try:
        return ipaddress.ip_address((raw or "").strip()) if raw else None
    except ValueError:
        return None


# --- rules ------------------------------------------------------------------------------------


def list_rules(conn: Connection, org: str) -> list[dict]:
    rows = conn.execute(select(fraud_rules).where(fraud_rules.c.organization_id == org)
                        .order_by(fraud_rules.c.rule_type)).all()
    return [R.to_wire(row.rule_type, row.config) for row in rows]


def _rule_type_or_404(rule_type: str) -> str:
    canonical = R.canonical_type(rule_type)
    if canonical is None:
        raise NotFound(f"Unknown fraud rule type {rule_type[:60]!r}", {"rule_type": ["is not a fraud rule type"]})
    return canonical


def validated(rule_type: str, body: dict) -> tuple[str, dict]:
    """(canonical rule type, stored config): run before the write transaction, since a
    50,000-entry list takes a moment to check."""
    rule_type = _rule_type_or_404(rule_type)
    return rule_type, R.validate(rule_type, body.get("config"))


def upsert_rule(conn: Connection, org: str, rule_type: str, config: dict) -> str:
    now = utcnow()
    insert = db.upsert_insert(conn)
    conn.execute(insert(fraud_rules).values(organization_id=org, rule_type=rule_type, config=config,
                                            created_at=now, updated_at=now)
                 .on_conflict_do_update(index_elements=["organization_id", "rule_type"],
                                        set_={"config": config, "updated_at": now}))
    return f"The {rule_type} rule has been saved."


def update_rule_list(conn: Connection, org: str, rule_type: str, body: dict) -> str:
    rule_type = _rule_type_or_404(rule_type)
    stored = conn.execute(select(fraud_rules.c.config).where(
        fraud_rules.c.organization_id == org, fraud_rules.c.rule_type == rule_type).with_for_update()).scalar()
    if stored is None:
        raise NotFound(f"There is no {rule_type} rule to update; create it first",
                       {"rule_type": ["has no rule"]})
    config = R.update_list(rule_type, stored, body.get("operation"), body.get("config"))
    conn.execute(update(fraud_rules).where(fraud_rules.c.organization_id == org,
                                           fraud_rules.c.rule_type == rule_type)
                 .values(config=config, updated_at=utcnow()))
    return f"The {rule_type} rule's list has been updated."


def delete_rule(conn: Connection, org: str, rule_type: str) -> str:
    rule_type = _rule_type_or_404(rule_type)
    deleted = conn.execute(delete(fraud_rules).where(fraud_rules.c.organization_id == org,
                                                     fraud_rules.c.rule_type == rule_type)).rowcount
    if not deleted:
        raise NotFound(f"There is no {rule_type} rule", {"rule_type": ["has no rule"]})
    return f"The {rule_type} rule has been deleted."


def copy_rules(conn: Connection, source_org: str, target_org: str) -> int:
    """Copy every rule of source_org to target_org (a new sub-organization with
    copy_settings.fraud_prevention), in the caller's transaction; returns how many."""
    now = utcnow()
    rows = [{"organization_id": target_org, "rule_type": row.rule_type, "config": row.config,
             "created_at": now, "updated_at": now}
            for row in conn.execute(select(fraud_rules.c.rule_type, fraud_rules.c.config)
                                    .where(fraud_rules.c.organization_id == source_org))]
    if rows:
        conn.execute(fraud_rules.insert(), rows)
    return len(rows)


# --- evaluation at redemption -----------------------------------------------------------------


def evaluate(conn: Connection, *, reward, product, client: Client | None, at: datetime) -> list[str]:
    """Record what the page saw and apply the organization's rules, in the redemption's
    transaction. Returns the reasons it was held for (a `flagged` review now exists and
    REWARDS.FLAGGED is queued), or [] when the payout may go ahead."""
    client = client or Client()
    address = _address(client.ip)
    ip = str(address) if address else None
    # Only a digest of the device cookie is stored and shown: the cookie itself stays in the browser.
    device = hashlib.sha256(client.device_id.encode()).hexdigest()[:32] if client.device_id else None
    email = email_address.folded((reward.recipient_email or "").strip()) or None  # as addresses compare
    country = country_of(ip)
    org = reward.organization_id
    insert = db.upsert_insert(conn)
    conn.execute(insert(redemption_signals).values(
        reward_id=reward.id, organization_id=org, email=email, ip=ip, country=country, device_id=device,
        created_at=at).on_conflict_do_nothing(index_elements=["reward_id"]))
    rows = conn.execute(select(fraud_rules.c.rule_type, fraud_rules.c.config, fraud_rules.c.updated_at)
                        .where(fraud_rules.c.organization_id == org)).all()
    if not rows:
        return []
    configured = {row.rule_type: row.config for row in rows}
    for row in rows:
        if row.rule_type in (R.REVIEW_IP, R.ALLOW_IP):
            configured[row.rule_type] = _parsed(org, row, "ips", _AddressList)
        elif row.rule_type in (R.REVIEW_EMAIL, R.ALLOW_EMAIL):
            configured[row.rule_type] = {**row.config, "mailboxes": _parsed(org, row, "emails", _mailboxes)}
    reasons = _reasons(conn, configured, reward=reward, address=address, ip=ip, email=email, device=device,
                       country=country, at=at)
    if not reasons:
        return []
    blocked_related = any("blocked reward" in r for r in reasons)
    risk = "high" if blocked_related or len(reasons) >= 3 else "medium" if len(reasons) == 2 else "low"
    conn.execute(insert(fraud_reviews).values(
        reward_id=reward.id, organization_id=org, status=FLAGGED, reasons=reasons, risk=risk, product_id=product.id,
        ip=ip, country=country, device_id=device, redeemed_at=at, reward_created_at=reward.created_at,
    ).on_conflict_do_nothing(index_elements=["reward_id"]))
    webhooks.emit(conn, org, [("REWARDS.FLAGGED", reward.id)])
    log.info("reward %s held for review: %s", reward.id, ", ".join(reasons))
    return reasons


def keep_details(conn: Connection, reward_id: str, sealed: str) -> None:
    """Keep a held redemption's recipient details (redemption/recipient.seal's token) on its review,
    in the redemption's transaction: release pays them, and release, block, a cancel or the expiry
    erase them (forget_details)."""
    conn.execute(update(fraud_reviews).where(fraud_reviews.c.reward_id == reward_id)
                 .values(encrypted_details=sealed))


def forget_details(conn: Connection, reward_id: str) -> None:
    """Erase a held redemption's recipient details (a reward without a review: nothing to do)."""
    conn.execute(update(fraud_reviews).where(fraud_reviews.c.reward_id == reward_id,
                                             fraud_reviews.c.encrypted_details.is_not(None))
                 .values(encrypted_details=None))


def count_held_details(conn) -> int:
    """Held redemptions whose recipient details are kept encrypted (reencrypt_details' rows)."""
    return conn.execute(select(func.count()).select_from(fraud_reviews)
                        .where(fraud_reviews.c.encrypted_details.is_not(None))).scalar_one()


def reencrypt_details(engine, settings) -> tuple[int, int, list[str]]:
    """Re-encrypt every held redemption's recipient details under the first LARGESSE_SECRET_KEY
    secret (`largesse secrets rotate`): (re-encrypted, already current, reward ids of details no
    secret opens). Each in its own transaction, only if still the same token (a release or block
    meanwhile erased it)."""
    from largesse import crypto

    box = crypto.keybox(settings, crypto.RECIPIENT_DETAILS)
    with db.read(engine) as conn:
        held = conn.execute(select(fraud_reviews.c.reward_id, fraud_reviews.c.encrypted_details)
                            .where(fraud_reviews.c.encrypted_details.is_not(None))).all()
    rotated, current, failed = 0, 0, []
    for reward_id, sealed in held:
        try:
            plaintext, stale = box.decrypt(sealed)
        except crypto.KeyUnavailable:
            failed.append(reward_id)
            continue
        if not stale:
            current += 1
            continue
        with db.write(engine) as conn:
            conn.execute(update(fraud_reviews).where(fraud_reviews.c.reward_id == reward_id,
                                                     fraud_reviews.c.encrypted_details == sealed)
                         .values(encrypted_details=box.encrypt(plaintext)))
        rotated += 1
    return rotated, current, failed


class _AddressList:
    """A stored list of addresses and CIDR ranges, parsed once: single addresses in a set
    (packed bytes: one lookup), ranges in a list. Parsed lists are cached per process until
    the rule changes (its updated_at), so a redemption does not parse 50,000 entries."""

    def __init__(self, entries: list[str]):
        self.addresses, self.networks = set(), []
        for entry in entries:
            try:
                packed = None if "/" in entry else R.pack_address(entry)
                if packed is not None:
                    self.addresses.add(packed)
                else:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
            except (ValueError, TypeError):
                continue

    def __contains__(self, address) -> bool:
        return address is not None and (address.packed in self.addresses
                                        or any(address in n for n in self.networks))


_PARSED: dict[tuple, object] = {}
_PARSED_MAX = 256


def _parsed(org: str, rule, key: str, parse):
    """parse(the rule's list `key`), cached per process until the rule changes (its updated_at),
    so a redemption does not parse 50,000 entries: an _AddressList of IPs, or _mailboxes."""
    entries = rule.config.get(key) or []
    # updated_at has millisecond precision: the size and ends tell apart two versions written
    # by different processes within the same millisecond.
    cache_key = (org, rule.rule_type, rule.updated_at, len(entries), entries[0] if entries else None,
                 entries[-1] if entries else None)
    parsed = _PARSED.get(cache_key)
    if parsed is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()  # a crude bound: rebuilding costs one parse per rule
        parsed = _PARSED[cache_key] = parse(entries)
    return parsed


def _mailboxes(emails: list[str]) -> frozenset[str]:
    """A rule's listed addresses as mailboxes (orgs.service.email_key). An entry stored before
    migration 0024 was lower-cased with Unicode rules: its non-ASCII capitals are lost, so it
    may no longer match a recipient who has them (docs/fraud.md: re-enter such entries)."""
    return frozenset(email_key(e) for e in emails)


def _mailbox_listed(email: str | None, config: dict) -> bool:
    """Is the address's mailbox listed? Compared as members are (orgs.service.email_key: ASCII
    case, no +tag): x+1@y.com is x@y.com's mailbox, and listing one holds or allows the other."""
    return bool(email) and email_key(email) in config["mailboxes"]  # evaluate() parsed them (_parsed)


def _email_listed(email: str | None, config: dict) -> bool:
    if not email:
        return False
    if _mailbox_listed(email, config):
        return True
    domain = email.rpartition("@")[2]
    return any(domain == d or domain.endswith("." + d) for d in config.get("domains") or ())


def _since(period: str, at: datetime) -> datetime | None:
    return None if period == "all_time" else at - timedelta(days=int(period))


def _redeemed_by(conn: Connection, org: str, column, value, since: datetime | None, currency: str | None = None):
    """(count, sum of denominations) of the organization's REDEEMED rewards whose redemption
    had this email, device or address (column = value)."""
    s, r = redemption_signals, rewards
    query = (select(func.count(), func.coalesce(func.sum(r.c.denomination_cents), 0))
             .select_from(s.join(r, r.c.id == s.c.reward_id))
             .where(s.c.organization_id == org, column == value, r.c.status == "REDEEMED"))
    if since is not None:
        query = query.where(r.c.redeemed_at >= since)
    if currency is not None:
        query = query.where(r.c.currency_code == currency)
    count, total = conn.execute(query).one()
    return int(count), int(total)


def _most_redeemed(conn: Connection, org: str, identities: list, since, currency: str | None = None):
    """The largest (count, total) over the recipient's email, device and address: the rule
    holds "if a recipient, device, or IP redeems more than" its limit."""
    results = [_redeemed_by(conn, org, column, value, since, currency) for column, value in identities if value]
    return (max(c for c, _ in results), max(t for _, t in results)) if results else (0, 0)


def _reasons(conn: Connection, configured: dict, *, reward, address, ip, email, device, country, at) -> list[str]:
    org = reward.organization_id
    # Allow lists first: an allowed address or email is never held (docs/fraud.md).
    if R.ALLOW_IP in configured and address in configured[R.ALLOW_IP]:
        return []
    if R.ALLOW_EMAIL in configured and _mailbox_listed(email, configured[R.ALLOW_EMAIL]):
        return []
    reasons: list[str] = []
    if R.REVIEW_IP in configured and address in configured[R.REVIEW_IP]:
        reasons.append("Disallowed IP")
    if R.REVIEW_EMAIL in configured and _email_listed(email, configured[R.REVIEW_EMAIL]):
        reasons.append("Disallowed email")
    if R.REVIEW_COUNTRY in configured:
        config = configured[R.REVIEW_COUNTRY]
        listed = country is not None and country in set(config.get("countries") or ())
        # A whitelist holds an address whose country is unknown: it cannot be shown to be allowed.
        if (config.get("type") == "whitelist" and not listed) or (config.get("type") == "blacklist" and listed):
            reasons.append("Disallowed country")
    s = redemption_signals
    identities = [(s.c.email, email), (s.c.device_id, device), (s.c.ip, ip)]
    if R.REVIEW_COUNT in configured:
        config = configured[R.REVIEW_COUNT]
        count, _ = _most_redeemed(conn, org, identities, _since(config["period"], at))
        if count + 1 > config["amount"]:
            reasons.append("Over reward count limit")
    if R.REVIEW_AMOUNT in configured:
        config = configured[R.REVIEW_AMOUNT]
        currency = conn.execute(select(organizations.c.currency_code).where(organizations.c.id == org)).scalar()
        if reward.currency_code == currency:
            _, total = _most_redeemed(conn, org, identities, _since(config["period"], at), currency)
            if total + reward.denomination_cents > config["amount_cents"]:
                reasons.append("Over reward amount limit")
    others = and_(s.c.organization_id == org, s.c.reward_id != reward.id)
    if R.REVIEW_MULTIPLE_EMAILS in configured:
        other_email = or_(s.c.email.is_(None), s.c.email != (email or ""))
        if device and conn.execute(select(s.c.reward_id).where(others, s.c.device_id == device, other_email)
                                   .limit(1)).first():
            reasons.append("Device related to multiple emails")
        elif ip and conn.execute(select(s.c.reward_id).where(others, s.c.ip == ip, other_email).limit(1)).first():
            reasons.append("Device or account related to multiple emails")
    if R.REVIEW_BLOCKED in configured:
        blocked = (select(s.c.email, s.c.ip, s.c.device_id)
                   .join(fraud_reviews, fraud_reviews.c.reward_id == s.c.reward_id)
                   .where(others, fraud_reviews.c.status == BLOCKED))
        for value, column, reason in ((ip, s.c.ip, "IP related to a blocked reward"),
                                      (device, s.c.device_id, "Device related to a blocked reward"),
                                      (email, s.c.email, "Email related to a blocked reward")):
            if value and conn.execute(blocked.where(column == value).limit(1)).first():
                reasons.append(reason)
    # review_vpn and review_tremendous_flag_list need data Largesse does not have (docs/fraud.md).
    return reasons


def held_among(conn: Connection, reward_ids: list[str]) -> set[str]:
    """Which of these rewards are held: their redemption waits for a review (FLAGGED)."""
    if not reward_ids:
        return set()
    return set(conn.execute(select(fraud_reviews.c.reward_id).where(
        fraud_reviews.c.reward_id.in_(reward_ids), fraud_reviews.c.status == FLAGGED)).scalars())


def is_held(conn: Connection, reward_id: str) -> bool:
    return bool(held_among(conn, [reward_id]))
