"""Reports: the request (validated filters), its status, and its download link.

create() stores the report as CREATED and queues a `generate_report` job in the outbox, in
one transaction; the worker writes the CSV into report_chunks (reports/generate.py). The
download link is /reports/download/<token>, served by Largesse outside /api/v2: the token is
HMAC-SHA256(key, "<id>:<salt>") under the process-independent key of redemption/security.py
(derived again for this purpose), so every API process can show it, while the database
stores only its salt and its SHA-256. It expires 7 days after the report is ready.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, func, select

from largesse.campaigns.models import campaigns
from largesse.delivery import jobs as job_queue
from largesse.errors import BadRequest, NotFound, TooManyRequests, nest
from largesse.ids import new_id
from largesse.jsonbody import problem
from largesse.money import MoneyError, to_cents
from largesse.orders.models import PENDING_APPROVAL, orders
from largesse.orgs import service as orgs
from largesse.orgs.models import organizations
from largesse.reports.models import reports
from largesse.timeutil import iso, utcnow

CREATED, PROCESSING, READY, FAILED = "CREATED", "PROCESSING", "READY_FOR_DOWNLOAD", "FAILED"
IN_PROGRESS = (CREATED, PROCESSING)
# Reports in progress (CREATED or PROCESSING) per organization; one more answers 429. Above any
# ordinary burst of a client (the official client does not retry a POST): it stops a runaway
# loop, not a user. Generation cannot starve the queue whatever the count (reports/generate.py).
MAX_IN_PROGRESS = 20
URL_DAYS = 7
JOB_KIND = "generate_report"
DOWNLOAD_PATH = "/reports/download/"
DELIVERY_METHODS = ("phone", "email", "link", "mail", "direct")
ORDER_STATUSES = {"executed": "EXECUTED", "canceled": "CANCELED", "failed": "FAILED",
                  "pending_approval": PENDING_APPROVAL}
REWARD_STATUSES = ("delivered", "canceled", "delivery_failed", "pending_review")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ID = re.compile(r"[A-Z0-9]{4,64}")


def _date(value: Any, path: tuple) -> str:
    if not isinstance(value, str) or not _DATE.fullmatch(value[:10]) or value[10:] not in ("", "T00:00:00Z",
                                                                                           "T00:00:00.000Z"):
        raise problem(path, "must be a date (YYYY-MM-DD)")
    try:
        return date.fromisoformat(value[:10]).isoformat()
    except ValueError:
        raise problem(path, "must be a date (YYYY-MM-DD)") from None


def _amount(value: Any, path: tuple) -> int:
    try:
        if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
            raise MoneyError("must be a number")
        cents = to_cents(value)
    except MoneyError as exc:
        raise problem(path, str(exc)) from None
    if cents < 0:
        raise problem(path, "must be >= 0")
    return cents


def _object(value: Any, path: tuple) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise problem(path, "must be an object")
    return value


def _refuse_empty_range(out: dict, low: str, high: str, path: tuple, words: str) -> None:
    """400 at path's lte when both bounds are given and no value could match them."""
    if low in out and high in out and out[low] > out[high]:
        raise problem((*path, "lte"), f"{words} {'.'.join((*path, 'gte'))}")


def validate(conn: Connection, org: str, body: dict) -> tuple[str, str, dict]:
    """(report_type, format, stored filters) from a CreateReport body (API.md §2.9)."""
    report_type, fmt = body.get("report_type"), body.get("format")
    if report_type is None:
        raise problem(("report_type",), "is required")
    if not isinstance(report_type, str) or report_type.lower() != "digital_rewards":
        raise problem(("report_type",), "must be digital_rewards")
    if fmt is None:
        raise problem(("format",), "is required")
    if not isinstance(fmt, str) or fmt.lower() != "csv":
        raise problem(("format",), "must be csv")
    report_type, fmt = report_type.lower(), fmt.lower()
    given = _object(_object(body.get("filters"), ("filters",)).get("digital_rewards"),
                    ("filters", "digital_rewards"))
    where = ("filters", "digital_rewards")
    out: dict[str, Any] = {}
    if given.get("amount") is not None:
        amount = _object(given["amount"], (*where, "amount"))
        for key in ("gte", "lte"):
            if amount.get(key) is not None:
                out[f"amount_{key}_cents"] = _amount(amount[key], (*where, "amount", key))
        _refuse_empty_range(out, "amount_gte_cents", "amount_lte_cents", (*where, "amount"), "must be at least")
    if given.get("created_at") is not None:
        created = _object(given["created_at"], (*where, "created_at"))
        for key in ("gte", "lte"):
            if created.get(key) is not None:
                out[f"created_{key}"] = _date(created[key], (*where, "created_at", key))
        _refuse_empty_range(out, "created_gte", "created_lte", (*where, "created_at"), "must not be before")
    if given.get("delivered_at") is not None:
        out["delivered_at"] = _date(given["delivered_at"], (*where, "delivered_at"))
    for key, table, noun in (("campaign_id", campaigns, "Campaign"), ("order_id", orders, "Order")):
        value = given.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not _ID.fullmatch(value):
            raise problem((*where, key), "must be an ID")
        found = conn.execute(select(table.c.id).where(table.c.id == value, table.c.organization_id == org)).first()
        if found is None:  # an ID in a body that is not the caller's: 400 at its property (docs/api.md)
            raise BadRequest(f"{noun} {value} not found", nest((*where, key), "not found"))
        out[key] = value
    if given.get("delivery_method") is not None:
        method = given["delivery_method"]
        if not isinstance(method, str) or method.lower() not in DELIVERY_METHODS:
            raise problem((*where, "delivery_method"), f"must be one of {', '.join(DELIVERY_METHODS)}")
        out["delivery_method"] = method.lower()
    if given.get("order_status") is not None:
        status = given["order_status"]
        if not isinstance(status, str) or status.lower() not in ORDER_STATUSES:
            raise problem((*where, "order_status"), f"must be one of {', '.join(ORDER_STATUSES)}")
        out["order_status"] = status.lower()
    if given.get("status") is not None:
        statuses = given["status"]
        if not isinstance(statuses, list) or len(statuses) > len(REWARD_STATUSES):
            raise problem((*where, "status"), "must be a list of statuses")
        for i, status in enumerate(statuses):
            if not isinstance(status, str) or status.lower() not in REWARD_STATUSES:
                raise problem((*where, "status", i), f"must be one of {', '.join(REWARD_STATUSES)}")
        out["status"] = sorted({s.lower() for s in statuses})
    return report_type, fmt, out


