"""The money invariants of top-ups, invoices and converted orders (run by funding/verify.py).

- top-ups: a `fully_credited` top-up has exactly one `topup` ledger entry (reference
  `topup:<id>`) of its amount on its balance; any other top-up has none; every `topup` entry
  belongs to a credited top-up (`topup credit missing`, `topup credit`, `credit of uncredited
  topup`, `topup entry without topup`);
- invoices: the same between PAID invoices and `invoice_payment` entries (`invoice credit
  missing`, `invoice credit`, `credit of unpaid invoice`, `invoice entry without invoice`);
- converted orders: each reward's charged_cents is its denomination + fee converted at the
  order's recorded rate (forex.service.convert_cents), their sum is the order's total, the
  rewards add up to the order's amounts in their currency, and those amounts add up to the
  converted total (`conversion`); an unconverted order's rewards carry no charge of their own
  (`reward charge`: a refund gives back value + fee);
- what ties the records together (`links`): an order is paid from a balance of its own
  organization in that balance's currency; its rewards belong to its organization and are in
  its currency (or, converted, in the currency it was converted from); a top-up or a paid
  invoice is credited to a balance of its organization in its currency.
"""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import and_, func, or_, select

from largesse.forex.service import convert_cents
from largesse.funding.models import funding_sources as fs
from largesse.funding.models import ledger_entries as le
from largesse.invoices.models import invoices
from largesse.orders.models import orders as o
from largesse.orders.models import rewards as r
from largesse.topups.models import topups


def _credits(conn, Problem, *, table, kind: str, done: str, prefix: str, noun: str):  # noqa: N803
    entries = (select(le.c.reference, func.count().label("n"), func.sum(le.c.amount_cents).label("total"),
                      func.min(le.c.funding_source_id).label("source"))
               .where(le.c.kind == kind).group_by(le.c.reference).subquery())
    reference = prefix + table.c.id
    rows = conn.execute(
        select(table.c.id, table.c.organization_id, table.c.status, table.c.amount_cents, table.c.funding_source_id,
               entries.c.n, entries.c.total, entries.c.source)
        .outerjoin(entries, entries.c.reference == reference)
        .where(or_(
            and_(table.c.status == done, or_(entries.c.n.is_(None), entries.c.n != 1,
                                            entries.c.total != table.c.amount_cents,
                                            entries.c.source != table.c.funding_source_id)),
            and_(table.c.status != done, entries.c.n.is_not(None)),
        ))
    ).all()
    problems = []
    for x in rows:
        if x.status != done:
            problems.append(Problem(f"credit of {'unpaid' if noun == 'invoice' else 'uncredited'} {noun}", x.id, 0,
                                    int(x.total), f"a {x.status} {noun} has {x.n} credit(s)", x.organization_id))
        elif x.n is None:
            problems.append(Problem(f"{noun} credit missing", x.id, int(x.amount_cents), 0,
                                    f"{done} but never credited", x.organization_id))
        else:
            problems.append(Problem(f"{noun} credit", x.id, int(x.amount_cents), int(x.total),
                                    f"{x.n} credit(s) on balance {x.source}, expected one of its amount on "
                                    f"{x.funding_source_id}", x.organization_id))
    known = select(prefix + table.c.id).where(table.c.status == done)
    orphans = conn.execute(select(le.c.id, le.c.reference, le.c.organization_id, le.c.amount_cents)
                           .where(le.c.kind == kind, or_(le.c.reference.is_(None), le.c.reference.not_in(known)))
                           ).all()
    problems += [Problem(f"{noun} entry without {noun}", str(x.id), 0, int(x.amount_cents),
                         f"ledger entry {x.id} ({x.reference}) credits no {done} {noun}", x.organization_id)
                 for x in orphans]
    return problems


def topup_credits(conn, Problem):  # noqa: N803
    return _credits(conn, Problem, table=topups, kind="topup", done="fully_credited", prefix="topup:", noun="topup")


def invoice_credits(conn, Problem):  # noqa: N803
    return _credits(conn, Problem, table=invoices, kind="invoice_payment", done="PAID", prefix="invoice:",
                    noun="invoice")


