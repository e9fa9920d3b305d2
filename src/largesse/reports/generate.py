"""The `generate_report` job: the CSV of an organization's rewards, streamed from the
database in pages and stored in report_chunks, in bounded memory whatever the row count.

Rows are read PAGE at a time by keyset pagination on (created_at, id) (the index
ix_rewards_org_created_id), each page in a short read transaction; the CSV text goes into a
buffer of about CHUNK_CHARS, one chunk row. Nothing holds more than one page and one chunk, so
memory does not grow with the report (docs/reports.md has the measured figures).

One run of the job writes one chunk: in one short write transaction it finishes its job, stores
the chunk and queues the next run (the keyset position, chunk number and counts travel in the
new job's payload), or, after the last chunk, publishes the report. So a report of any size
holds a worker thread for one chunk (a fraction of a second) at a time, and between its chunks
the queue serves everything else (emails, other reports) in its usual order: many reports
queued at once cannot starve email delivery. Each report writes its chunks under a generation
of its own; only the run that finishes with the report still PROCESSING under its generation
publishes them, and a run that lost its job's lease writes nothing at all.
"""

from __future__ import annotations

import csv
import io
import logging
import secrets
from datetime import date, datetime, timedelta

from sqlalchemy import and_, delete, false, or_, select, update

from largesse import db
from largesse.catalog.models import products
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.fields import service as fields_service
from largesse.fraud.models import fraud_reviews
from largesse.money import amount_in
from largesse.orders import lifecycle
from largesse.orders.models import orders, reward_field_values, rewards
from largesse.redemption.models import payouts
from largesse.reports import service
from largesse.reports.models import report_chunks, reports
from largesse.spreadsheet import safe_cell
from largesse.timeutil import iso, utcnow
from largesse.webhooks import service as webhooks

log = logging.getLogger("largesse.reports")

PAGE = 1000
CHUNK_CHARS = 256 * 1024
# The columns, in order (docs/reports.md describes each); then one column per custom field label.
COLUMNS = ("reward_id", "order_id", "order_external_id", "order_status", "campaign_id", "created_at",
           "recipient_name", "recipient_email", "recipient_phone", "amount", "fee", "currency_code",
           "delivery_method", "delivery_status", "delivered_at", "reward_status", "redeemed_at", "canceled_at",
           "expires_at", "redeemed_product_id", "redeemed_product_name", "fraud_review_status")
def _day(text: str) -> datetime:
    return datetime.combine(date.fromisoformat(text), datetime.min.time())


def _day_after(text: str) -> datetime | None:
    """The start of the day after `text`; None after 9999-12-31, the last date there is (no
    upper bound then: every timestamp is before it)."""
    day = date.fromisoformat(text)
    return None if day == date.max else datetime.combine(day + timedelta(days=1), datetime.min.time())


def conditions(org: str, filters: dict) -> list:
    """The WHERE of a report's filters (API.md §5 "Report filters").

    Decision: the `status` filter reads the stored columns, and that already agrees with the
    reward_status column (lifecycle.status, _line): none of its values (`delivered`, `canceled`,
    `delivery_failed`, `pending_review`) is a reward status that the expiry rule changes (it only
    turns ACTIVE into EXPIRED, and there is no `active` or `expired` filter), so nothing here
    changes. Were one added, it would read `status = 'EXPIRED' OR (status = 'ACTIVE' AND
    expires_at <= now)`, and `active` the converse (lifecycle.effective's rule in SQL)."""
    r, o, fr = rewards, orders, fraud_reviews
    where = [r.c.organization_id == org]
    if "amount_gte_cents" in filters:
        where.append(r.c.denomination_cents >= filters["amount_gte_cents"])
    if "amount_lte_cents" in filters:
        where.append(r.c.denomination_cents <= filters["amount_lte_cents"])
    if "created_gte" in filters:
        where.append(r.c.created_at >= _day(filters["created_gte"]))
    if "created_lte" in filters and (end := _day_after(filters["created_lte"])) is not None:
        where.append(r.c.created_at < end)
    if "delivered_at" in filters:
        where.append(r.c.delivered_at >= _day(filters["delivered_at"]))
        if (end := _day_after(filters["delivered_at"])) is not None:
            where.append(r.c.delivered_at < end)
    if "campaign_id" in filters:
        where.append(r.c.campaign_id == filters["campaign_id"])
    if "order_id" in filters:
        where.append(r.c.order_id == filters["order_id"])
    if "delivery_method" in filters:
        method = filters["delivery_method"]
        # mail and direct are Tremendous delivery methods that Largesse does not have.
        where.append(r.c.delivery_method == method.upper() if method in ("email", "link", "phone") else false())
    if "order_status" in filters:
        where.append(o.c.status == service.ORDER_STATUSES[filters["order_status"]])
    if filters.get("status"):
        matches = {"delivered": r.c.delivery_status == "SUCCEEDED", "canceled": r.c.status == "CANCELED",
                   "delivery_failed": r.c.delivery_status == "FAILED", "pending_review": fr.c.status == "flagged"}
        where.append(or_(*(matches[s] for s in filters["status"])))
    return where


