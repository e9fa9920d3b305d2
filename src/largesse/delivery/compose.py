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

The message goes out as bytes built here directly (transport.Outgoing), not through
email.message.EmailMessage and its generator: building an EmailMessage and flattening it cost
about 1.5 ms per email, three times what this costs, templates included. The bytes are the same as the
email package's (tests/delivery/test_compose.py compares them): every header is folded by the
email package's own header classes (email.policy.SMTP, or SMTPUTF8 for an address that is not
ASCII, as smtplib.send_message does), with a cache for the values that repeat from one email
to the next (the sender, a campaign's subject, the date of this second), except the plain
one-line values that the package writes unchanged (header()); each part's body is
encoded by the package's own text encoder (7bit, 8bit, quoted-printable or base64, whichever
it picks); only the layout of the multipart/alternative (boundary lines, part headers) is
written here.
"""

from __future__ import annotations

import email.policy
import functools
import random
import re
import sys
import unicodedata
from dataclasses import dataclass
from datetime import UTC
from email.contentmanager import _encode_text  # the encoder EmailMessage.set_content uses
from email.header import Header
from email.headerregistry import Address
from email.utils import format_datetime, make_msgid

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from largesse.delivery.transport import Outgoing
from largesse.fields.service import label_of
from largesse.money import format_money
from largesse.redemption.style import HEX_COLOR, LIGHT_TEXT, text_color_for

_env = Environment(
    loader=PackageLoader("largesse.delivery", "templates"),
    autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=False),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
)

# {{ label }}: a custom field's label of any script (Größe, 部署: fields.service._label_allowed),
# matched as GET /rewards matches it (fields.service.label_of: spaces folded, NFC) and without
# regard to case. It matched ASCII labels only: {{ Größe }} stayed as written.
PLACEHOLDER = re.compile(r"\{\{\s*([^{}\s](?:[^{}]*[^{}\s])?)\s*\}\}")
CSS_COLOR = re.compile(r"^(#[0-9A-Fa-f]{3,8}|[A-Za-z]{3,20})\Z")
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
    field_values: dict[str, str]  # FieldValues: label -> value (every org field; "" when unset)
    # The sender when neither the order nor the campaign names one, as on the redemption page;
    # empty: the server's LARGESSE_MAIL_FROM_NAME.
    organization_name: str = ""


class FieldValues(dict):
    """Every label of the organization's fields -> the reward's value ("" when it has none),
    looked up by a placeholder's name: its label as written first (labels are unique as written,
    so `Team` and `team` are two fields), else the one label it matches ignoring case; none when
    two labels do ({{ TEAM }} then stays as written rather than show either one's value)."""

    def __init__(self, labels, pairs=()):
        super().__init__({label: "" for label in labels})
        self.update(pairs)
        folds: dict[str, list[str]] = {}
        for label in self:
            folds.setdefault(label.casefold(), []).append(label)
        self.folded = {fold: found[0] for fold, found in folds.items() if len(found) == 1}

    def lookup(self, name: str) -> str | None:
        label = label_of(name)
        if label in self:
            return self[label]
        only = self.folded.get(label.casefold())
        return None if only is None else self[only]


# Bidirectional classes that can reorder the text around a value: right-to-left letters and
# the explicit embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069).
_BIDI = frozenset(("R", "AL", "RLE", "LRE", "RLO", "LRO", "PDF", "RLI", "LRI", "FSI", "PDI"))
FSI, PDI = "\u2068", "\u2069"


def isolated(value: str) -> str:
    """A substituted value that holds right-to-left text or bidi controls, between FSI and PDI:
    it reads in its own direction and cannot reorder the sender's copy around it (an unclosed
    U+202E in a custom field mirrored the rest of the headline, in the email and on the page).
    Any other value is returned unchanged."""
    if value.isascii() or not any(unicodedata.bidirectional(ch) in _BIDI for ch in value):
        return value
    return FSI + value + PDI


def fill_placeholders(text: str, values: dict[str, str]) -> str:
    """values: a FieldValues, or a plain {label: value} dict (`{}`: every placeholder as written).
    A value with right-to-left text is isolated (isolated())."""
    lookup = (values if isinstance(values, FieldValues) else FieldValues((), values)).lookup

    def replace(match: re.Match) -> str:
        found = lookup(match.group(1))
        return match.group(0) if found is None else isolated(found)

    return PLACEHOLDER.sub(replace, text)


def unknown_placeholders(text: str | None, labels) -> list[str]:
    """The placeholders in `text` that fill_placeholders leaves as written because no field
    label matches them (as written, or ignoring case when only one does), each once, in order
    of appearance."""
    known = FieldValues(labels)
    found: list[str] = []
    for match in PLACEHOLDER.finditer(text or ""):
        name = match.group(1).strip()
        if known.lookup(name) is None and name not in found:
            found.append(name)
    return found


def one_line(text: str) -> str:
    """Header values must not contain line breaks (header injection): every run of white space
    and control characters becomes one space."""
    return " ".join(_CONTROLS.sub(" ", text).split())


_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Address syntax in a display name: quoted, it is harmless ("Smith, John" <...>), but the email
# package drops the quotes when it folds a long From/To line (Python 3.11), and a name such as
# `x <ceo@bank.example>, y` then read as an address of its own (a forged sender).
_ADDRESS_SYNTAX = re.compile(r'[<>@,;:"\\()\[\]]')
# Embeddings, overrides and isolates: in a display name, an unclosed U+202E can show the
# <address> after it reversed in a mail client. Names lose them (their letters stay).
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def address(name: str, addr_spec: str) -> Address:
    """An address header value. The email package parses `addr_spec` and refuses a local part
    that is not ASCII (jörg@example.com), which RFC 6531 allows and email_address.valid accepts:
    such an address is built from its two parts and goes out with SMTPUTF8 (header(),
    transport._sendmail). Any other address the package refuses still raises ValueError."""
    local, at, domain = addr_spec.rpartition("@")
    if at and not local.isascii() and domain.isascii() and '"' not in local:
        return Address(display_name=name, username=local, domain=domain)
    return Address(display_name=name, addr_spec=addr_spec)


def display_name(text: str | None, addr_spec: str, header: str = "From") -> str:
    """A name for a From or To header, on one line. It keeps its address syntax only where the
    package writes it quoted on that one line (an ASCII name whose header is not folded); a
    longer or non-ASCII one loses it ("Smith, John" stays; a 70-character name with a comma
    reads "Smith John")."""
    # "=?" starts an encoded word, which the email package decodes in a name it folds:
    # "=?utf-8?q?x=2C_y?=" became `x, y <rewards@…>`, two mailboxes. Never one in a name.
    name = one_line(_BIDI_CONTROLS.sub("", text or "")).replace("=?", "= ?")
    if _ADDRESS_SYNTAX.search(name) and not (
            name.isascii() and len(header) + 2 + len(str(address(name, addr_spec))) <= 76):
        name = one_line(_ADDRESS_SYNTAX.sub(" ", name))
    return name


def _color(value, default: str) -> str:
    return value if isinstance(value, str) and CSS_COLOR.match(value) else default


def _text_on(background: str) -> str:
    """The button label's colour: the redemption page's choice (black or white, whichever reads
    at 4.5:1) for a #hex background; white on a named colour."""
    return text_color_for(background) if HEX_COLOR.match(background) else LIGHT_TEXT


def _url(value) -> str | None:
    return value if isinstance(value, str) and value.startswith(("https://", "http://")) else None


def _date(value) -> str | None:
    return f"{value:%B} {value.day}, {value.year}" if value else None


@dataclass
class Rendered:
    sender_name: str
    subject: str
    text: str
    html: str


def placeholder_values(labels, pairs) -> FieldValues:
    """RewardMail.field_values: every label of the organization's fields -> the reward's value,
    "" when it has none (FieldValues). pairs: the reward's (label, value) pairs."""
    return FieldValues(labels, pairs)


def paragraphs(text: str | None) -> list[str]:
    """A message's paragraphs: its blocks between blank lines."""
    return [p.strip() for p in re.split(r"\n\s*\n", text or "") if p.strip()]


def _pick(*candidates) -> str | None:
    return next((c for c in candidates if isinstance(c, str) and c.strip()), None)


@dataclass(frozen=True)
class Copy:
    """What a reward says to its recipient, in the email and on the redemption page alike."""

    sender_name: str
    headline: str | None  # the campaign's page headline, filled; None: the surface's default
    message: str  # the order's message, else the campaign's, filled; "" when neither has one


def copy_of(*, delivery_meta: dict | None, email_style: dict | None, webpage_style: dict | None,
            field_values: dict[str, str], default_sender: str) -> Copy:
    """The copy of a reward, chosen most specific first (the order's delivery.meta, then the
    campaign) and its placeholders filled: one rule for the email and the page."""
    meta, style, page = delivery_meta or {}, email_style or {}, webpage_style or {}
    sender_name = one_line(_pick(meta.get("sender_name"), style.get("sender_name"), default_sender) or "")
    headline = _pick(page.get("headline"))
    message = _pick(meta.get("message"), page.get("message"))
    return Copy(sender_name=sender_name,
                headline=fill_placeholders(headline, field_values) if headline else None,
                message=fill_placeholders(message, field_values).strip() if message else "")


def render(mail: RewardMail, *, link: str, mail_from_name: str) -> Rendered:
    """The copy, chosen and filled, and the two bodies rendered from the templates."""
    meta = mail.delivery_meta or {}
    style = mail.email_style or {}
    values = mail.field_values
    copy = copy_of(delivery_meta=meta, email_style=style, webpage_style=mail.webpage_style, field_values=values,
                   default_sender=_pick(mail.organization_name, mail_from_name) or "")
    sender_name = copy.sender_name
    value = format_money(mail.denomination_cents, mail.currency_code)  # as the redemption page shows it
    subject = _pick(meta.get("subject_line"), style.get("subject_line")) or f"{sender_name} sent you a {value} reward"
    subject = one_line(fill_placeholders(subject, values))
    headline = copy.headline or "You've received a reward"
    message = copy.message
    height = style.get("logo_image_height_px")
    button = _color(style.get("button_color"), DEFAULT_BUTTON)
    context = {
        "subject": subject,
        "headline": headline,
        "headline_is_copy": bool(copy.headline),  # the sender's words (lang=language), not the template's
        "message": message,
        "message_paragraphs": paragraphs(message),
        "recipient_name": mail.recipient_name,
        "sender_name": sender_name,
        "value": value,
        "link": link,
        "expires_at": _date(mail.expires_at),
        "language": mail.language or "en",
        "button_color": button,
        "button_text_color": _text_on(button),
        "logo_image_url": _url(style.get("logo_image_url")),
        "logo_background_color": _color(style.get("logo_background_color"), DEFAULT_LOGO_BACKGROUND),
        "logo_image_height_px": height if isinstance(height, int) and 0 < height <= 400 else 48,
    }
    text = _env.get_template("reward_email.txt").render(context)
    html = _env.get_template("reward_email.html").render(context)
    return Rendered(sender_name, subject, text, html)


def build(mail: RewardMail, *, link: str, mail_from: str, mail_from_name: str, now) -> Outgoing:
    """The email of a reward, ready for the transport."""
    copy = render(mail, link=link, mail_from_name=mail_from_name)
    sender_name, subject = copy.sender_name, copy.subject

    recipient = address(display_name(mail.recipient_name, mail.recipient_email, "To"), mail.recipient_email)
    utf8 = not (mail_from + mail.recipient_email).isascii()
    headers = (
        ("Subject", subject),
        # an invalid address raises ValueError, as before
        ("From", _sender(display_name(sender_name, mail_from), mail_from)),
        ("To", str(recipient)),
        ("Date", format_datetime(now.replace(tzinfo=UTC))),
        ("Message-ID", make_msgid(domain=mail_from.rpartition("@")[2] or None)),
        # Not a secret (the link is): lets operators and tests find the message of a reward.
        ("X-Largesse-Reward-Id", mail.reward_id),
    )
    return Outgoing(mail_from=mail_from, recipients=(mail.recipient_email,), smtputf8=utf8,
                    data=alternative(headers, copy.text, copy.html, utf8=utf8))


# --- the bytes of a multipart/alternative message ----------------------------------------------

_POLICY = email.policy.default  # the policy of the parts' encoding (EmailMessage's default)
_WIRE = {False: email.policy.SMTP, True: email.policy.SMTPUTF8}  # smtplib.send_message's, per case
_BOUNDARY_WIDTH = len(repr(sys.maxsize - 1))  # email.generator's boundary: 15 "=", digits, "=="
_BOUNDARY_SAMPLE = "=" * 15 + "0" * _BOUNDARY_WIDTH + "=="


# A value the email package writes unchanged on one line, "Name: value": words of letters,
# digits and "+_-" between single spaces, optionally followed by an <address>, or an address or
# <message id> alone (no quotes, no "=?" of an encoded word), as long as the line fits in 78
# characters. tests/delivery/test_compose.py checks this against the package's folding, for
# the headers of _PLAIN_HEADERS (the others are left to the package: a Date, say, is parsed).
_WORD = r"[A-Za-z0-9+_-]+"
_ADDRESS = rf"{_WORD}(?:\.{_WORD})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
_PLAIN = re.compile(rf"(?:{_WORD}(?: {_WORD})*(?: <{_ADDRESS}>)?|<{_ADDRESS}>|{_ADDRESS})\Z")
_PLAIN_HEADERS = frozenset(("Subject", "From", "To", "Message-ID", "X-Largesse-Reward-Id"))
_MAX_LINE = email.policy.SMTP.max_line_length


def header(name: str, value: str, utf8: bool = False) -> bytes:
    """One header line as the email package folds it (CRLF line ends)."""
    if name in _PLAIN_HEADERS and len(name) + 2 + len(value) <= _MAX_LINE and _PLAIN.match(value):
        return f"{name}: {value}\r\n".encode("ascii")
    if name == "Subject" and "=?" in value:
        # The package's parser decodes "=?utf-8?q?fake?=" in the text it is given, so the
        # subject read "fake" in mail clients: such a subject is encoded whole, as written.
        encoded = Header(value, "utf-8", header_name=name).encode(linesep="\r\n")
        return f"{name}: {encoded}\r\n".encode()
    return _folded(name, value, utf8)


@functools.lru_cache(maxsize=4096)
def _folded(name: str, value: str, utf8: bool) -> bytes:
    """The package's folding; cached: the sender, a campaign's subject and the date repeat from
    one email to the next."""
    policy = _WIRE[utf8]
    return policy.header_factory(name, value).fold(policy=policy).encode("utf-8" if utf8 else "ascii")


@functools.lru_cache(maxsize=256)
def _sender(display_name: str, addr_spec: str) -> str:
    return str(address(display_name, addr_spec))


def _content_type(boundary: str, utf8: bool) -> bytes:
    # The fold depends on the boundary's length only (digits and "="): fold a sample once.
    if len(boundary) == len(_BOUNDARY_SAMPLE):
        folded = header("Content-Type", f'multipart/alternative; boundary="{_BOUNDARY_SAMPLE}"', utf8)
        return folded.replace(_BOUNDARY_SAMPLE.encode(), boundary.encode())
    return _folded.__wrapped__("Content-Type", f'multipart/alternative; boundary="{boundary}"', utf8)


def _part(subtype: str, content: str, last_headers: bytes = b"") -> bytes:
    cte, payload = _encode_text(content, "utf-8", None, _POLICY)
    return (header("Content-Type", f'text/{subtype}; charset="utf-8"') + header("Content-Transfer-Encoding", cte)
            + last_headers + b"\r\n" + payload.encode("ascii", "surrogateescape").replace(b"\n", b"\r\n"))


def _boundary(parts: tuple[bytes, ...]) -> str:
    """As email.generator picks it: a random number between "=" signs, not found in the parts."""
    while True:
        boundary = "=" * 15 + f"{random.randrange(sys.maxsize):0{_BOUNDARY_WIDTH}d}" + "=="
        mark = b"--" + boundary.encode()
        if not any(mark in part for part in parts):
            return boundary


def alternative(headers, text: str, html: str, *, utf8: bool = False) -> bytes:
    """The bytes of a multipart/alternative message of a text and an HTML part (CRLF line ends),
    as EmailMessage with set_content(text) and add_alternative(html, subtype="html") is
    flattened by smtplib.send_message (the HTML part carries its own MIME-Version there)."""
    parts = (_part("plain", text), _part("html", html, header("MIME-Version", "1.0")))
    boundary = _boundary(parts)
    out = [header(name, value, utf8) for name, value in headers]
    out += [header("MIME-Version", "1.0", utf8), _content_type(boundary, utf8), b"\r\n"]
    line = b"--" + boundary.encode()
    for part in parts:
        out += [line, b"\r\n", part, b"\r\n"]
    out += [line, b"--\r\n"]
    return b"".join(out)
