"""Money is integer minor units (cents) inside and decimal numbers on the wire.

Every amount that enters Largesse goes through `to_cents` (a number: int or Decimal) or
`parse_amount_text` (an operator's text) and never through a float: `10.999999999999999999`
is refused, not charged as 11.00. JSON bodies are read exactly by `loads_exact`, which keeps
each number's text as a Decimal; `ExactJsonModel` uses it for request models with amounts.

Storage is always hundredths of the currency unit (cents, even for a 0-decimal currency like
JPY, where an amount is then a multiple of 100); a currency's decimals only limit what may be
written.
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_DOWN, Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    PlainSerializer,
    PlainValidator,
    SerializationInfo,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)

MAX_CENTS = 10**13  # 100 billion units: far above any reward, far below 64-bit overflow
# 10**11 units == MAX_CENTS, the largest amount (its leading digit's exponent is 11): larger
# exponents are refused before any arithmetic, the exact cap once the amount is in cents.
MAX_LEADING_EXPONENT = 11

# ISO 4217 currencies without minor units; every other currency is written with at most 2
# decimals (3-decimal currencies such as KWD cannot be stored in hundredths, so they get 2).
ZERO_DECIMAL_CURRENCIES = frozenset({
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV",
    "XAF", "XOF", "XPF",
})


class MoneyError(ValueError):
    pass


def decimals_for(currency_code: str | None) -> int:
    """How many decimals an amount in this currency may have (2 unless the currency has none)."""
    return 0 if currency_code and currency_code.upper() in ZERO_DECIMAL_CURRENCIES else 2


def _unit(decimals: int) -> str:
    return "whole units" if decimals == 0 else f"at most {decimals} decimal places"


_PLAIN_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def to_cents(value: int | Decimal | str | float, *, decimals: int = 2) -> int:
    """An amount in currency units -> cents, exactly; MoneyError for anything that is not
    exactly representable with `decimals` decimals (never rounded), non-finite, or too large.

    ints and Decimals are exact. A str must be plain decimal text (no exponent, no `_`, no
    spaces). A float is only accepted for internal callers (its shortest repr is used); request
    bodies never produce one (`loads_exact`).
    """
    if isinstance(value, bool):
        raise MoneyError("must be a number")
    if isinstance(value, InexactAmount):
        raise MoneyError("could not be read exactly")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, Decimal):
        amount = value
    elif isinstance(value, str):
        if len(value) > 100 or not _PLAIN_NUMBER.fullmatch(value):
            raise MoneyError("must be a plain decimal number like 250.00")
        amount = Decimal(value)
    elif isinstance(value, float):
        amount = Decimal(repr(value))
    else:
        raise MoneyError("must be a number")
    if not amount.is_finite():
        raise MoneyError("must be a finite number")
    # adjusted() is the exponent of the leading digit: known before any arithmetic, so an
    # exponent like 1e999999999 is refused here instead of overflowing the decimal context.
    if amount and amount.adjusted() > MAX_LEADING_EXPONENT:
        raise MoneyError("is too large")
    whole = amount.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_DOWN)
    if whole != amount:  # an exact comparison: no context rounding is involved
        raise MoneyError(f"must have {_unit(decimals)}")
    result = int(whole.scaleb(2))
    if abs(result) > MAX_CENTS:
        raise MoneyError("is too large")
    return result


def parse_amount_text(text: str, *, decimals: int = 2, max_cents: int = MAX_CENTS, zero: bool = False) -> int:
    """An operator's amount (`--amount 250.00`): plain positive decimal text only, e.g. not
    `1_000`, `1e3`, ` 5`, `-5` or `0` (`0` too with zero: a fee or a threshold of none); at
    most `decimals` decimals; at most max_cents, "too large" however many digits it has."""
    fraction = "" if decimals == 0 else r"(?:\.[0-9]{1,%s})?" % decimals  # noqa: UP031
    if not re.fullmatch(r"[0-9]+" + fraction, text):
        example = "250" if decimals == 0 else "250.00"
        kind = "amount of zero or more" if zero else "positive amount"
        raise MoneyError(f"must be a plain {kind} with {_unit(decimals)}, like {example} (got {text!r})")
    too_large = f"is too large: at most {format_amount(max_cents, decimals=decimals)}"
    # (Before to_cents, whose own "is too large" names no maximum; the digit count first, so
    # a thousand digits are not read as a number at all.)
    if len(text.partition(".")[0].lstrip("0")) > 15 or Decimal(text).scaleb(2) > max_cents:
        raise MoneyError(too_large)
    cents = to_cents(Decimal(text), decimals=decimals)
    if cents <= 0 and not zero:
        raise MoneyError("must be greater than 0")
    return cents


def to_wire(cents: int) -> int | float:
    """Cents as a JSON number: an integer when whole, else a 2-decimal number."""
    if cents % 100 == 0:
        return cents // 100
    return float(Decimal(cents) / 100)


def format_amount(cents: int, *, decimals: int = 2, grouped: bool = False) -> str:
    """Text for people ("1234.50"; "5000" for 500000 cents of a currency with decimals=0;
    grouped: "1,234.50", the thousands separated as the dashboard's forms accept them back):
    exact at any size, never through a float. Amounts are kept in hundredths of a unit in
    every currency; a zero-decimal one's are whole units (to_cents refuses fractions)."""
    return f"{Decimal(cents).scaleb(-2):{',' if grouped else ''}.{decimals}f}"


def amount_in(cents: int, currency_code: str | None, *, grouped: bool = False) -> str:
    """format_amount with the currency's decimals: "210.10" USD, "5000" JPY."""
    return format_amount(cents, decimals=decimals_for(currency_code), grouped=grouped)


# The one table of currency symbols for text a recipient reads (the reward email, the
# redemption and connected-organization pages); any other currency is written after the
# number ("12.00 SEK", "5,000 KRW").
CURRENCY_SYMBOLS = {"USD": "$", "CAD": "CA$", "AUD": "A$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹",
                    "CHF": "CHF ", "NZD": "NZ$", "MXN": "MX$", "BRL": "R$"}


def format_money(cents: int, currency_code: str) -> str:
    """An amount for a recipient, with its currency: "$25.00", "€1,250.50", "¥5,000",
    "-CA$3.10", "12.00 SEK", "5,000 KRW". Thousands grouped, the currency's decimals
    (decimals_for, as amount_in and the dashboard write it), exact (never through a float)."""
    sign = "-" if cents < 0 else ""
    number = amount_in(abs(cents), currency_code, grouped=True)
    symbol = CURRENCY_SYMBOLS.get(currency_code)
    if symbol:
        return f"{sign}{symbol}{number}"
    return f"{sign}{number} {currency_code}"


def percent_of(cents: int, basis_points: int, currency_code: str | None = None) -> int:
    """basis_points/10000 of an amount in hundredths, rounded half up to the currency's minor
    unit (a cent; a whole unit, i.e. a multiple of 100, for a zero-decimal currency such as
    JPY: 1.5 % of 1,001 JPY is 15 JPY, not 15.02), in integers only."""
    if decimals_for(currency_code) == 0:
        return (cents * basis_points + 500_000) // 1_000_000 * 100
    return (cents * basis_points + 5000) // 10000


# --- reading JSON bodies exactly ------------------------------------------------------------

_INT_DIGITS_LIMIT = 4000  # Python's int() refuses more than 4300 digits; such numbers stay Decimal
_INEXACT = "largesse.money.inexact"  # validation-context key: an Amount arrived as a float


def _parse_int(text: str) -> int | Decimal:
    return int(text) if len(text) <= _INT_DIGITS_LIMIT else Decimal(text)


def _parse_decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:  # an exponent beyond Decimal's range (1e1000000000000000000)
        raise ValueError(f"number out of range: {text[:40]}") from None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def loads_exact(raw: bytes | str) -> Any:
    """JSON with every non-integer number as the Decimal of its text (never a float)."""
    return json.loads(raw, parse_float=_parse_decimal, parse_int=_parse_int, parse_constant=_refuse_constant)


class InexactAmount(Decimal):
    """An amount that went through a float (pydantic's JSON parser) and awaits its exact text.

    ExactJsonModel replaces it; to_cents never sees one unless that step was skipped, and
    then it refuses rather than charge a rounded figure."""


def _amount_input(value: Any, info: ValidationInfo) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ValueError("must be a number")
    if isinstance(value, float):
        if info.mode == "json":
            if info.context is not None:
                info.context[_INEXACT] = True
            return InexactAmount(repr(value))  # placeholder; its JSON text replaces it
        return Decimal(repr(value))
    return Decimal(value)


LEGACY_FLOAT = "largesse.money.legacy_float"  # serialization-context key: amounts as the float of old


def _amount_output(value: Decimal, info: SerializationInfo) -> str | float:
    """An Amount in JSON form, which only request fingerprints read (orders.service.request_hash):
    its exact value, one text per number (25, 25.0 and 2.5E+1 alike). With the context key
    LEGACY_FLOAT, the float that fingerprints hashed before (25.000000000000001 read as 25), which
    orders placed then still carry."""
    if info.context and info.context.get(LEGACY_FLOAT):
        return float(value)
    return canonical_text(value)


def canonical_text(value: Decimal) -> str:
    """The same text for every spelling of one number, exact at any precision (no context
    rounding, which Decimal.normalize applies) and as short as the digits given."""
    if not value.is_finite():
        return str(value)
    sign, digits, exponent = value.as_tuple()
    kept = len(digits)
    while kept > 1 and digits[kept - 1] == 0:
        kept -= 1
    if digits[:kept] == (0,):
        return "0"
    return f"{'-' if sign else ''}{''.join(map(str, digits[:kept]))}e{exponent + len(digits) - kept}"


def float_exact(value: Decimal) -> bool:
    """Whether a float holds this amount exactly (what a LEGACY_FLOAT fingerprint can vouch for)."""
    try:
        return Decimal(repr(float(value))) == value
    except (OverflowError, ValueError):
        return False


# A money amount in a request model: a JSON number (never a string or a bool), exact.
Amount = Annotated[
    Decimal,
    PlainValidator(_amount_input),
    PlainSerializer(_amount_output, when_used="json"),
    WithJsonSchema({"type": "number"}),
]


class ExactJsonModel(BaseModel):
    """A request model whose Amount fields hold the exact text of their JSON numbers.

    model_validate_json runs pydantic's own (fast) JSON validation, which hands a number with
    a fraction or an exponent to the Amount validator as a float. Only if some amount arrived
    that way is the body read a second time with loads_exact, and `adopt_exact_numbers`
    copies the exact amounts onto the validated model. Integer amounts cost nothing extra.
    """

    def adopt_exact_numbers(self, data: Any) -> None:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    @classmethod
    def model_validate_json(cls, json_data, **kwargs):
        # Only keyword arguments the caller gave are passed on (their set varies across pydantic 2.x).
        if kwargs.get("context") is None:
            kwargs["context"] = {}
        context = kwargs["context"]
        model = super().model_validate_json(json_data, **kwargs)
        if context.pop(_INEXACT, False):
            try:
                data = loads_exact(json_data)
            except (ValueError, RecursionError):
                # pydantic read it as JSON, Python's reader did not (a lone surrogate...).
                raise ValidationError.from_exception_data(cls.__name__, [{
                    "type": "json_invalid", "loc": (), "input": "", "ctx": {"error": "unreadable JSON"}}]) from None
            model.adopt_exact_numbers(data)
        return model


def exact_amount(data: Any, *path: str | int) -> Decimal | None:
    """The number at path in a loads_exact document, as a Decimal, or None if absent."""
    for key in path:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    if type(data) is Decimal:
        return data
    if isinstance(data, bool) or not isinstance(data, int):
        return None
    return Decimal(data)