def conversions(conn, Problem):  # noqa: N803
    """Converted orders, checked in Python (the rounding is forex.service's, not SQL's); only
    converted orders are read."""
    rows = conn.execute(
        select(o.c.id, o.c.organization_id, o.c.currency_code, o.c.total_cents, o.c.fx_rate, o.c.fx_subtotal_cents,
               o.c.fx_fees_cents, o.c.fx_total_cents, r.c.id.label("reward_id"), r.c.denomination_cents,
               r.c.fee_cents, r.c.charged_cents)
        .join(r, r.c.order_id == o.c.id).where(o.c.fx_currency_code.is_not(None)).order_by(o.c.id)
    ).all()
    problems, sums = [], {}
    for x in rows:
        expected = convert_cents(x.denomination_cents + x.fee_cents, Decimal(x.fx_rate), x.currency_code)
        if x.charged_cents != expected:
            problems.append(Problem("conversion", x.reward_id, expected, int(x.charged_cents or 0),
                                    f"reward of order {x.id}: value + fee at rate {x.fx_rate}", x.organization_id))
        s = sums.setdefault(x.id, [x, 0, 0, 0])
        s[1] += x.charged_cents or 0
        s[2] += x.denomination_cents
        s[3] += x.fee_cents
    for order_id, (x, charged, denoms, fees) in sums.items():
        if charged != x.total_cents or denoms != x.fx_subtotal_cents or fees != x.fx_fees_cents \
                or x.fx_total_cents != denoms + fees:
            problems.append(Problem("conversion", order_id, int(x.total_cents), charged,
                                    f"the rewards' charges ({charged}), values ({denoms}) and fees ({fees}) do not "
                                    f"add up to the order's total ({int(x.total_cents)}) and its amounts in its "
                                    f"rewards' currency (subtotal {int(x.fx_subtotal_cents or 0)}, fees "
                                    f"{int(x.fx_fees_cents or 0)}, total {int(x.fx_total_cents or 0)})",
                                    x.organization_id))
    charged = conn.execute(
        select(r.c.id, r.c.organization_id, r.c.order_id, r.c.denomination_cents, r.c.fee_cents, r.c.charged_cents)
        .join(o, o.c.id == r.c.order_id)
        .where(o.c.fx_currency_code.is_(None), r.c.charged_cents.is_not(None),
               r.c.charged_cents != r.c.denomination_cents + r.c.fee_cents)
    ).all()
    problems += [Problem("reward charge", x.id, int(x.denomination_cents + x.fee_cents), int(x.charged_cents),
                         f"reward of unconverted order {x.order_id} charged other than its value + fee",
                         x.organization_id) for x in charged]
    return problems


def links(conn, Problem):  # noqa: N803
    """Organizations and currencies agree along order -> balance, reward -> order, and
    top-up / paid invoice -> balance (one query each, violating rows only)."""
    problems = []
    for x in conn.execute(
        select(o.c.id, o.c.organization_id, o.c.currency_code, fs.c.id.label("source"),
               fs.c.organization_id.label("owner"), fs.c.currency_code.label("source_currency"))
        .join(fs, fs.c.id == o.c.funding_source_id)
        .where(or_(o.c.organization_id != fs.c.organization_id, o.c.currency_code != fs.c.currency_code))
    ).all():
        problems.append(Problem("links", x.id, 0, 1, f"order of organization {x.organization_id} in "
                                f"{x.currency_code} paid from balance {x.source} of organization {x.owner} in "
                                f"{x.source_currency}", x.organization_id))
    expected_currency = func.coalesce(o.c.fx_currency_code, o.c.currency_code)
    for x in conn.execute(
        select(r.c.id, r.c.organization_id, r.c.currency_code, o.c.id.label("order_id"),
               o.c.organization_id.label("order_org"), expected_currency.label("expected"))
        .join(o, o.c.id == r.c.order_id)
        .where(or_(r.c.organization_id != o.c.organization_id, r.c.currency_code != expected_currency))
    ).all():
        problems.append(Problem("links", x.id, 0, 1, f"reward of organization {x.organization_id} in "
                                f"{x.currency_code}, of order {x.order_id} of organization {x.order_org} in "
                                f"{x.expected}", x.organization_id))
    for table, noun, done in ((topups, "top-up", topups.c.status == "fully_credited"),
                              (invoices, "invoice", invoices.c.status == "PAID")):
        for x in conn.execute(
            select(table.c.id, table.c.organization_id, table.c.currency_code, fs.c.id.label("source"),
                   fs.c.organization_id.label("owner"), fs.c.currency_code.label("source_currency"))
            .join(fs, fs.c.id == table.c.funding_source_id)
            .where(done, or_(table.c.organization_id != fs.c.organization_id,
                             table.c.currency_code != fs.c.currency_code))
        ).all():
            problems.append(Problem("links", x.id, 0, 1, f"{noun} of organization {x.organization_id} in "
                                    f"{x.currency_code} credited to balance {x.source} of organization {x.owner} "
                                    f"in {x.source_currency}", x.organization_id))
    return problems
