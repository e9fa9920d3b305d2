"""`verify`: every money invariant of the database, as findings (an empty list proves them all).

What must hold, and the `what` of the finding when it does not:

- the ledger: each balance equals the sum of its entries (`balance`); each entry's
  balance_after_cents equals the previous entry's plus its amount, in id order (`running
  balance`, reported at the first entry that disagrees); credits (funding, sandbox credit,
  refund) are positive, order debits negative, an entry belongs to its balance's organization
  (`ledger entry`); the sandbox credit is written once, of 5,000 units, to a sandbox
  organization's first balance and never in production (`sandbox credit`);
- orders: exactly one debit of the total from the order's balance (`order debit missing`,
  `order debit count`, `order debit`, `debit without order`); the rewards add up to the
  subtotal and fees and total = subtotal + fees - discount (`order subtotal`, `order fees`,
  `order total`, `order without rewards`), and the discount is 0, as no order is given one
  (`order discount`); refund_cents equals the refunds credited for its
  rewards (`order refund`);
- top-ups, invoices, converted orders, and the organizations and currencies that tie orders,
  rewards and credits to their balances: funding/verify_credits.py;
- rewards (orders/lifecycle.py: ACTIVE, then once REDEEMED, CANCELED or EXPIRED): a
  CANCELED or EXPIRED reward has exactly one refund of its value plus fee (what it was charged;
  none when that was nothing), credited to the balance that paid its order (`refund missing`,
  `refund count`, `refund amount`, `refund source`); any other reward has none (`refund of
  unrefunded reward`); a refund names a reward (`refund without reward`); a REDEEMED reward
  has exactly one payout (`payout missing`, the payouts primary key allows no second one) and
  only a REDEEMED reward has one (`payout of unredeemed reward`); statuses are known (`reward
  status`);
- approvals (orders/approvals.py): each balance's pending_cents is the sum of the totals of
  its PENDING APPROVAL orders (`pending`); a rejected order is CANCELED and has exactly one
  `order_refund` of its whole total on its balance (none for a total of 0) (`order refund missing`, `order refund
  count`, `order refund amount`), any other order none (`order refund of unrejected order`);
  the rewards of a rejected order are CANCELED without refunds of their own (`rejected
  order reward`).

Each check is one aggregate query that returns only the violating rows, so the cost is a few
scans of the tables whatever their size, and Python only touches findings. Run it in one
snapshot (the CLI uses REPEATABLE READ on PostgreSQL, a deferred transaction on SQLite) when
the system is live; otherwise a change committed between two queries can look like a finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, and_, case, exists, func, literal, or_, select

from largesse.funding.models import funding_sources as fs
from largesse.funding.models import ledger_entries as le
from largesse.orders.models import PENDING_APPROVAL
from largesse.orders.models import orders as o
from largesse.orders.models import rewards as r
from largesse.redemption.models import payouts as p

REFUND = "reward_refund"
ORDER_REFUND = "order_refund"
ORDER = "order"
PENDING = PENDING_APPROVAL
CREDIT_KINDS = ("sandbox_credit", "funding", REFUND, ORDER_REFUND, "topup", "invoice_payment")
REFUNDED = ("CANCELED", "EXPIRED")
STATUSES = ("ACTIVE", "REDEEMED", *REFUNDED)


@dataclass
class Problem:
    """One violated invariant: `what` (see the module docstring) about row `id`."""

    what: str
    id: str
    expected: int
    actual: int
    detail: str = ""
    organization_id: str | None = None


def verify(conn: Connection) -> list[Problem]:
    """Every money invariant; [] when all hold."""
    problems: list[Problem] = []
    for check in (_balances, _running_balances, _ledger_entries, _sandbox_credits, _order_debits, _debits_without_order,
                  _order_sums, _order_refunds, _reward_refunds, _refunds_without_reward, _payouts_missing,
                  _payouts_unredeemed, _pending_holds, _order_rejections):
        problems.extend(check(conn))
    from largesse.funding import verify_credits  # top-ups, invoices, converted orders

    for check in (verify_credits.topup_credits, verify_credits.invoice_credits, verify_credits.conversions,
                  verify_credits.links):
        problems.extend(check(conn, Problem))
    return problems


def _balances(conn):
    sums = (select(le.c.funding_source_id, func.sum(le.c.amount_cents).label("total"))
            .group_by(le.c.funding_source_id).subquery())
    ledger = func.coalesce(sums.c.total, 0)
    rows = conn.execute(
        select(fs.c.id, fs.c.organization_id, fs.c.available_cents, ledger.label("ledger"))
        .outerjoin(sums, sums.c.funding_source_id == fs.c.id).where(fs.c.available_cents != ledger)
    ).all()
    return [Problem("balance", x.id, int(x.ledger), int(x.available_cents),
                    "the balance is not the sum of its ledger entries", x.organization_id) for x in rows]


def _running_balances(conn):
    """An entry is reported where its balance_after_cents disagrees both with the previous
    entry's (local) and with the sum of the entries so far (global): one finding for a wrong
    figure, a missing entry or a changed amount, instead of one for every later entry."""
    window = dict(partition_by=le.c.funding_source_id, order_by=le.c.id)
    entries = select(
        le.c.id, le.c.funding_source_id, le.c.organization_id, le.c.amount_cents, le.c.balance_after_cents,
        func.lag(le.c.balance_after_cents).over(**window).label("previous"),
        func.sum(le.c.amount_cents).over(**window).label("running"),
    ).subquery()
    local = func.coalesce(entries.c.previous, 0) + entries.c.amount_cents
    rows = conn.execute(
        select(entries, local.label("local")).where(
            entries.c.balance_after_cents != local, entries.c.balance_after_cents != entries.c.running)
        .order_by(entries.c.id)
    ).all()
    return [Problem("running balance", str(x.id), int(x.local), int(x.balance_after_cents),
                    f"ledger entry {x.id} of balance {x.funding_source_id}: previous balance "
                    f"{int(x.previous or 0)} + amount {int(x.amount_cents)}; "
                    f"the entries so far sum to {int(x.running)}",
                    x.organization_id) for x in rows]


def _ledger_entries(conn):
    rows = conn.execute(
        select(le.c.id, le.c.organization_id, le.c.kind, le.c.amount_cents, fs.c.organization_id.label("owner"))
        .join(fs, fs.c.id == le.c.funding_source_id)
        .where(or_(and_(le.c.kind.in_(CREDIT_KINDS), le.c.amount_cents <= 0),
                   and_(le.c.kind == ORDER, le.c.amount_cents > 0), le.c.organization_id != fs.c.organization_id,
                   le.c.kind.not_in((ORDER, *CREDIT_KINDS))))
    ).all()
    problems = []
    for x in rows:
        if x.organization_id != x.owner:
            why = f"entry of organization {x.organization_id} on a balance of organization {x.owner}"
        elif x.kind not in (ORDER, *CREDIT_KINDS):
            why = f"an entry of kind {x.kind!r}, which Largesse never writes"
        else:
            why = f"a {x.kind} entry with the wrong sign"
        problems.append(Problem("ledger entry", str(x.id), 0, int(x.amount_cents), why, x.owner))
    return problems


def _sandbox_credits(conn):
    """orgs/service.create_org and orgs/suborgs write one sandbox_credit of SANDBOX_CREDIT_CENTS
    when they create a sandbox organization, and none otherwise: a second one (or one in
    production), with the balance raised to match, is money nobody paid in."""
    from largesse.orgs.models import organizations as org
    from largesse.orgs.service import SANDBOX_CREDIT_CENTS

    credits = (select(le.c.organization_id, func.count().label("n"), func.sum(le.c.amount_cents).label("total"))
               .where(le.c.kind == "sandbox_credit").group_by(le.c.organization_id).subquery())
    rows = conn.execute(
        select(org.c.id, org.c.environment, credits.c.n, credits.c.total)
        .join(credits, credits.c.organization_id == org.c.id)
        .where(or_(org.c.environment != "sandbox", credits.c.n > 1, credits.c.total != SANDBOX_CREDIT_CENTS))
    ).all()
    return [Problem("sandbox credit", x.id, 0 if x.environment != "sandbox" else SANDBOX_CREDIT_CENTS, int(x.total),
                    f"{int(x.n)} sandbox credit(s) on a {x.environment} organization: Largesse writes one, "
                    f"of {SANDBOX_CREDIT_CENTS // 100} units, and only in the sandbox", x.id) for x in rows]


def _order_debits(conn):
    debits = (select(le.c.order_id, le.c.funding_source_id, func.count().label("n"),
                     func.sum(le.c.amount_cents).label("total"))
              .where(le.c.kind == ORDER).group_by(le.c.order_id, le.c.funding_source_id).subquery())
    rows = conn.execute(
        select(o.c.id, o.c.organization_id, o.c.total_cents, o.c.funding_source_id, debits.c.n, debits.c.total)
        .outerjoin(debits, and_(debits.c.order_id == o.c.id, debits.c.funding_source_id == o.c.funding_source_id))
        .where(or_(debits.c.n.is_(None), debits.c.n != 1, debits.c.total != -o.c.total_cents))
    ).all()
    problems = []
    for x in rows:
        if x.n is None:
            problems.append(Problem("order debit missing", x.id, int(x.total_cents), 0,
                                    f"no order entry on balance {x.funding_source_id}", x.organization_id))
        elif x.n != 1:
            problems.append(Problem("order debit count", x.id, 1, int(x.n),
                                    f"{x.n} order entries totalling {-int(x.total)}", x.organization_id))
        else:
            problems.append(Problem("order debit", x.id, int(x.total_cents), -int(x.total),
                                    "the debit is not the order's total", x.organization_id))
    return problems


def _debits_without_order(conn):
    matching_order = exists().where(o.c.id == le.c.order_id, o.c.funding_source_id == le.c.funding_source_id)
    rows = conn.execute(
        select(le.c.id, le.c.order_id, le.c.organization_id, le.c.amount_cents)
        .where(le.c.kind == ORDER, ~matching_order)
    ).all()
    return [Problem("debit without order", str(x.order_id), 0, int(x.amount_cents),
                    f"ledger entry {x.id} debits no order of its balance", x.organization_id) for x in rows]


def _order_sums(conn):
    sums = (select(r.c.order_id, func.count().label("n"), func.sum(r.c.denomination_cents).label("denoms"),
                   func.sum(r.c.fee_cents).label("fees"))
            .group_by(r.c.order_id).subquery())
    denoms, fees = func.coalesce(sums.c.denoms, 0), func.coalesce(sums.c.fees, 0)
    # A converted order's subtotal and fees are in its balance's currency, its rewards' in
    # theirs: verify_credits.conversions checks those; the total's arithmetic is checked here.
    converted = o.c.fx_currency_code.is_not(None)
    rows = conn.execute(
        select(o.c.id, o.c.organization_id, o.c.subtotal_cents, o.c.fees_cents, o.c.discount_cents, o.c.total_cents,
               o.c.fx_currency_code, sums.c.n, denoms.label("denoms"), fees.label("fees"))
        .outerjoin(sums, sums.c.order_id == o.c.id)
        .where(or_(sums.c.n.is_(None), and_(~converted, o.c.subtotal_cents != denoms),
                   and_(~converted, o.c.fees_cents != fees),
                   o.c.total_cents != o.c.subtotal_cents + o.c.fees_cents - o.c.discount_cents,
                   o.c.discount_cents != 0))
    ).all()
    problems = []
    for x in rows:
        org = x.organization_id
        if x.n is None:
            problems.append(Problem("order without rewards", x.id, 1, 0, "", org))
            continue
        if x.subtotal_cents != x.denoms and x.fx_currency_code is None:
            problems.append(Problem("order subtotal", x.id, int(x.subtotal_cents), int(x.denoms),
                                    f"the denominations of its {x.n} rewards do not add up to the subtotal", org))
        if x.fees_cents != x.fees and x.fx_currency_code is None:
            problems.append(Problem("order fees", x.id, int(x.fees_cents), int(x.fees),
                                    f"the fees of its {x.n} rewards do not add up to the order's fees", org))
        if x.discount_cents:  # Largesse grants none: a discount is an order made cheaper by hand
            problems.append(Problem("order discount", x.id, 0, int(x.discount_cents),
                                    "a discount, which no order is given", org))
        expected_total = x.subtotal_cents + x.fees_cents - x.discount_cents
        if x.total_cents != expected_total:
            problems.append(Problem("order total", x.id, int(expected_total), int(x.total_cents),
                                    "total is not subtotal + fees - discount", org))
    return problems


def _order_refunds(conn):
    refunds = (select(le.c.order_id, func.sum(le.c.amount_cents).label("total"))
               .where(le.c.kind.in_((REFUND, ORDER_REFUND))).group_by(le.c.order_id).subquery())
    refunded = func.coalesce(refunds.c.total, 0)
    rows = conn.execute(
        select(o.c.id, o.c.organization_id, o.c.refund_cents, refunded.label("refunded"))
        .outerjoin(refunds, refunds.c.order_id == o.c.id).where(o.c.refund_cents != refunded)
    ).all()
    return [Problem("order refund", x.id, int(x.refunded), int(x.refund_cents),
                    "refund_cents is not the sum of the refunds credited for it and its rewards", x.organization_id)
            for x in rows]


def _reward_refunds(conn):
    refunds = (select(le.c.reward_id, func.count().label("n"), func.sum(le.c.amount_cents).label("total"),
                      func.min(le.c.funding_source_id).label("source_min"),
                      func.max(le.c.funding_source_id).label("source_max"),
                      func.min(le.c.order_id).label("order_min"), func.max(le.c.order_id).label("order_max"))
               .where(le.c.kind == REFUND, le.c.reward_id.is_not(None)).group_by(le.c.reward_id).subquery())
    # converted: what was charged; otherwise value + fee, whatever charged_cents says (verify_credits
    # reports a charge on an unconverted order, and a refund of it is then the wrong amount here)
    owed = case((o.c.fx_currency_code.is_not(None), r.c.charged_cents),
                else_=r.c.denomination_cents + r.c.fee_cents)
    wrong_source = or_(refunds.c.source_min != o.c.funding_source_id, refunds.c.source_max != o.c.funding_source_id,
                       refunds.c.order_min != r.c.order_id, refunds.c.order_max != r.c.order_id,
                       refunds.c.order_min.is_(None))
    rejected = o.c.rejected_at.is_not(None)  # refunded as a whole order, not reward by reward
    rows = conn.execute(
        select(r.c.id, r.c.organization_id, r.c.order_id, r.c.status, owed.label("owed"), refunds.c.n,
               refunds.c.total, o.c.funding_source_id, rejected.label("rejected"))
        .join(o, o.c.id == r.c.order_id).outerjoin(refunds, refunds.c.reward_id == r.c.id)
        .where(or_(
            r.c.status.not_in(STATUSES),
            and_(~rejected, r.c.status.in_(REFUNDED),
                 or_(and_(refunds.c.n.is_(None), owed != 0), refunds.c.n != 1, refunds.c.total != owed,
                     wrong_source)),
            and_(~rejected, r.c.status.not_in(REFUNDED), refunds.c.n.is_not(None)),
            and_(rejected, or_(r.c.status != "CANCELED", refunds.c.n.is_not(None))),
        ))
    ).all()
    problems = []
    for x in rows:
        org, owed_cents = x.organization_id, int(x.owed)
        if x.status not in STATUSES:
            problems.append(Problem("reward status", x.id, 0, 0, f"unknown status {x.status!r}", org))
        if x.rejected:
            problems.append(Problem("rejected order reward", x.id, 0, int(x.n or 0),
                                    f"a {x.status} reward of rejected order {x.order_id} with {x.n or 0} "
                                    "refund(s) of its own", org))
        elif x.status not in REFUNDED:
            if x.n is not None:
                problems.append(Problem("refund of unrefunded reward", x.id, 0, int(x.total),
                                        f"a {x.status} reward of order {x.order_id} has {x.n} refund(s)", org))
        elif x.n is None:
            problems.append(Problem("refund missing", x.id, owed_cents, 0,
                                    f"{x.status} reward of order {x.order_id} was never refunded", org))
        elif x.n != 1:
            problems.append(Problem("refund count", x.id, 1, int(x.n),
                                    f"{x.status} reward of order {x.order_id} refunded {x.n} times", org))
        elif int(x.total) != owed_cents:
            problems.append(Problem("refund amount", x.id, owed_cents, int(x.total),
                                    f"refund of a {x.status} reward of order {x.order_id} is not its value plus fee",
                                    org))
        else:
            problems.append(Problem("refund source", x.id, 0, 0,
                                    f"refund not credited to order {x.order_id}'s balance {x.funding_source_id}",
                                    org))
    return problems


def _refunds_without_reward(conn):
    known = exists().where(r.c.id == le.c.reward_id)
    rows = conn.execute(
        select(le.c.id, le.c.reward_id, le.c.organization_id, le.c.amount_cents)
        .where(le.c.kind == REFUND, or_(le.c.reward_id.is_(None), ~known))
    ).all()
    return [Problem("refund without reward", str(x.id), 0, int(x.amount_cents),
                    f"ledger entry {x.id} refunds reward {x.reward_id}, which does not exist", x.organization_id)
            for x in rows]


def _payouts_missing(conn):
    has_payout = exists().where(p.c.reward_id == r.c.id)
    rows = conn.execute(
        select(r.c.id, r.c.organization_id, r.c.order_id).where(r.c.status == "REDEEMED", ~has_payout)
    ).all()
    return [Problem("payout missing", x.id, 1, 0, f"REDEEMED reward of order {x.order_id} has no payout",
                    x.organization_id) for x in rows]


def _payouts_unredeemed(conn):
    rows = conn.execute(
        select(p.c.reward_id, p.c.organization_id, func.coalesce(r.c.status, literal("(no reward)")).label("status"))
        .outerjoin(r, r.c.id == p.c.reward_id).where(or_(r.c.id.is_(None), r.c.status != "REDEEMED"))
    ).all()
    return [Problem("payout of unredeemed reward", x.reward_id, 0, 1, f"the reward is {x.status}",
                    x.organization_id) for x in rows]


def _pending_holds(conn):
    held = (select(o.c.funding_source_id, func.sum(o.c.total_cents).label("total"))
            .where(o.c.status == PENDING).group_by(o.c.funding_source_id).subquery())
    expected = func.coalesce(held.c.total, 0)
    rows = conn.execute(
        select(fs.c.id, fs.c.organization_id, fs.c.pending_cents, expected.label("expected"))
        .outerjoin(held, held.c.funding_source_id == fs.c.id).where(fs.c.pending_cents != expected)
    ).all()
    return [Problem("pending", x.id, int(x.expected), int(x.pending_cents),
                    "pending_cents is not the sum of the totals of its orders pending approval", x.organization_id)
            for x in rows]


def _order_rejections(conn):
    refunds = (select(le.c.order_id, func.count().label("n"), func.sum(le.c.amount_cents).label("total"),
                      func.min(le.c.funding_source_id).label("source"))
               .where(le.c.kind == ORDER_REFUND).group_by(le.c.order_id).subquery())
    rejected = o.c.rejected_at.is_not(None)
    rows = conn.execute(
        select(o.c.id, o.c.organization_id, o.c.status, o.c.total_cents, o.c.funding_source_id,
               rejected.label("rejected"), refunds.c.n, refunds.c.total, refunds.c.source)
        .outerjoin(refunds, refunds.c.order_id == o.c.id)
        .where(or_(
            and_(rejected, or_(o.c.status != "CANCELED", and_(refunds.c.n.is_(None), o.c.total_cents != 0),
                               refunds.c.n != 1,
                               refunds.c.total != o.c.total_cents, refunds.c.source != o.c.funding_source_id)),
            and_(~rejected, refunds.c.n.is_not(None)),
        ))
    ).all()
    problems = []
    for x in rows:
        org = x.organization_id
        if not x.rejected:
            problems.append(Problem("order refund of unrejected order", x.id, 0, int(x.total),
                                    f"a {x.status} order has {x.n} order refund(s)", org))
        elif x.n is None:
            problems.append(Problem("order refund missing", x.id, int(x.total_cents), 0,
                                    "a rejected order was never refunded", org))
        elif x.n != 1:
            problems.append(Problem("order refund count", x.id, 1, int(x.n),
                                    f"a rejected order refunded {x.n} times", org))
        elif int(x.total) != int(x.total_cents) or x.source != x.funding_source_id:
            problems.append(Problem("order refund amount", x.id, int(x.total_cents), int(x.total),
                                    f"the refund of a rejected order is not its total on balance {x.funding_source_id}",
                                    org))
        else:
            problems.append(Problem("order status", x.id, 0, 0, f"a rejected order is {x.status}, not CANCELED", org))
    return problems