def create(conn: Connection, org: str, key_id: str | None, body: dict) -> dict:
    report_type, fmt, filters = validate(conn, org, body)
    # Lock the organization's row so that concurrent requests count the reports in progress
    # one after the other (SQLite: BEGIN IMMEDIATE already does).
    conn.execute(select(organizations.c.id).where(organizations.c.id == org).with_for_update())
    busy = conn.execute(select(func.count()).select_from(reports).where(
        reports.c.organization_id == org, reports.c.status.in_(IN_PROGRESS))).scalar_one()
    if busy >= MAX_IN_PROGRESS:
        raise TooManyRequests(f"{busy} reports are already being generated; wait for one to finish",
                              {"base": [f"at most {MAX_IN_PROGRESS} reports in progress"]},
                              headers={"Retry-After": "10"})
    report_id, now = new_id(), utcnow()
    conn.execute(reports.insert().values(id=report_id, organization_id=org, status=CREATED, report_type=report_type,
                                         format=fmt, filters=filters, requested_by=key_id, created_at=now))
    job_queue.enqueue(conn, kind=JOB_KIND, organization_id=org, payload={"report_id": report_id}, max_attempts=3,
                      now=now)
    return get(conn, org, report_id, None)


def token_for(key: bytes, report_id: str, salt: str) -> str:
    report_key = hmac.new(key, b"largesse report download", hashlib.sha256).digest()
    return hmac.new(report_key, f"{report_id}:{salt}".encode(), hashlib.sha256).hexdigest()


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_salt() -> str:
    return secrets.token_hex(16)


def get(conn: Connection, org: str, report_id: str, link) -> dict:
    """The Report object; `link(report_id, salt)` builds the download URL (None: no URL)."""
    row = conn.execute(select(reports).where(reports.c.id == report_id, reports.c.organization_id == org)).first()
    if row is None:
        raise NotFound(f"Report {report_id} not found", {"id": ["not found"]})
    return to_wire(row, link)


def list_recent(conn: Connection, org: str, link, *, limit: int = 20) -> list[dict]:
    """The organization's latest reports, newest first, as get() shows each, with the filters
    they were asked with (the dashboard's list)."""
    rows = conn.execute(select(reports).where(reports.c.organization_id == org)
                        .order_by(reports.c.created_at.desc(), reports.c.id.desc()).limit(limit)).all()
    return [{**to_wire(row, link), "filters": row.filters} for row in rows]


def to_wire(row, link) -> dict:
    wire = {"id": row.id, "status": row.status, "created_at": iso(row.created_at),
            "expected_completion_at": iso(row.completed_at or row.created_at + timedelta(minutes=1))}
    if row.status == READY and link is not None and row.url_expires_at and row.url_expires_at > utcnow():
        wire["url"] = link(row.id, row.download_salt)
    return wire


def find_download(conn: Connection, token: str, now: datetime, environment: str):
    """(report row, None) for a valid token, or (None, why): "not_found" or "expired". A report of
    the other environment's organization is not found: each server serves its own environment."""
    row = conn.execute(select(reports).where(
        reports.c.download_hash == hash_token(token),
        reports.c.organization_id.in_(orgs.of_environment(environment)),
    )).first()
    if row is None or row.status != READY:
        return None, "not_found"
    if row.url_expires_at is None or row.url_expires_at <= now:
        return None, "expired"
    return row, None

