"""Fraud rule types and their configs (API.md §2.10, §5 FraudRuleType): validation only.

A config is validated into the plain JSON object that is stored and listed back: IPs and
CIDRs through `ipaddress` (kept as the caller wrote them, checked for sense), countries as
ISO 3166-1 alpha-2 (upper-cased), emails and domains lower-cased, periods from the §5 list,
amounts exact (cents inside, a JSON number on the wire).
"""

from __future__ import annotations

import ipaddress
import socket
from decimal import Decimal
from typing import Any

from largesse import codes, email_address
from largesse.errors import BadRequest, payload_from
from largesse.jsonbody import problem
from largesse.money import MoneyError, to_cents
from largesse.money import to_wire as money_to_wire

REVIEW_COUNTRY, REVIEW_IP, REVIEW_EMAIL = "review_country", "review_ip", "review_email"
REVIEW_COUNT, REVIEW_AMOUNT = "review_redeemed_rewards_count", "review_redeemed_rewards_amount"
REVIEW_MULTIPLE_EMAILS, REVIEW_VPN = "review_multiple_emails", "review_vpn"
REVIEW_FLAG_LIST, REVIEW_BLOCKED = "review_tremendous_flag_list", "review_previously_blocked_recipients"
ALLOW_IP, ALLOW_EMAIL = "allow_ip", "allow_email"

RULE_TYPES = (REVIEW_COUNTRY, REVIEW_IP, REVIEW_EMAIL, REVIEW_COUNT, REVIEW_AMOUNT, REVIEW_MULTIPLE_EMAILS,
              REVIEW_VPN, REVIEW_FLAG_LIST, REVIEW_BLOCKED, ALLOW_IP, ALLOW_EMAIL)
# The 6.0 client's docstring spells one rule `review_tremendous_flaglist`: the same rule.
ALIASES = {"review_tremendous_flaglist": REVIEW_FLAG_LIST}
NO_CONFIG = (REVIEW_MULTIPLE_EMAILS, REVIEW_FLAG_LIST, REVIEW_BLOCKED)
# The list keys update_list may add to or remove from, per rule type.
LIST_KEYS = {REVIEW_COUNTRY: ("countries",), REVIEW_IP: ("ips",), ALLOW_IP: ("ips",),
             REVIEW_EMAIL: ("emails", "domains"), ALLOW_EMAIL: ("emails",)}
# A rule with a list needs at least one entry (API.md §2.10: `countries` and `ips` are required):
# create and update_list refuse to leave one empty. An empty list would hold nobody, or, for a
# country whitelist, every redemption; DELETE /fraud_rules/{rule_type} removes a rule. A
# review_email rule needs an email or a domain.
EMAIL_RULE_NEEDS = "needs emails or domains"
NEEDS_ENTRY = "must have at least one entry"
EMPTY_LIST = f"{NEEDS_ENTRY} (delete the rule instead)"
PERIODS = ("7", "30", "90", "120", "365", "all_time")
MAX_LIST = 50_000
MAX_AMOUNT_CENTS = 10**13
MAX_COUNT = 10**9  # rewards in a period: more than any organization sends

DOMAIN = email_address.DOMAIN  # the domains of review_email: those an address may have


def canonical_type(rule_type: str) -> str | None:
    rule_type = ALIASES.get(rule_type, rule_type)
    return rule_type if rule_type in RULE_TYPES else None


def _list(config: dict, key: str, *, required: bool, where: tuple) -> list | None:
    value = config.get(key)
    if value is None:
        if required:
            raise problem((*where, key), "is required")
        return None
    if not isinstance(value, list):
        raise problem((*where, key), "must be a list")
    if required and not value:
        raise problem((*where, key), EMPTY_LIST)
    if len(value) > MAX_LIST:
        raise problem((*where, key), f"must have at most {MAX_LIST} entries")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item or len(item) > 320 or "\x00" in item:
            raise problem((*where, key, i), "must be a non-empty string")
    return value


def pack_address(text: str) -> bytes | None:
    """The 4 or 16 bytes of a plain IPv4/IPv6 address, or None. inet_pton is an order of
    magnitude faster than ipaddress, which matters for lists of 50,000 addresses."""
    try:
        return socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)
    except (OSError, ValueError):
        return None


def clean_ips(values: list[str], where: tuple) -> list[str]:
    out = []
    for i, raw in enumerate(values):
        text = raw.strip()
        try:
            if "%" in text:  # a scoped IPv6 address (fe80::1%eth0) is no client address: it never matches
                raise ValueError(text)
            if "/" in text:
                out.append(str(ipaddress.ip_network(text, strict=False)))
            else:
                packed = pack_address(text)
                out.append(socket.inet_ntop(socket.AF_INET6 if len(packed) == 16 else socket.AF_INET, packed)
                           if packed else str(ipaddress.ip_address(text)))
        except ValueError:
            raise problem((*where, i), "is not an IPv4 or IPv6 address or CIDR range") from None
    return list(dict.fromkeys(out))


def clean_countries(values: list[str], where: tuple) -> list[str]:
    out = []
    for i, raw in enumerate(values):
        code = codes.country(raw)
        if code is None:
            raise problem((*where, i), "is not an ISO 3166-1 alpha-2 country code")
        out.append(code)
    return list(dict.fromkeys(out))


def clean_emails(values: list[str], where: tuple) -> list[str]:
    out = []
    for i, raw in enumerate(values):
        email = email_address.folded(raw.strip())  # stored lower-case, as addresses compare
        if not email_address.valid(email):
            raise problem((*where, i), "is not a valid email address")
        out.append(email)
    return list(dict.fromkeys(out))


