"""Money is integer minor units (cents) inside and decimal numbers on the wire.

Parsing goes through Decimal built from the number's shortest text form, so 19.99
becomes exactly 1999 cents; no float arithmetic ever touches an amount.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

MAX_CENTS = 10**13  # 100 billion units: far above any reward, far below 64-bit overflow


class MoneyError(ValueError):
    pass


def to_cents(value: int | float | str | Decimal) -> int:
    """Parse a wire amount into cents; refuse more than two decimals and non-finite values."""
    if isinstance(value, bool):
        raise MoneyError("must be a number")
    try:
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError) as exc:
        raise MoneyError("must be a number") from exc
    if not amount.is_finite():
        raise MoneyError("must be a finite number")
    cents = amount * 100
    if cents != cents.to_integral_value():
        raise MoneyError("must have at most 2 decimal places")
    result = int(cents)
    if abs(result) > MAX_CENTS:
        raise MoneyError("is too large")
    return result


def to_wire(cents: int) -> int | float:
    """Cents as a JSON number: an integer when whole, else a 2-decimal number."""
    if cents % 100 == 0:
        return cents // 100
    return float(Decimal(cents) / 100)


def percent_of(cents: int, basis_points: int) -> int:
    """basis_points/10000 of an amount, rounded half up, in integers only."""
    return (cents * basis_points + 5000) // 10000