def _page_query(org: str, filters: dict, after: tuple | None):
    r, o, p, pr, fr = rewards, orders, payouts, products, fraud_reviews
    query = (
        select(r.c.id, r.c.order_id, o.c.external_id, o.c.status.label("order_status"), r.c.campaign_id,
               r.c.created_at, r.c.recipient_name, r.c.recipient_email, r.c.recipient_phone, r.c.denomination_cents,
               r.c.fee_cents, r.c.currency_code, r.c.delivery_method, r.c.delivery_status, r.c.delivered_at,
               r.c.status, r.c.redeemed_at, r.c.canceled_at, r.c.expires_at, p.c.product_id,
               pr.c.name.label("product_name"), fr.c.status.label("review_status"))
        .select_from(r.join(o, o.c.id == r.c.order_id).outerjoin(p, p.c.reward_id == r.c.id)
                     .outerjoin(pr, pr.c.id == p.c.product_id).outerjoin(fr, fr.c.reward_id == r.c.id))
        .where(*conditions(org, filters))
        .order_by(r.c.created_at, r.c.id).limit(PAGE)
    )
    if after is not None:
        created, reward_id = after
        query = query.where(or_(r.c.created_at > created, and_(r.c.created_at == created, r.c.id > reward_id)))
    return query


def _line(row, labels: list[str], values: dict[str, str], *, now: datetime) -> list[str]:
    """One CSV row. reward_status is lifecycle.status as of `now` (the page's read): an ACTIVE
    reward past its expires_at is EXPIRED before the sweep has stored it, as in the API (unless
    its order waits for approval: those never expire)."""
    return [row.id, row.order_id, safe_cell(row.external_id), row.order_status, row.campaign_id or "",
            iso(row.created_at), safe_cell(row.recipient_name), safe_cell(row.recipient_email),
            safe_cell(row.recipient_phone),
            amount_in(row.denomination_cents, row.currency_code), amount_in(row.fee_cents, row.currency_code),
            row.currency_code,
            row.delivery_method, row.delivery_status, iso(row.delivered_at) or "",
            lifecycle.status(row, at=now, order_status=row.order_status),
            iso(row.redeemed_at) or "", iso(row.canceled_at) or "", iso(row.expires_at) or "",
            row.product_id or "", safe_cell(row.product_name), row.review_status or "",
            *(safe_cell(values.get(label)) for label in labels)]


_BUILT_IN = {c.lower() for c in COLUMNS}


def _header(labels: list[str]) -> list[str]:
    """A custom field whose label is a built-in column's name ("amount") is headed
    "custom_field:amount": a reader that loads rows by column name keeps both (a label holds
    no colon)."""
    return [*COLUMNS, *(safe_cell(f"custom_field:{label}" if label.lower() in _BUILT_IN else label)
                        for label in labels)]


def start_state(engine, org: str, generation: str) -> dict:
    """Where a new run of a report starts: no row read yet, the header still to write. The
    custom field labels are fixed here, so that every chunk has the header's columns."""
    with db.read(engine) as conn:
        labels = sorted({f.label for f in fields_service.list_for(conn, org)}, key=str.lower)
    return {"generation": generation, "labels": labels, "after": None, "seq": 0, "rows": 0, "bytes": 0}


