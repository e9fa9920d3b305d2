"""The reward email: a multipart (text + HTML) message rendered from Jinja2 templates.

Copy comes from, most specific first: the order's delivery.meta (sender_name,
subject_line, message), the campaign's email_style / webpage_style, then defaults.

Placeholders: `{{ Department }}` in the subject, headline or message is replaced by the
reward's value for the custom field labelled "Department" (case-insensitive) BEFORE
rendering. The copy is then passed to the templates as plain data, so Jinja never
evaluates client text as a template, and the HTML template's autoescaping escapes both the
copy and the substituted values. A placeholder that names a field of the organization the
reward has no value for becomes empty; any other placeholder is left as written (it is
most likely a typo the sender should see in a test send).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

_env = Environment(
    loader=PackageLoader("largesse.delivery", "templates"),
    autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=False),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
)

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_][A-Za-z0-9_ ]*?)\s*\}\}")
CSS_COLOR = re.compile(r"^(#[0-9A-Fa-f]{3,8}|[A-Za-z]{3,20})$")
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}
DEFAULT_BUTTON = "#2563eb"
DEFAULT_LOGO_BACKGROUND = "#ffffff"


@dataclass
class RewardMail:
    """What the composer needs to know about one reward, gathered by the task."""

    reward_id: str
    recipient_name: str | None
    recipient_email: str
    denomination_cents: int
    currency_code: str
    expires_at: object | None
    language: str | None
    delivery_meta: dict | None
    email_style: dict | None
    webpage_style: dict | None
    field_values: dict[str, str]  # lower-cased label -> value (every org field; "" when unset)


def fill_placeholders(text: str, values: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        key = match.group(1).strip().lower()
        return values[key] if key in values else match.group(0)

    return PLACEHOLDER.sub(replace, text)


def format_value(cents: int, currency: str) -> str:
    amount = f"{cents // 100:,}.{cents % 100:02d}"
    symbol = SYMBOLS.get(currency)
    return f"{symbol}{amount}" if symbol else f"{amount} {currency}"


def _one_line(text: str) -> str:
    """Header values must not contain line breaks (header injection)."""
    return " ".join(text.split())


def _color(value, default: str) -> str:
    return value if isinstance(value, str) and CSS_COLOR.match(value) else default


def _url(value) -> str | None:
    return value if isinstance(value, str) and value.startswith(("https://", "http://")) else None


def _date(value) -> str | None:
    return f"{value:%B} {value.day}, {value.year}" if value else None


def build(mail: RewardMail, *, link: str, mail_from: str, mail_from_name: str, now) -> EmailMessage:
    meta = mail.delivery_meta or {}
    style = mail.email_style or {}
    page = mail.webpage_style or {}
    values = mail.field_values

    def pick(*candidates):
        return next((c for c in candidates if isinstance(c, str) and c.strip()), None)

    sender_name = _one_line(pick(meta.get("sender_name"), style.get("sender_name"), mail_from_name) or "")
    value = format_value(mail.denomination_cents, mail.currency_code)
    subject = pick(meta.get("subject_line"), style.get("subject_line")) or f"{sender_name} sent you a {value} reward"
    subject = _one_line(fill_placeholders(subject, values))
    headline = fill_placeholders(pick(page.get("headline")) or "You've received a reward", values)
    message = pick(meta.get("message"), page.get("message"))
    message = fill_placeholders(message, values).strip() if message else ""
    height = style.get("logo_image_height_px")
    context = {
        "subject": subject,
        "headline": headline,
        "message": message,
        "message_paragraphs": [p.strip() for p in re.split(r"\n\s*\n", message) if p.strip()],
        "recipient_name": mail.recipient_name,
        "sender_name": sender_name,
        "value": value,
        "link": link,
        "expires_at": _date(mail.expires_at),
        "language": mail.language or "en",
        "button_color": _color(style.get("button_color"), DEFAULT_BUTTON),
        "logo_image_url": _url(style.get("logo_image_url")),
        "logo_background_color": _color(style.get("logo_background_color"), DEFAULT_LOGO_BACKGROUND),
        "logo_image_height_px": height if isinstance(height, int) and 0 < height <= 400 else 48,
    }
    text = _env.get_template("reward_email.txt").render(context)
    html = _env.get_template("reward_email.html").render(context)

    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = Address(display_name=sender_name, addr_spec=mail_from)
    msg["To"] = Address(display_name=_one_line(mail.recipient_name or ""), addr_spec=mail.recipient_email)
    msg["Date"] = format_datetime(now.replace(tzinfo=UTC))
    msg["Message-ID"] = make_msgid(domain=mail_from.rpartition("@")[2] or None)
    # Not a secret (the link is): lets operators and tests find the message of a reward.
    msg["X-Largesse-Reward-Id"] = mail.reward_id
    msg.set_content(text)
    msg.add_alternative(html, subtype="html")
    return msg
