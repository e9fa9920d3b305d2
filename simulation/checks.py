"""The invariants, checked against the database after every step and at the end of a run."""

from __future__ import annotations

from collections import Counter, defaultdict

from sqlalchemy import func, select

from largesse import db
from largesse.delivery import jobs as job_queue
from largesse.delivery.models import jobs
from largesse.funding import service as funding
from largesse.funding.models import funding_sources, ledger_entries
from largesse.orders.models import orders, rewards
from largesse.redemption.models import inventory_codes, payouts
from simulation.model import Violation

REFUND = "reward_refund"


def check_step(sim) -> None:
    """Every acknowledged order is there with its money and nothing else is; every reward's
    state matches what the simulation did to it; balances add up; no payout or refund twice."""
    model = sim.model
    now = sim.clock.now
    with sim.fault.pause(), db.read(sim.engine) as conn:
        problems = funding.verify(conn)
        if problems:
            raise Violation(f"ledger verify: {problems[:5]}")
        order_rows = {r.id: r for r in conn.execute(
            select(orders.c.id, orders.c.organization_id, orders.c.external_id, orders.c.total_cents,
                   orders.c.refund_cents))}
        reward_rows = {r.id: r for r in conn.execute(
            select(rewards.c.id, rewards.c.order_id, rewards.c.status, rewards.c.delivery_method,
                   rewards.c.delivery_status, rewards.c.expires_at))}
        refunds = defaultdict(list)
        for row in conn.execute(select(ledger_entries.c.reward_id, ledger_entries.c.amount_cents)
                                .where(ledger_entries.c.kind == REFUND)):
            refunds[row.reward_id].append(row.amount_cents)
        payout_rows = conn.execute(select(payouts.c.reward_id, payouts.c.product_id, payouts.c.provider,
                                          payouts.c.code)).all()
        payout_count = Counter(p.reward_id for p in payout_rows)
        codes = conn.execute(select(inventory_codes.c.code, inventory_codes.c.reward_id)
                             .where(inventory_codes.c.reward_id.is_not(None))).all()
        loaded = conn.execute(select(func.count()).select_from(inventory_codes)).scalar_one()
        debits = Counter(conn.execute(select(ledger_entries.c.order_id).where(ledger_entries.c.kind == "order"))
                         .scalars())
        balances = dict(conn.execute(select(funding_sources.c.id, funding_sources.c.available_cents)).all())
        running = set(conn.execute(select(jobs.c.id).where(jobs.c.status == job_queue.RUNNING)).scalars())

    missing = model.orders.keys() - order_rows.keys()
    phantom = order_rows.keys() - model.orders.keys()
    if missing or phantom:
        raise Violation(f"acknowledged orders missing: {sorted(missing)[:5]}; unacknowledged orders present: "
                        f"{sorted(phantom)[:5]}")
    for order in model.orders.values():
        row = order_rows[order.id]
        if (row.organization_id, row.external_id, row.total_cents) != (order.org, order.external_id,
                                                                       order.total_cents):
            raise Violation(f"order {order.id} is {tuple(row)}, acknowledged as "
                            f"{(order.org, order.external_id, order.total_cents)}")
        if debits[order.id] != 1:
            raise Violation(f"order {order.id} has {debits[order.id]} debits")
    if reward_rows.keys() != model.rewards.keys():
        raise Violation(f"rewards differ: missing {sorted(model.rewards.keys() - reward_rows.keys())[:5]}, "
                        f"unknown {sorted(reward_rows.keys() - model.rewards.keys())[:5]}")
    extra_payouts = {r: n for r, n in payout_count.items() if n > 1 or r not in reward_rows}
    if extra_payouts:
        raise Violation(f"payouts issued twice or for unknown rewards: {extra_payouts}")

    sim.delivery_failed = [i for i in model.reward_order if reward_rows[i].delivery_status == "FAILED"
                           and reward_rows[i].status == "ACTIVE"]
    _check_payouts(model, payout_rows, codes, loaded)
    refunded_by_org: Counter = Counter()
    refunded_by_order: Counter = Counter()
    for reward in model.rewards.values():
        row = reward_rows[reward.id]
        got_refunds, got_payouts = refunds.get(reward.id, []), payout_count.get(reward.id, 0)
        if row.expires_at != reward.expires_at:
            raise Violation(f"reward {reward.id} expires at {row.expires_at}, expected {reward.expires_at}")
        expected_status = reward.outcome
        if row.status == "EXPIRED" and reward.outcome == "ACTIVE":
            if reward.expires_at is None or reward.expires_at > now:
                raise Violation(f"reward {reward.id} expired before its time ({reward.expires_at}, now {now})")
            expected_status = "EXPIRED"
        if row.status != expected_status:
            raise Violation(f"reward {reward.id} is {row.status}; the simulation made it {reward.outcome}")
        want_refunds = [reward.cost_cents] if row.status in ("CANCELED", "EXPIRED") else []
        if got_refunds != want_refunds:
            raise Violation(f"reward {reward.id} ({row.status}) has refunds {got_refunds}, expected {want_refunds}")
        if got_payouts != (1 if row.status == "REDEEMED" else 0):
            raise Violation(f"reward {reward.id} ({row.status}) has {got_payouts} payouts")
        if row.delivery_method == "EMAIL" and row.delivery_status == "SUCCEEDED" and not model.emailed.get(reward.id):
            raise Violation(f"reward {reward.id}: delivery SUCCEEDED but no email reached the SMTP server")
        refunded_by_org[reward.org] += sum(got_refunds)
        refunded_by_order[reward.order_id] += sum(got_refunds)
    for order in model.orders.values():
        if order_rows[order.id].refund_cents != refunded_by_order[order.id]:
            raise Violation(f"order {order.id} shows refund {order_rows[order.id].refund_cents}, "
                            f"its rewards' refunds sum to {refunded_by_order[order.id]}")
    for org in model.orgs:
        spent = sum(model.orders[o].total_cents for o in org.orders)
        expected = org.funded_cents - spent + refunded_by_org[org.id]
        if balances[org.balance_id] != expected:
            raise Violation(f"balance of {org.id} is {balances[org.balance_id]}, expected {expected} "
                            f"(funded {org.funded_cents} - orders {spent} + refunds {refunded_by_org[org.id]})")
    stray = running - model.abandoned_jobs
    if stray:
        raise Violation(f"jobs left running by a worker that finished its batch: {sorted(stray)[:10]}")
    model.abandoned_jobs &= running  # the others were reclaimed and requeued