def clean_domains(values: list[str], where: tuple) -> list[str]:
    out = []
    for i, raw in enumerate(values):
        domain = raw.strip().lower().removeprefix("@")
        if not DOMAIN.fullmatch(domain):
            raise problem((*where, i), "is not a valid domain")
        out.append(domain)
    return list(dict.fromkeys(out))


CLEANERS = {"ips": clean_ips, "countries": clean_countries, "emails": clean_emails, "domains": clean_domains}


def _period(config: dict, where: tuple) -> str:
    period = config.get("period")
    if period is None:
        raise problem((*where, "period"), "is required")
    if isinstance(period, int) and not isinstance(period, bool):
        period = str(period)  # 30 for "30": the meaning is unambiguous
    if period not in PERIODS:
        raise problem((*where, "period"), f"must be one of {', '.join(PERIODS)}")
    return period


def validate(rule_type: str, config: Any) -> dict:
    """The stored config of a rule, from the request's `config`; BadRequest when invalid."""
    where = ("config",)
    if rule_type in NO_CONFIG:
        if config not in (None, {}):
            raise problem(where, f"{rule_type} takes no config")
        return {}
    if config is None:
        config = {}
        if rule_type != REVIEW_VPN:
            raise problem(where, "is required")
    if not isinstance(config, dict):
        raise problem(where, "must be an object")
    if rule_type == REVIEW_COUNTRY:
        kind = config.get("type")
        if kind not in ("whitelist", "blacklist"):
            raise problem((*where, "type"), "must be whitelist or blacklist")
        countries = clean_countries(_list(config, "countries", required=True, where=where), (*where, "countries"))
        return {"type": kind, "countries": countries}
    if rule_type in (REVIEW_IP, ALLOW_IP):
        return {"ips": clean_ips(_list(config, "ips", required=True, where=where), (*where, "ips"))}
    if rule_type == ALLOW_EMAIL:
        return {"emails": clean_emails(_list(config, "emails", required=True, where=where), (*where, "emails"))}
    if rule_type == REVIEW_EMAIL:
        emails = _list(config, "emails", required=False, where=where)
        domains = _list(config, "domains", required=False, where=where)
        if not emails and not domains:
            raise problem(where, EMAIL_RULE_NEEDS)
        return {"emails": clean_emails(emails or [], (*where, "emails")),
                "domains": clean_domains(domains or [], (*where, "domains"))}
    if rule_type == REVIEW_COUNT:
        amount = config.get("amount")
        if isinstance(amount, Decimal) and amount == amount.to_integral_value():
            amount = int(amount)  # 5.0 is 5
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise problem((*where, "amount"), "must be a whole number of at least 1")
        if amount > MAX_COUNT:
            raise problem((*where, "amount"), f"is too large (at most {MAX_COUNT:,})")
        return {"amount": amount, "period": _period(config, where)}
    if rule_type == REVIEW_AMOUNT:
        amount = config.get("amount")
        try:
            if isinstance(amount, bool) or not isinstance(amount, (int, Decimal)):
                raise MoneyError("must be a number")
            cents = to_cents(amount)
        except MoneyError as exc:
            raise problem((*where, "amount"), str(exc)) from None
        if cents < 100:
            raise problem((*where, "amount"), "must be at least 1")
        if cents > MAX_AMOUNT_CENTS:
            raise problem((*where, "amount"), "is too large")
        return {"amount_cents": cents, "period": _period(config, where)}
    if rule_type == REVIEW_VPN:
        skip = config.get("skip_apple_private_relay", False)
        if not isinstance(skip, bool):
            raise problem((*where, "skip_apple_private_relay"), "must be true or false")
        return {"skip_apple_private_relay": skip}
    raise AssertionError(rule_type)


def to_wire(rule_type: str, config: dict) -> dict:
    """The FraudRule object (API.md §3): amounts back in currency units."""
    shown = dict(config)
    if "amount_cents" in shown:
        shown["amount"] = money_to_wire(shown.pop("amount_cents"))
    return {"rule_type": rule_type, "config": shown}


def update_list(rule_type: str, stored: dict, operation: Any, config: Any) -> dict:
    """The stored config with the entries of `config` added or removed (update_list)."""
    if operation not in ("add", "remove"):
        raise problem(("operation",), "must be add or remove")
    keys = LIST_KEYS.get(rule_type)
    if keys is None:
        raise problem(("rule_type",), f"{rule_type} has no list to update")
    if not isinstance(config, dict):
        raise problem(("config",), "is required" if config is None else "must be an object")
    given = {k: _list(config, k, required=False, where=("config",)) for k in keys}
    if not any(given.values()):
        raise problem(("config",), f"needs {' or '.join(keys)}")
    updated = dict(stored)
    for key, values in given.items():
        if not values:
            continue
        entries = CLEANERS[key](values, ("config", key))
        current = list(stored.get(key) or [])
        if operation == "add":
            merged = list(dict.fromkeys(current + entries))
            if len(merged) > MAX_LIST:
                raise problem(("config", key), f"would exceed {MAX_LIST} entries")
        else:
            drop = set(entries)
            merged = [v for v in current if v not in drop]
        updated[key] = merged
    if not any(updated.get(key) for key in keys):
        # What the create refuses (EMPTY_LIST, EMAIL_RULE_NEEDS), refused here too, at the lists emptied.
        needs = f"it {EMAIL_RULE_NEEDS}" if rule_type == REVIEW_EMAIL else f"its {keys[0]} {NEEDS_ENTRY}"
        why = f"would leave the rule without entries ({needs}); delete the rule instead"
        removed = [key for key, values in given.items() if values]
        raise BadRequest(f"config.{removed[0]}: {why}", payload_from((("config", key), why) for key in removed))
    return updated