def next_chunk(engine, org: str, filters: dict, state: dict) -> tuple[str, dict, bool]:
    """The CSV text that follows `state`: whole pages until it holds CHUNK_CHARS or the rows
    run out (the header first in chunk 0). Returns (text, the state after it, finished)."""
    labels = state["labels"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    if state["seq"] == 0:
        writer.writerow(_header(labels))
    after = state["after"] and (datetime.fromisoformat(state["after"][0]), state["after"][1])
    rows, finished = state["rows"], False
    while True:
        with db.read(engine) as conn:
            now = utcnow()
            page = conn.execute(_page_query(org, filters, after)).all()
            values: dict[str, dict[str, str]] = {}
            if page and labels:
                for v in conn.execute(select(reward_field_values.c.reward_id, reward_field_values.c.label,
                                             reward_field_values.c.value)
                                      .where(reward_field_values.c.reward_id.in_([p.id for p in page]))):
                    values.setdefault(v.reward_id, {})[v.label] = v.value
        for row in page:
            writer.writerow(_line(row, labels, values.get(row.id, {}), now=now))
        rows += len(page)
        if page:
            after = (page[-1].created_at, page[-1].id)
        if len(page) < PAGE:
            finished = True
            break
        del page, values
        if buffer.tell() >= CHUNK_CHARS:
            break
    data = buffer.getvalue()
    state = {**state, "after": after and [after[0].isoformat(), after[1]], "rows": rows,
             "seq": state["seq"] + (1 if data else 0), "bytes": state["bytes"] + len(data.encode())}
    return data, state, finished


def _store(conn, report_id: str, generation: str, seq: int, data: str) -> None:
    if data:
        conn.execute(report_chunks.insert().values(report_id=report_id, generation=generation, seq=seq, data=data))


def write_csv(engine, report_id: str, org: str, filters: dict, generation: str) -> tuple[int, int]:
    """The whole report in one go, chunk after chunk under `generation`; returns (rows, UTF-8
    bytes). The job does the same one chunk per run (generate_report); this is for measuring
    (bench/report_memory.py)."""
    state = start_state(engine, org, generation)
    while True:
        seq = state["seq"]
        data, state, finished = next_chunk(engine, org, filters, state)
        with db.write(engine) as conn:
            _store(conn, report_id, generation, seq, data)
        if finished:
            return state["rows"], state["bytes"]


def generate_report(ctx, job) -> str:
    """The job handler (delivery/tasks.py dispatches `generate_report` here): one chunk per run."""
    report_id = (job.payload or {}).get("report_id")
    try:
        return _generate(ctx, job, report_id)
    except Exception as exc:
        if db.is_unavailable(exc) or job.attempts < job.max_attempts:
            raise  # retried with backoff (delivery/tasks.py), or reclaimed after an outage
        log.exception("report %s failed", report_id)
        with db.write(ctx.engine) as conn:
            failed = conn.execute(update(reports).where(reports.c.id == report_id, reports.c.status.in_(
                service.IN_PROGRESS)).values(status=service.FAILED, completed_at=utcnow(),
                                             error=f"{type(exc).__name__}: {exc}"[:2000])).rowcount
            if failed:
                webhooks.emit(conn, job.organization_id, [("REPORTS.GENERATION.FAILED", report_id)])
                # The chunks written so far will never be served.
                conn.execute(delete(report_chunks).where(report_chunks.c.report_id == report_id))
            job_queue.mark_done(conn, job, ctx.worker_id, f"report failed: {type(exc).__name__}")
        return "failed"


def _holds(conn, job, worker_id: str) -> bool:
    """Whether this worker still holds the job, the row locked until the transaction ends
    (PostgreSQL; SQLite's write transactions are serialised), so it cannot be taken over
    meanwhile."""
    return conn.execute(select(jobs.c.id).where(jobs.c.id == job.id, jobs.c.status == job_queue.RUNNING,
                                                jobs.c.locked_by == worker_id).with_for_update()).first() is not None


def _generate(ctx, job, report_id: str | None) -> str:
    """One run: the next chunk of the report, stored in the same transaction that finishes this
    job and queues the next one (or publishes the report). A run that lost its job (its lease
    ran out and another worker took it over) writes nothing; the new holder redoes the chunk."""
    engine = ctx.engine
    state = (job.payload or {}).get("state")
    with db.write(engine) as conn:
        row = conn.execute(select(reports).where(reports.c.id == report_id)).first()
        current = row is not None and (row.status in service.IN_PROGRESS if state is None else (
            row.status == service.PROCESSING and row.generation == state["generation"]))
        if not current:
            job_queue.mark_done(conn, job, ctx.worker_id, "skipped: report missing, finished or superseded")
            return "skipped"
        if state is None:  # the first run
            if not _holds(conn, job, ctx.worker_id):
                return "lost"  # its lease ran out before it started: the job's new holder starts it
            now = utcnow()
            generation = secrets.token_hex(12)
            conn.execute(update(reports).where(reports.c.id == report_id)
                         .values(status=service.PROCESSING, started_at=now, generation=generation))
            # Housekeeping: the CSVs whose links have expired are dropped (the report rows stay).
            conn.execute(delete(report_chunks).where(report_chunks.c.report_id.in_(
                select(reports.c.id).where(reports.c.url_expires_at < now))))
    if state is None:
        state = start_state(engine, row.organization_id, generation)
    org, generation, seq = row.organization_id, state["generation"], state["seq"]
    data, state, finished = next_chunk(engine, org, row.filters or {}, state)
    key = salt = None
    if finished:
        from largesse.redemption.security import load_csrf_key

        key, salt = load_csrf_key(engine, ctx.settings), service.new_salt()
    with db.write(engine) as conn:
        if not job_queue.mark_done(conn, job, ctx.worker_id, None if not finished else "report complete"):
            return "lost"  # nothing written: the job's new holder writes this chunk
        _store(conn, report_id, generation, seq, data)
        if not finished:
            job_queue.enqueue(conn, kind=service.JOB_KIND, organization_id=org, max_attempts=job.max_attempts,
                              payload={"report_id": report_id, "state": state})
            return "chunk"
        done = utcnow()
        published = conn.execute(
            update(reports).where(reports.c.id == report_id, reports.c.status == service.PROCESSING,
                                  reports.c.generation == generation)
            .values(status=service.READY, completed_at=done, row_count=state["rows"], byte_size=state["bytes"],
                    download_salt=salt, download_hash=service.hash_token(service.token_for(key, report_id, salt)),
                    url_expires_at=done + timedelta(days=service.URL_DAYS), error=None)).rowcount
        if published:
            conn.execute(delete(report_chunks).where(report_chunks.c.report_id == report_id,
                                                     report_chunks.c.generation != generation))
            webhooks.emit(conn, org, [("REPORTS.GENERATION.SUCCEEDED", report_id)])
    log.info("report %s: %s rows, %s bytes", report_id, state["rows"], state["bytes"])
    return "generated" if published else "superseded"
