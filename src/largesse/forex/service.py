"""Exchange rates: a dated set of rates against USD that the operator controls.

A rate is how many units of a currency one US dollar buys, kept as exact decimal text.
The shipped default set (default_rates.csv, dated) applies until the operator imports
one (`largesse forex import FILE.csv`), which replaces the whole set in one transaction.
Rates are read from the database only when they are needed (a converted order, GET
/forex), so an import is seen at once by every server process.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Context, Decimal
from pathlib import Path

from sqlalchemy import Connection, Engine, delete, select

from largesse import db
from largesse.errors import BadRequest
from largesse.forex.models import forex_rates
from largesse.money import decimals_for
from largesse.paths import printable
from largesse.timeutil import utcnow

DEFAULT_FILE = Path(__file__).parent / "default_rates.csv"
HEADER = ["currency_code", "rate", "date"]
MAX_ROWS = 500
# A cross rate (e.g. EUR -> GBP) is fixed to this many decimals before it is applied and
# recorded on the order, so the recorded rate reproduces the charge exactly.
CROSS_RATE_QUANTUM = Decimal("1e-10")
# Ratios of two rates are exact in this context: rates have at most 12 digits on each side of the
# point, so a ratio has at most 24 before it, and 10 after once fixed (the default context's 28
# digits raised InvalidOperation, a 500, for two extreme imported rates).
_WIDE = Context(prec=60)
_CODE = re.compile(r"[A-Z]{3}")
_RATE = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,12})?")


class RatesError(ValueError):
    pass


@dataclass(frozen=True)
class Rate:
    currency_code: str
    rate: Decimal  # units per 1 USD
    as_of: date


def parse_csv(text: str) -> dict[str, Rate]:
    """A rates file (header currency_code,rate,date) -> rates by currency; RatesError naming the
    line of the first problem. Rates are plain positive decimals; USD must be present at 1."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip() for c in rows[0]] != HEADER:
        raise RatesError(f"line 1: the header must be {','.join(HEADER)}")
    rates: dict[str, Rate] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 3:
            raise RatesError(f"line {number}: expected 3 columns, found {len(row)}")
        code, rate_text, date_text = (c.strip() for c in row)
        if not _CODE.fullmatch(code):
            raise RatesError(f"line {number}: {code!r} is not a currency code (3 capital letters)")
        if code in rates:
            raise RatesError(f"line {number}: {code} appears twice")
        if not _RATE.fullmatch(rate_text):
            raise RatesError(f"line {number}: rate {rate_text!r} must be a plain positive decimal like 0.92")
        rate = Decimal(rate_text)
        if rate <= 0:
            raise RatesError(f"line {number}: rate must be greater than 0")
        try:
            as_of = date.fromisoformat(date_text)
        except ValueError:
            raise RatesError(f"line {number}: date {date_text!r} must be YYYY-MM-DD") from None
        if len(date_text) != 10:
            raise RatesError(f"line {number}: date {date_text!r} must be YYYY-MM-DD")
        rates[code] = Rate(code, rate, as_of)
        if len(rates) > MAX_ROWS:
            raise RatesError(f"more than {MAX_ROWS} currencies")
    if "USD" not in rates or rates["USD"].rate != 1:
        raise RatesError("USD must be listed with rate 1 (rates are units per 1 USD)")
    return rates


@functools.cache
def default_rates() -> dict[str, Rate]:
    return parse_csv(DEFAULT_FILE.read_text(encoding="utf-8"))


def current(conn: Connection) -> dict[str, Rate]:
    """The rates in force: the imported set, or the shipped default set if none was imported."""
    rows = conn.execute(select(forex_rates)).all()
    if not rows:
        return default_rates()
    return {r.currency_code: Rate(r.currency_code, Decimal(r.rate), r.as_of) for r in rows}


def replace_all(engine: Engine, rates: dict[str, Rate]) -> int:
    """Replace the whole set in one transaction; returns the number of currencies."""
    now = utcnow()
    with db.write(engine) as conn:
        conn.execute(delete(forex_rates))
        conn.execute(forex_rates.insert(), [
            {"currency_code": r.currency_code, "rate": str(r.rate), "as_of": r.as_of, "imported_at": now}
            for r in rates.values()])
    return len(rates)


def cross_rate(rates: dict[str, Rate], source: str, target: str) -> tuple[Decimal, date] | None:
    """Units of target per unit of source, fixed to CROSS_RATE_QUANTUM, and the date of the
    older of the two rates; None when either currency has no rate, or when the cross rate rounds
    to 0 (a mistyped rate such as 0.000000000001: every amount would convert to nothing)."""
    a, b = rates.get(source), rates.get(target)
    if a is None or b is None:
        return None
    rate = _WIDE.divide(b.rate, a.rate).quantize(CROSS_RATE_QUANTUM, rounding=ROUND_HALF_UP, context=_WIDE)
    if not rate:
        return None
    return rate, min(a.as_of, b.as_of)


def convert_between(rates: dict[str, Rate], cents: int, source: str, target: str) -> int | None:
    """An amount in hundredths of `source` in hundredths of `target`, at the cross rate, rounded
    half up to the target's minor unit; None when either currency has no rate."""
    found = cross_rate(rates, source, target)
    return None if found is None else convert_cents(cents, found[0], target)


def convert_cents(cents: int, rate: Decimal, target_currency: str) -> int:
    """An amount in hundredths of one currency -> hundredths of the target, rounded half up
    to the target's minor unit (a cent; a whole unit for 0-decimal currencies such as JPY)."""
    exact = _WIDE.multiply(Decimal(cents), rate)
    if decimals_for(target_currency) == 0:
        return int(_WIDE.divide(exact, 100).quantize(Decimal(1), rounding=ROUND_HALF_UP, context=_WIDE)) * 100
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP, context=_WIDE))


def table_for(conn: Connection, base: str) -> dict[str, float]:
    """GET /forex: every currency's rate against base, as JSON numbers (8 decimals)."""
    rates = current(conn)
    base = base.upper()
    if base not in rates:
        raise BadRequest(f"No exchange rate for base currency {printable(base)}",
                         {"base": [f"must be one of {', '.join(sorted(rates))}"]})
    table = {}
    for code in sorted(rates):
        value = _WIDE.divide(rates[code].rate, rates[base].rate).quantize(
            Decimal("1e-8"), rounding=ROUND_HALF_UP, context=_WIDE)
        # A whole number as a JSON integer while it is exact in any JSON reader (2**53); a larger
        # one (an extreme imported rate) as a float: orjson refuses integers past 64 bits.
        table[code] = int(value) if value == value.to_integral_value() and abs(value) < 2**53 else float(value)
    return table