def _check_payouts(model, payout_rows, codes, loaded: int) -> None:
    """Each payout is for the product the simulation chose; each inventory code is issued at
    most once, to exactly the reward whose payout shows it."""
    for payout in payout_rows:
        reward = model.rewards.get(payout.reward_id)
        if reward is None or reward.product != payout.product_id:
            raise Violation(f"payout of {payout.reward_id} for {payout.product_id}; the simulation redeemed "
                            f"{reward.product if reward else 'no such reward'}")
    issued = {c.code: c.reward_id for c in codes}
    inventory_payouts = {p.reward_id: p.code for p in payout_rows if p.provider == "inventory"}
    if len(issued) != len(codes) or sorted(issued.values()) != sorted(inventory_payouts) or any(
            issued.get(code) != reward_id for reward_id, code in inventory_payouts.items()):
        raise Violation(f"inventory codes issued {sorted(issued.items())[:5]} do not match the inventory payouts "
                        f"{sorted(inventory_payouts.items())[:5]}")
    if (len(codes), loaded) != (model.codes_issued, model.codes_loaded):
        raise Violation(f"inventory: {len(codes)} of {loaded} codes issued, the simulation expected "
                        f"{model.codes_issued} of {model.codes_loaded}")


def check_final(sim) -> list[str]:
    """After settle(): every due job is done or dead for a recorded reason, none is running,
    every overdue reward is expired, every deliverable email went out. Returns a summary."""
    check_step(sim)
    model = sim.model
    now = sim.clock.now
    with sim.fault.pause(), db.read(sim.engine) as conn:
        job_rows = conn.execute(select(jobs.c.id, jobs.c.kind, jobs.c.status, jobs.c.reward_id, jobs.c.last_error,
                                       jobs.c.payload, jobs.c.attempts)).all()
        reward_rows = {r.id: r for r in conn.execute(
            select(rewards.c.id, rewards.c.status, rewards.c.delivery_method, rewards.c.delivery_status,
                   rewards.c.delivery_error, rewards.c.expires_at))}
    by_kind = Counter((j.kind, j.status) for j in job_rows)
    for job in job_rows:
        if job.kind in job_queue.PERIODIC:
            if job.status != job_queue.QUEUED:
                raise Violation(f"periodic job {job.id} is {job.status}")
            continue
        if job.status not in (job_queue.DONE, job_queue.DEAD):
            raise Violation(f"job {job.id} ({job.kind}) is still {job.status} after settling")
        if job.status == job_queue.DEAD and not job.last_error:
            raise Violation(f"job {job.id} ({job.kind}) is dead without a reason")
    dead_delivery = {j.reward_id for j in job_rows if j.kind == "deliver_reward" and j.status == job_queue.DEAD}
    for reward_id, row in reward_rows.items():
        if row.status == "ACTIVE" and row.expires_at is not None and row.expires_at <= now:
            raise Violation(f"reward {reward_id} is past its expiry ({row.expires_at}) but still ACTIVE")
        if row.status != "ACTIVE":
            continue
        if row.delivery_method == "LINK" and row.delivery_status != "SUCCEEDED":
            raise Violation(f"LINK reward {reward_id} has delivery {row.delivery_status}")
        if row.delivery_method == "EMAIL":
            if row.delivery_status == "FAILED" and (reward_id not in dead_delivery or not row.delivery_error):
                raise Violation(f"reward {reward_id}: delivery FAILED without a dead job and an error")
            if row.delivery_status not in ("SUCCEEDED", "FAILED"):
                raise Violation(f"reward {reward_id}: delivery still {row.delivery_status} after settling")
    answered = sim.receiver.answered_uuids()
    delivered_webhooks = [j for j in job_rows if j.kind == "deliver_webhook" and j.status == job_queue.DONE
                          and j.last_error != "no webhook"]
    lost = [j.id for j in delivered_webhooks if j.payload["uuid"] not in answered]
    if lost:
        raise Violation(f"webhook jobs done but never acknowledged by the receiver: {lost[:10]}")
    emitted = {j.payload["uuid"] for j in job_rows if j.kind == "deliver_webhook"}
    unknown = sim.receiver.all_uuids() - emitted
    if unknown:
        raise Violation(f"the receiver got events no job carried: {sorted(unknown)[:5]}")
    statuses = Counter(r.status for r in reward_rows.values())
    deliveries = Counter(r.delivery_status for r in reward_rows.values() if r.status == "ACTIVE")
    return [
        f"orders {len(model.orders)}, rewards {dict(sorted(statuses.items()))}, active deliveries "
        f"{dict(sorted(deliveries.items()))}",
        f"jobs {dict(sorted((f'{k}:{s}', n) for (k, s), n in by_kind.items()))}",
        f"emails {model.emails} ({model.duplicate_emails} duplicates: at-least-once after kills/commit faults), "
        f"webhook events acknowledged {len(answered)} of {len(emitted)}",
    ]
