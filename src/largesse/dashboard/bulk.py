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
from dataclasses import dataclass, field

from pydantic import ValidationError

from largesse.dashboard import forms
from largesse.orders.schemas import CreateOrderIn, PaymentIn, RewardIn

MAX_ROWS = 5000  # a dashboard upload is one order; the API caps a request body at 500 rewards
REQUIRED_COLUMNS = ("name", "email", "amount")


def pydantic_problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if not str(p).startswith("function-"))
        message = err.get("msg", "is invalid").removeprefix("Value error, ")
        out.append(f"{loc}: {message}" if loc else message)
    return out


def reward_in(*, name: str, email: str, amount_text: str, products: list[str], campaign_id: str | None,
              method: str = "EMAIL", message: str | None = None, custom_fields: list[dict] | None = None,
              currency: str | None = None) -> tuple[RewardIn | None, list[str]]:
    """(RewardIn, []) or (None, problems) for one recipient; currency: the reward's (None: the
    balance's, as the API's default)."""
    try:
        value = forms.read_amount(amount_text)  # the dashboard's one rule for typed amounts
    except forms.AmountError as exc:
        return None, [f"amount: {exc}"]
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
        return None, pydantic_problems(exc)


def order_in(rewards: list[RewardIn], *, external_id: str | None = None, single: bool = False) -> CreateOrderIn:
    payment = PaymentIn(funding_source_id="BALANCE")
    if single:
        return CreateOrderIn(payment=payment, reward=rewards[0], external_id=external_id)
    # Each reward was validated on its own; construct() only skips the API's 500-reward cap.
    return CreateOrderIn.model_construct(external_id=external_id, payment=payment, reward=None, rewards=rewards)


def flatten(payload, prefix: str = "") -> list[str]:
    """An API error payload ({"reward": {"recipient": {"email": ["..."]}}}) as lines to show."""
    if isinstance(payload, list):
        return [f"{prefix.removeprefix('reward.')}: {m}" if prefix else str(m) for m in payload]
    if isinstance(payload, dict):
        return [line for k, v in payload.items() for line in flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    return []


def problems_by_row(problems: list[tuple[tuple, str]]) -> tuple[dict[int, list[str]], list[str]]:
    """Split the service's (loc, message) problems into {row index: messages} and the rest."""
    rows: dict[int, list[str]] = {}
    general = []
    for loc, message in problems:
        if len(loc) > 1 and loc[0] == "rewards" and isinstance(loc[1], int):
            where = ".".join(str(p) for p in loc[2:])
            rows.setdefault(loc[1], []).append(f"{where}: {message}" if where else message)
        else:
            general.append(".".join(str(p) for p in loc) + ": " + message if loc else message)
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


@dataclass
class Sheet:
    rows: list[Row]
    problems: list[str]  # about the file as a whole
    ignored_columns: list[str]


def digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def external_id_for(sha256: str) -> str:
    """The order's external_id: the same upload placed twice is one order (POST /orders replay)."""
    return f"dashboard-csv-{sha256[:40]}"


def read_csv(content: bytes, fields: list) -> Sheet:
    """Parse the upload; `fields` are the organization's custom fields (rows with .id, .label)."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError:
        return Sheet([], ["The file is not UTF-8 text. Save it as CSV (UTF-8) and upload it again."], [])
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except (StopIteration, csv.Error):
        return Sheet([], ["The file is empty."], [])
    lower = [h.lower() for h in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in lower]
    if missing:
        return Sheet([], [f"The header row must name the columns {', '.join(REQUIRED_COLUMNS)}; "
                          f"missing: {', '.join(missing)}."], [])
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
                            values))
    except csv.Error as exc:
        problems.append(f"The file is not valid CSV: {exc}.")
    if not rows and not problems:
        problems.append("The file has no rows after the header.")
    return Sheet(rows, problems, ignored)


def build_rewards(sheet: Sheet, fields: list, *, products: list[str], campaign_id: str | None,
                  message: str | None, method: str = "EMAIL", currency: str | None = None) -> None:
    """Give each row its RewardIn, or the problems that kept it from being one."""
    ids = {f.label: f.id for f in fields}
    for row in sheet.rows:
        custom = [{"id": ids[label], "value": value} for label, value in row.values.items()]
        row.reward, row.problems = reward_in(name=row.name, email=row.email, amount_text=row.amount,
                                             products=products, campaign_id=campaign_id, message=message,
                                             method=method, custom_fields=custom, currency=currency)
