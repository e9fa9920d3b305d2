"""From what a person typed or uploaded to the API's own order request (orders/schemas.py).

Nothing here decides whether an order is acceptable: a row becomes a RewardIn (the shape
POST /orders takes) and orders.service checks it with the API's rules and messages. What
this module does is the translation, and putting each problem back on the row it came from.

The CSV: a header row, then one reward per row. Columns `name`, `email` and `amount` are
required; a column whose header is the label of one of the organization's custom fields
fills that field; other columns are reported and ignored.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import ValidationError
from sqlalchemy import Connection, delete

from largesse.dashboard import forms
from largesse.dashboard.models import uploads
from largesse.orders.schemas import CreateOrderIn, PaymentIn, RewardIn

MAX_ROWS = 5000  # a dashboard upload is one order; the API caps a request body at 500 rewards
MAX_COLUMNS = 1000  # name, email, amount, products and custom fields (at most 100 a reward), with room to spare
REQUIRED_COLUMNS = ("name", "email", "amount")


# --- problems in the words of the forms ---------------------------------------------------------
# The services and the API's models name a problem by its JSON path ("value.denomination: must be
# greater than 0"). A person filling a form knows its labels: every page that shows such problems
# (send one, the CSV preview, the campaign editor) translates them here, keeping the service's own
# message after the label. The rules stay the services'; only the names change.
REWARD_LABELS = {
    "value.denomination": "Amount", "value.currency_code": "Currency", "value": "Amount", "amount": "Amount",
    "recipient.name": "Recipient name", "recipient.email": "Recipient email", "recipient.phone": "Recipient phone",
    "recipient": "Recipient", "products": "Products", "campaign_id": "Campaign", "delivery.method": "Delivery",
    "delivery.meta.message": "Message", "delivery": "Delivery", "custom_fields": "Custom fields",
    "payment.funding_source_id": "Balance", "payment": "Balance", "external_id": "Order",
}
CAMPAIGN_LABELS = {
    "name": "Campaign name", "description": "Description", "products": "Products",
    "webpage_style.headline": "Page headline", "webpage_style.message": "Message to the recipient",
    "webpage_style.logo_image_url": "Logo URL", "webpage_style.background_color": "Background colour",
    "webpage_style": "Recipient's page", "email_style.sender_name": "Sender name",
    "email_style.subject_line": "Subject line", "email_style.button_color": "Button colour",
    "email_style.logo_image_url": "Email logo URL", "email_style": "Email",
}
# Messages that name API fields themselves, said with the form's words (label, message).
REWORDED = {"products or campaign_id is required": ("Products", "choose at least one product, or a campaign")}
NO_CAMPAIGN_PRODUCTS = "Choose at least one product"


def _parts(loc) -> list[str]:
    """A problem's path without pydantic's validator names and the API's wrappers ("reward",
    "base": the request as a whole)."""
    parts = [str(p) for p in loc if not str(p).startswith("function-")]
    if parts and parts[0] == "reward":
        parts = parts[1:]
    return [p for p in parts if p != "base"]


def in_words(loc, message: str, *, labels: dict[str, str] | None = None, field_labels=()) -> str:
    """One problem ((path, message), as the services and the API's models give it) as a person
    reads it: "Amount: must be greater than 0", "Department: must be one of: Sales, Support".
    `field_labels`: the labels of the custom fields the request carried, in its order (the
    problem of custom_fields.1 is the second one's)."""
    labels = REWARD_LABELS if labels is None else labels
    parts = _parts(loc)
    message = str(message).removeprefix("Value error, ")
    if not parts and message in REWORDED:
        label, message = REWORDED[message]
        return f"{label}: {message}"
    if len(parts) >= 2 and parts[0] == "custom_fields" and parts[1].isdigit():
        index = int(parts[1])
        label = field_labels[index] if index < len(field_labels) else "Custom field"
        return f"{label}: {message}"
    for end in range(len(parts), 0, -1):
        label = labels.get(".".join(parts[:end]))
        if label:
            return f"{label}: {message}"
    if parts:  # a path no form shows: its last word, readable
        return f"{parts[-1].replace('_', ' ').capitalize()}: {message}"
    return message


def pydantic_locs(exc: ValidationError) -> list[tuple[tuple, str]]:
    return [(tuple(err.get("loc", ())), err.get("msg", "is invalid")) for err in exc.errors()]


def payload_locs(payload, prefix: tuple = ()) -> list[tuple[tuple, str]]:
    """An API error payload ({"reward": {"recipient": {"email": ["..."]}}}) as (path, message)."""
    if isinstance(payload, list):
        return [(prefix, str(m)) for m in payload]
    if isinstance(payload, dict):
        return [pair for k, v in payload.items() for pair in payload_locs(v, (*prefix, k))]
    return []


def describe(problems, *, labels: dict[str, str] | None = None, field_labels=()) -> list[str]:
    """in_words() for each (path, message)."""
    return [in_words(loc, message, labels=labels, field_labels=field_labels) for loc, message in problems]


def api_error_lines(exc, *, labels: dict[str, str] | None = None, field_labels=()) -> list[str]:
    """An ApiError's payload in words, else its message."""
    return describe(payload_locs(exc.payload), labels=labels, field_labels=field_labels) or [exc.message]


def reward_in(*, name: str, email: str, amount_text: str, products: list[str], campaign_id: str | None,
              method: str = "EMAIL", message: str | None = None, custom_fields: list[dict] | None = None,
              currency: str | None = None, field_labels=()) -> tuple[RewardIn | None, list[str]]:
    """(RewardIn, []) or (None, problems in words) for one recipient; currency: the reward's (None:
    the balance's, as the API's default); field_labels: the custom fields' labels, in their order."""
    try:
        value = forms.read_amount(amount_text)  # the dashboard's one rule for typed amounts
    except forms.AmountError as exc:
        return None, [in_words(("amount",), str(exc))]
    data = {
        "value": {"denomination": value, **({"currency_code": currency} if currency else {})},
        "recipient": {"name": name or None, "email": email or None},
        "delivery": {"method": method, **({"meta": {"message": message}} if message else {})},
        "products": products or None,
        "campaign_id": campaign_id or None,
        "custom_fields": custom_fields or None,
    }
    try:
        return RewardIn.model_validate(data), []
    except ValidationError as exc:
        return None, describe(pydantic_locs(exc), field_labels=field_labels)


def order_in(rewards: list[RewardIn], *, external_id: str | None = None, single: bool = False) -> CreateOrderIn:
    payment = PaymentIn(funding_source_id="BALANCE")
    if single:
        return CreateOrderIn(payment=payment, reward=rewards[0], external_id=external_id)
    # Each reward was validated on its own; construct() only skips the API's 500-reward cap.
    return CreateOrderIn.model_construct(external_id=external_id, payment=payment, reward=None, rewards=rewards)


def problems_by_row(problems: list[tuple[tuple, str]], field_labels=lambda index: ()
                    ) -> tuple[dict[int, list[str]], list[str]]:
    """Split the service's (loc, message) problems into {row index: messages} and the rest, in
    words; field_labels(index): the labels of that reward's custom fields, in their order."""
    rows: dict[int, list[str]] = {}
    general = []
    for loc, message in problems:
        if len(loc) > 1 and loc[0] == "rewards" and isinstance(loc[1], int):
            rows.setdefault(loc[1], []).append(in_words(loc[2:], message, field_labels=field_labels(loc[1])))
        else:
            general.append(in_words(loc, message))
    return rows, general


@dataclass
class Row:
    line: int  # in the file (the header is line 1)
    name: str
    email: str
    amount: str
    values: dict[str, str]  # custom field label -> value
    reward: RewardIn | None = None
    problems: list[str] = field(default_factory=list)
    shape_problem: str | None = None  # the row itself cannot be read as the header says (extra cells)


@dataclass
class Sheet:
    rows: list[Row]
    problems: list[str]  # about the file as a whole
    ignored_columns: list[str]


def digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def external_id_for(sha256: str, options: dict | None, *, again: str | None = None) -> str:
    """The order's external_id: the same file sent with the same choices (products, campaign,
    message, delivery, currency) is one order (POST /orders replay), so a double click or a file
    uploaded twice by mistake sends nothing twice; other choices are another order. `again`: the
    upload's ID when the sender chose, on its preview, to send that file again as a new order."""
    key = hashlib.sha256(json.dumps([sha256, options or {}], sort_keys=True).encode()).hexdigest()
    return f"dashboard-csv-{key[:40]}" + (f"-{again}" if again else "")


def legacy_external_id(sha256: str) -> str:
    """The external_id of a file placed before its choices counted (the file's bytes alone):
    such an order is still that file's first (an upload is kept UPLOAD_DAYS)."""
    return f"dashboard-csv-{sha256[:40]}"


def read_csv(content: bytes, fields: list) -> Sheet:
    """Parse the upload; `fields` are the organization's custom fields (rows with .id, .label)."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError:
        return Sheet([], ["The file is not UTF-8 text. Save it as CSV (UTF-8) and upload it again."], [])
    # newline="": the csv module reads every line ending itself (\n, \r\n, and the old Mac \r).
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        return Sheet([], ["The file is empty."], [])
    except csv.Error as exc:
        return Sheet([], [f"The file is not valid CSV: {exc}."], [])
    if len(header) > MAX_COLUMNS:  # 130,000 empty columns fit the upload limit
        return Sheet([], [f"The header row has {len(header):,} columns, more than {MAX_COLUMNS:,}; keep the "
                          "columns of the rewards (name, email, amount and custom fields)."], [])
    lower = [h.lower() for h in header]
    repeated = sorted(h for h, n in Counter(lower).items() if h and n > 1)  # lower.count per column: quadratic
    if repeated:  # which of the columns holds the value? Refused, never guessed
        return Sheet([], [f"The header row names {', '.join(repeated)} more than once; keep one column of each."],
                     [])
    missing = [c for c in REQUIRED_COLUMNS if c not in lower]
    if missing:
        separator = next((name for mark, name in ((";", "semicolons"), ("\t", "tabs"))
                          if len(header) == 1 and mark in header[0]), None)
        hint = (f" The columns seem to be separated by {separator} (as some spreadsheets save CSV): save it as "
                "CSV with commas and upload it again." if separator else "")
        return Sheet([], [f"The header row must name the columns {', '.join(REQUIRED_COLUMNS)}; "
                          f"missing: {', '.join(missing)}.{hint}"], [])
    by_label = {f.label.lower(): f for f in fields}
    ignored = [h for h in header if h.lower() not in REQUIRED_COLUMNS and h.lower() not in by_label and h]
    rows: list[Row] = []
    problems: list[str] = []
    try:
        for number, cells in enumerate(reader, start=2):
            if not any(c.strip() for c in cells):
                continue
            if len(rows) >= MAX_ROWS:
                problems.append(f"The file has more than {MAX_ROWS} rows; split it into several files.")
                break
            record = {lower[i]: cells[i].strip() for i in range(min(len(cells), len(lower)))}
            values = {by_label[k].label: v for k, v in record.items() if k in by_label and v}
            rows.append(Row(number, record.get("name", ""), record.get("email", ""), record.get("amount", ""),
                            values, shape_problem=_extra_cells(cells, lower)))
    except csv.Error as exc:
        problems.append(f"The file is not valid CSV: {exc}.")
    if not rows and not problems:
        problems.append("The file has no rows after the header.")
    return Sheet(rows, problems, ignored)


def _extra_cells(cells: list[str], lower: list[str]) -> str | None:
    """Why a row with more (non-blank) cells than the header cannot be read: its cells no longer
    line up with the columns (most often "7,50" unquoted, which is two cells). Refused, never
    guessed: dropping the extra cells sent 7.00 for "7,50". Fewer cells read as blanks."""
    if len(cells) <= len(lower) or not any(c.strip() for c in cells[len(lower):]):
        return None
    where = f"this row has {len(cells)} cells but the header has {len(lower)}"
    amount = lower.index("amount")
    whole, fraction = cells[amount].strip(), cells[amount + 1].strip() if amount + 1 < len(cells) else ""
    if whole.isdigit() and fraction.isdigit() and len(fraction) <= 2:
        return f"{where}: a comma in an amount? write {whole}.{fraction.ljust(2, '0')}, or quote the cell"
    return f'{where}: a comma inside a value? quote the cell ("Smith, Ada"), or write amounts with a dot (7.50)'


def build_rewards(sheet: Sheet, fields: list, *, products: list[str], campaign_id: str | None,
                  message: str | None, method: str = "EMAIL", currency: str | None = None) -> None:
    """Give each row its RewardIn, or the problems that kept it from being one."""
    ids = {f.label: f.id for f in fields}
    for row in sheet.rows:
        if row.shape_problem:
            row.reward, row.problems = None, [row.shape_problem]
            continue
        custom = [{"id": ids[label], "value": value} for label, value in row.values.items()]
        row.reward, row.problems = reward_in(name=row.name, email=row.email, amount_text=row.amount,
                                             products=products, campaign_id=campaign_id, message=message,
                                             method=method, custom_fields=custom, currency=currency,
                                             field_labels=list(row.values))


# Days an uploaded file is kept: it holds recipients' names and addresses. Its preview answers
# 404 after; the worker's periodic sweep deletes it (delivery/tasks.expire_rewards), and an
# organization's new upload deletes its own older ones at once.
UPLOAD_DAYS = 7


def upload_cutoff(now: datetime) -> datetime:
    return now - timedelta(days=UPLOAD_DAYS)


def prune_uploads(conn: Connection, *, now: datetime, organization_id: str | None = None) -> int:
    """Delete the uploads older than UPLOAD_DAYS (of one organization, or of all)."""
    condition = uploads.c.created_at < upload_cutoff(now)
    if organization_id is not None:
        condition &= uploads.c.organization_id == organization_id
    return conn.execute(delete(uploads).where(condition)).rowcount
