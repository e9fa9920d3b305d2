"""Orders whose rewards are in another currency than the balance that pays them.

Which balance pays: an explicit balance ID is that balance. The keyword BALANCE is the
organization's balance in the rewards' currency when it holds one, else its primary balance
(the one in the organization's own currency, created with it), which then converts.

How a converted order is charged (docs/funding.md): the cross rate of the two currencies
(forex.service.cross_rate, fixed to 10 decimals) is applied to each reward's denomination +
fee, and the result is rounded half up to the balance currency's minor unit; the order's total
is the sum of those charges. Its subtotal is the sum of the rounded denominations, its fees
the rest. One order converts from one currency: its rewards then all share that currency.

The organization's flat fee per reward is in its own currency (`largesse org fees --flat`); a
reward in another currency pays it converted to that currency at the day's cross rate, rounded
half up to its minor unit (FlatFee), and the reward's fee is then converted with its value as
above.

The common case (rewards in the balance's currency) costs nothing here: no query at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from sqlalchemy import Connection, bindparam, select

from largesse.forex import service as forex
from largesse.funding import service as funding
from largesse.funding.models import funding_sources

_BALANCE_IN = select(funding_sources.c.id).where(
    funding_sources.c.organization_id == bindparam("org"), funding_sources.c.method == "balance",
    funding_sources.c.currency_code == bindparam("currency"))
_BALANCE_BY_ID = select(funding_sources.c.id, funding_sources.c.currency_code).where(
    funding_sources.c.organization_id == bindparam("org"), funding_sources.c.id == bindparam("id"),
    funding_sources.c.method == "balance")


def choose_balance(conn: Connection, *, org: str, context, funding_source_id: str, reward_currencies: set[str],
                   loc: tuple) -> tuple[str, str]:
    """(balance ID, its currency) that pays the order. reward_currencies: the currencies the
    rewards name (those without one take the chosen balance's). Errors are those of
    funding.check_balance_reference, the check of the common case."""
    primary, primary_currency = context.balance_id, context.balance_currency
    if funding_source_id == primary or funding_source_id.upper() == funding.MAGIC_BALANCE:
        funding.check_balance_reference(primary, funding_source_id, loc=loc)
        if funding_source_id == primary or len(reward_currencies) != 1 or reward_currencies == {primary_currency}:
            return primary, primary_currency
        (currency,) = reward_currencies
        own = conn.execute(_BALANCE_IN, {"org": org, "currency": currency}).scalar()
        return (own, currency) if own is not None else (primary, primary_currency)
    row = conn.execute(_BALANCE_BY_ID, {"org": org, "id": funding_source_id}).first()
    if row is None:
        funding.check_balance_reference(primary, funding_source_id, loc=loc)  # raises: not the org's balance
        raise AssertionError("unreachable")
    return row.id, row.currency_code


@dataclass
class Rates:
    """The day's exchange rates for one order: read on first need, then once (an order that
    converts nothing reads none)."""

    conn: Connection
    _table: dict = field(default_factory=dict)

    def table(self) -> dict:
        if not self._table:
            self._table = forex.current(self.conn)
        return self._table

    def convert(self, cents: int, source: str, target: str) -> int | None:
        """An amount of the organization's (a fee, a threshold) in `target`'s hundredths, or None
        when no rate converts it. No query when nothing converts."""
        if not cents or source == target:
            return cents
        return forex.convert_between(self.table(), cents, source, target)


@dataclass
class Converter:
    """Converts the rewards of one order into the balance's currency."""

    rates: Rates
    target: str
    source: str | None = None
    rate: Decimal | None = None
    rate_date: date | None = None

    def problem(self, currency: str) -> str | None:
        """Why rewards in `currency` cannot be paid from this balance, or None (then rate is set)."""
        if self.source is not None and currency != self.source:
            return (f"must be {self.source}, the currency of this order's other rewards: the rewards of "
                    f"one order share one currency")
        if self.rate is None:
            found = forex.cross_rate(self.rates.table(), currency, self.target)
            if found is None:
                return (f"no exchange rate from {currency} to {self.target} (the balance's currency) is configured; "
                        f"nothing was charged")
            self.source, (self.rate, self.rate_date) = currency, found
        return None

    def charge(self, cents: int) -> int:
        return forex.convert_cents(cents, self.rate, self.target)


@dataclass
class FlatFee:
    """The organization's flat fee per reward (`cents`, in its `currency`) in a reward's
    currency. No query unless a reward is in another currency and the fee is not zero."""

    rates: Rates
    cents: int
    currency: str

    def in_currency(self, currency: str) -> int | None:
        """The fee in `currency`'s hundredths, or None when no rate converts it."""
        return self.rates.convert(self.cents, self.currency, currency)
