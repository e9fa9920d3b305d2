"""Custom field definitions and the validation of values sent on rewards."""

from __future__ import annotations

import re
import unicodedata
from datetime import date

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.exc import IntegrityError

from largesse import email_address
from largesse.errors import Unprocessable
from largesse.fields.models import fields
from largesse.ids import new_id
from largesse.timeutil import utcnow

DATA_TYPES = ("Checkbox", "Currency", "Date", "Dropdown", "Email", "List", "Number", "Phone", "Text", "TextArea")
LABEL_MAX = fields.c.label.type.length
MARKS = ("Mn", "Mc")  # combining and spacing marks: the vowel signs of Devanagari, Thai...
DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?\Z")


_FOR_ORG = select(fields).where(fields.c.organization_id == bindparam("org")).order_by(fields.c.created_at, fields.c.id)


def list_for(conn: Connection, organization_id: str):
    return conn.execute(_FOR_ORG, {"org": organization_id}).all()


def can_be_label(name: str) -> bool:
    """Whether a query parameter name could be a custom field's label (GET /rewards' filters)."""
    label = label_of(name)
    return bool(label) and _label_allowed(label)


def _label_allowed(label: str) -> bool:
    """Letters and digits of any script (str.isalnum), spaces and underscores; a mark only
    after a letter, digit or mark (part of the letter: हिन्दी). Punctuation and symbols (`-`, `.`,
    `/`, `=`, `&`, `[`, `]`...) are refused: the label is a query parameter name of GET /rewards."""
    previous = " "
    for char in label:
        if not (char.isalnum() or char in " _"
                or (unicodedata.category(char) in MARKS and previous not in " _")):
            return False
        previous = char
    return True


def label_of(name: str) -> str:
    """A label as stored and as searched (GET /rewards?<label>=...): runs of spaces folded, and
    Unicode NFC, so that an accented letter typed decomposed (e + U+0301) is the one letter é."""
    folded = " ".join(name.split())
    return folded if folded.isascii() else unicodedata.normalize("NFC", folded)


def create(conn: Connection, *, organization_id: str, display_name: str, data_type: str, options: list[str] | None,
           required: bool, description: str | None, labels: dict[str, str] | None = None):
    label = label_of(display_name)
    if not label or not _label_allowed(label):
        raise Unprocessable("display_name may contain only letters, digits, spaces and underscores",
                            {"display_name": ["may contain only letters, digits, spaces and underscores"]})
    if len(label) > LABEL_MAX:  # NFC lengthens a few letters (U+0958 is two code points in NFC)
        raise Unprocessable(f"display_name is too long (at most {LABEL_MAX} characters)",
                            {"display_name": [f"is too long (at most {LABEL_MAX} characters)"]})
    if label.lower() in ("offset", "limit"):
        raise Unprocessable(f"{label!r} is reserved for pagination", {"display_name": ["is reserved"]})
    if data_type not in DATA_TYPES:
        raise Unprocessable(f"data_type must be one of {', '.join(DATA_TYPES)}",
                            {"data_type": [f"must be one of {', '.join(DATA_TYPES)}"]})
    data = None
    if data_type in ("Dropdown", "List"):
        cleaned = [o for o in (options or []) if o.strip()]
        if not cleaned:
            raise Unprocessable(f"a {data_type} field needs data.options", {"data": {"options": ["can't be blank"]}})
        if len(set(cleaned)) != len(cleaned):
            raise Unprocessable("options must be unique", {"data": {"options": ["must be unique"]}})
        data = {"options": cleaned}
        if labels:  # the text shown for an option; the value stored and searched is the option
            unknown = [option for option in labels if option not in cleaned]
            if unknown:
                raise Unprocessable(f"data.labels names {unknown[0]!r}, which is not one of data.options",
                                    {"data": {"labels": [f"{unknown[0]!r} is not one of the options"]}})
            data["labels"] = {option: text for option, text in labels.items() if text.strip()}
    elif labels:
        raise Unprocessable(f"a {data_type} field has no options to label",
                            {"data": {"labels": ["are only for Dropdown and List fields"]}})
    field_id = new_id()
    row = {
        "id": field_id, "organization_id": organization_id, "label": label, "data_type": data_type,
        "data": data, "required": required, "scope": "REWARD", "description": description, "created_at": utcnow(),
    }
    try:
        with conn.begin_nested():
            conn.execute(fields.insert().values(**row))
    except IntegrityError:
        raise Unprocessable(f"A field labelled {label!r} already exists",
                            {"display_name": ["has already been taken"]}) from None
    return row


def to_wire(row) -> dict:
    get = row.get if isinstance(row, dict) else row._mapping.get
    return {
        "id": get("id"),
        "label": get("label"),
        "data_type": get("data_type"),
        "data": get("data") or {},
        "required": bool(get("required")),
        "scope": get("scope"),
    }


_CHECKBOX_VALUES = ("true", "false")


def stored_value(field, value: str) -> str:
    """A checked value as it is stored, shown and searched: a Checkbox's in lower case (it takes
    True and TRUE too, which a search for true did not find)."""
    return value.lower() if field.data_type == "Checkbox" else value


def search_values(conn: Connection, organization_id: str, filters: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """GET /rewards' (label, value) filters, a Checkbox's value as stored_value keeps it: ?Opted_in=True
    finds what was sent as "true" or "TRUE". The fields are read only for such a value."""
    if not any(value.lower() in _CHECKBOX_VALUES and value != value.lower() for _, value in filters):
        return filters
    checkboxes = {row.label for row in list_for(conn, organization_id) if row.data_type == "Checkbox"}
    return [(label, value.lower() if label in checkboxes and value.lower() in _CHECKBOX_VALUES else value)
            for label, value in filters]


def check_value(field, value: str) -> str | None:
    """The problem with a value for a field, or None when it is acceptable."""
    kind = field.data_type
    if field.required and not value.strip():
        return "can't be blank: the field is required"
    if kind in ("Dropdown", "List"):
        options = (field.data or {}).get("options", [])
        if value not in options:
            return f"must be one of: {', '.join(options)}"
    elif kind == "Checkbox":
        if value.lower() not in _CHECKBOX_VALUES:
            return "must be true or false"
    elif kind in ("Number", "Currency"):
        if not NUMBER.match(value):
            return "must be a number"
    elif kind == "Date":
        try:  # fromisoformat alone also takes 20260105 and 2026-W02-1
            if not DATE.fullmatch(value):
                raise ValueError(value)
            date.fromisoformat(value)
        except ValueError:
            return "must be a date (YYYY-MM-DD)"
    elif kind == "Email":
        if not email_address.valid(value):
            return "must be an email address"
    elif kind == "Text" and len(value) > 255:
        return "must be at most 255 characters"
    return None
