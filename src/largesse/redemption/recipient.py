"""Details a recipient gives before some products can be paid (a product's recipient_details).

"us_bank_account" (an ACH deposit): account holder name, ABA routing number, account number and
account type. They are checked here, handed to the provider's issue() inside the redemption
transaction, and never logged: the payout keeps only what its page shows (the provider's
confirmation names the account type and the last 4 digits). BankAccount's repr masks the
numbers, so an exception or a debug print cannot leak them.

The one exception to "never stored": a redemption held by a fraud rule keeps its details on
the review (fraud_reviews.encrypted_details), `seal`ed as a Fernet token under
LARGESSE_SECRET_KEY (crypto.py, the webhook signing keys' facility and key file, with
its own purpose label), until release pays them and erases them, or block, a cancel or the
expiry erases them (docs/fraud.md, "Held bank details").
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

US_BANK_ACCOUNT = "us_bank_account"
KINDS = {US_BANK_ACCOUNT}
# The form's fields, in page order (endpoints read exactly these).
FIELDS = {US_BANK_ACCOUNT: ("holder_name", "routing_number", "account_number", "account_type")}
ACCOUNT_TYPES = ("checking", "savings")
MAX_HOLDER_NAME = 100


@dataclass(frozen=True)
class BankAccount:
    holder_name: str
    routing_number: str = field(repr=False)
    account_number: str = field(repr=False)
    account_type: str  # checking | savings

    @property
    def last4(self) -> str:
        """The digits the payout shows: the last 4, or the last 2 of a number shorter than 8
        digits (the last 4 of a 4-digit account are all of it)."""
        return self.account_number[-4:] if len(self.account_number) >= 8 else self.account_number[-2:]

    def describe(self) -> str:
        """What the payout may show and keep: "the checking account ending 6789"."""
        return f"the {self.account_type} account ending {self.last4}"


class InvalidDetails(ValueError):
    """errors: field name -> message for the recipient; no value is ever part of it."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__(", ".join(sorted(errors)))


# The first two digits of an ABA routing number: 00 (the US government), 01-12 (Federal Reserve
# districts), 21-32 (thrifts), 61-72 (electronic), 80 (traveler's checks).
_ROUTING_PREFIXES = {0, *range(1, 13), *range(21, 33), *range(61, 73), 80}


def aba_checksum_ok(routing: str) -> bool:
    """A prefix banks use, not nine zeros, and the ABA check digit: 3*(d1+d4+d7) + 7*(d2+d5+d8) +
    (d3+d6+d9) is a multiple of 10 (000000000's sum is 0)."""
    d = [int(c) for c in routing]
    if int(routing[:2]) not in _ROUTING_PREFIXES or not any(d):
        return False
    return (3 * (d[0] + d[3] + d[6]) + 7 * (d[1] + d[4] + d[7]) + (d[2] + d[5] + d[8])) % 10 == 0


def _digits(value: str) -> str:
    """Spaces and dashes as people type them (0210 0002 1, 0001-2345) are no error, and digits of
    any script (a phone keyboard's fullwidth or Arabic-Indic ones) read as 0-9."""
    return "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in value
                   if c not in " -")


def parse(kind: str, form: Mapping[str, str]) -> BankAccount:
    """The details of `kind` from the form's values, or InvalidDetails naming each bad field."""
    if kind != US_BANK_ACCOUNT:
        raise ValueError(f"unknown recipient details {kind!r}")
    errors: dict[str, str] = {}
    holder = " ".join((form.get("holder_name") or "").split())
    if not holder:
        errors["holder_name"] = "Enter the name on the account."
    elif any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in holder):
        errors["holder_name"] = "Use letters, spaces and punctuation only."
    elif len(holder) > MAX_HOLDER_NAME:
        errors["holder_name"] = f"The name can be at most {MAX_HOLDER_NAME} characters."
    routing = _digits(form.get("routing_number") or "")
    if not routing:
        errors["routing_number"] = "Enter the 9-digit routing number."
    elif not (len(routing) == 9 and routing.isascii() and routing.isdigit()):
        errors["routing_number"] = "A routing number has 9 digits."
    elif not aba_checksum_ok(routing):
        errors["routing_number"] = "This is not a valid routing number. Check it on a check or with your bank."
    account = _digits(form.get("account_number") or "")
    if not account:
        errors["account_number"] = "Enter the account number."
    elif not (4 <= len(account) <= 17 and account.isascii() and account.isdigit()):
        errors["account_number"] = "An account number has 4 to 17 digits."
    account_type = form.get("account_type") or ""
    if account_type not in ACCOUNT_TYPES:
        errors["account_type"] = "Choose checking or savings."
    if errors:
        raise InvalidDetails(errors)
    return BankAccount(holder, routing, account, account_type)


def echo(kind: str | None, form: Mapping[str, str]) -> dict[str, str]:
    """The inputs a re-rendered page shows again: never the account number."""
    if kind is None:
        return {}
    return {name: (form.get(name) or "")[:200] for name in FIELDS[kind] if name != "account_number"}


def seal(kind: str, details: BankAccount, settings) -> str:
    """The details encrypted for a held redemption (a Fernet token: no digit of them readable)."""
    from largesse import crypto

    return crypto.keybox(settings, crypto.RECIPIENT_DETAILS).encrypt(json.dumps({"kind": kind, **asdict(details)}))


class Unreadable(Exception):
    """Sealed details that cannot be opened: LARGESSE_SECRET_KEY no longer holds their secret, or
    what is stored is not what seal() wrote."""


def unseal(token: str, settings) -> BankAccount:
    """seal's details back, or Unreadable."""
    from largesse import crypto

    try:
        values = json.loads(crypto.keybox(settings, crypto.RECIPIENT_DETAILS).decrypt(token)[0])
        if values.pop("kind") != US_BANK_ACCOUNT:
            raise ValueError("unknown kind of recipient details")
        return BankAccount(**values)
    except crypto.KeyUnavailable as exc:
        raise Unreadable(str(exc)) from exc  # names LARGESSE_SECRET_KEY, or the key file it tried
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # no value of them in the message
        raise Unreadable("what is stored is not a sealed bank account") from exc
