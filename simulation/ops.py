"""The operations a step can perform, each with its expected outcome.

An operation predicts what the services must answer from the model (and from database
state that the previous step's checks verified), calls the real service, and raises
Violation when the answer differs. Whatever a fault interrupted must have left nothing
behind: checks.py proves it after the step.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import orjson
from sqlalchemy import select, update

from largesse import db
from largesse.delivery import jobs as job_queue
from largesse.delivery import service as delivery
from largesse.errors import ApiError, BadRequest, Conflict, NotFound, PaymentRequired, Unprocessable
from largesse.funding import service as funding
from largesse.orders import service as orders
from largesse.orders.models import rewards
from largesse.orders.schemas import CreateOrderIn
from largesse.orgs.models import organizations
from largesse.redemption import service as redemption
from largesse.redemption import tokens
from largesse.web import parse_json_body
from simulation.faults import is_injected
from simulation.model import OrderM, OrgM, RewardM, Violation

# USD products of the shipped catalog with the sandbox provider, and the simulation's own
# inventory card (harness.py), all valid from 5 to 500 USD.
INVENTORY_PRODUCT = "PSIMINVENTRY01US"
INVENTORY_CENTS = 2500  # its one value: a reward offering it is of that value
PRODUCTS = ["PGCNWBOOKS01US", "PVCMERIDUS01US", "PCHOCEANTR01US", "PCSBANKACH01US", INVENTORY_PRODUCT]
NOT_OFFERED = "PGCPIXLARC01US"
LANES = [job_queue.MAIL, job_queue.MAIL, job_queue.WEBHOOK]


def fee_of(cents: int, org: OrgM) -> int:
    """The fee, computed here independently of the service: basis points rounded half up, plus flat."""
    percent = (Decimal(cents) * org.fee_basis_points / 10000).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return int(percent) + org.fee_flat_cents


def _expected_failure(sim, exc: BaseException, what: str) -> str:
    """A failure is acceptable only when a fault was injected into this step."""
    if is_injected(exc):
        sim.count("fault: statement failed")
        return f"{what}: failed by the injected fault ({sim.fault.fired})"
    raise Violation(f"{what}: unexpected {type(exc).__name__}: {exc}") from exc


# --- orders ----------------------------------------------------------------------------------

def _reward_body(sim, org: OrgM) -> tuple[dict, dict]:
    rng = sim.rng
    method = rng.choices(["EMAIL", "LINK"], [3, 1])[0]
    local, domain = org.member_email.split("@")
    tag = rng.choices(["fail", "tempfail", f"r{rng.randrange(10**6)}"], [3, 5, 92])[0]
    email = f"{local}+{tag}@{domain}"
    cents = rng.randrange(500, 15001)
    products = rng.sample(PRODUCTS, rng.randint(1, 3))
    if INVENTORY_PRODUCT in products:
        cents = INVENTORY_CENTS
    body = {"value": {"denomination": cents / 100}, "recipient": {"name": f"Recipient {tag}", "email": email},
            "delivery": {"method": method}, "products": products}
    if method == "EMAIL" and rng.random() < 0.1:
        body["deliver_at"] = (sim.clock.now.date() + timedelta(days=rng.randint(1, 3))).isoformat()
    return body, {"method": method, "email": email, "cents": cents, "products": body["products"]}


def _new_body(sim, org: OrgM, *, with_external_id: bool, size: int | None = None) -> tuple[bytes, list[dict]]:
    rng = sim.rng
    n = size or rng.choices([1, 2, 3, 6], [6, 2, 1, 1])[0]
    pairs = [_reward_body(sim, org) for _ in range(n)]
    body: dict = {"payment": {"funding_source_id": rng.choice(["balance", "BALANCE", org.balance_id])}}
    if with_external_id:
        body["external_id"] = f"sim-{sim.seed}-{sim.step}-{rng.randrange(10**6)}"
    if n == 1 and rng.random() < 0.5:
        body["reward"] = pairs[0][0]
    else:
        body["rewards"] = [p[0] for p in pairs]
    return orjson.dumps(body), [p[1] for p in pairs]


def place(sim, org: OrgM, raw: bytes, specs: list[dict], what: str) -> str:
    """Send one order and hold the service to the model's expectation."""
    model = sim.model
    body = parse_json_body(CreateOrderIn, raw)
    total = sum(s["cents"] + fee_of(s["cents"], org) for s in specs)
    available = sim.available(org)
    known = model.orders.get(org.by_external_id.get(body.external_id)) if body.external_id else None
    try:
        placed = orders.place_order(sim.engine, settings=sim.settings, credentials=org.credentials, body=body)
    except PaymentRequired as exc:
        if known is not None or total <= available:
            raise Violation(f"{what}: 402 although {total} <= available {available}: {exc}") from exc
        sim.count("order refused: insufficient funds")
        return f"{what}: 402 as expected ({total} > {available})"
    except Conflict as exc:
        if known is None or known.body == raw:
            raise Violation(f"{what}: 409 without a different earlier order: {exc}") from exc
        sim.count("order refused: external_id reused")
        return f"{what}: 409 as expected"
    except BadRequest as exc:
        # A client's retry days later: a deliver_at that was tomorrow may now be in the past.
        today = sim.clock.now.date()
        if known is None and "deliver_at" in str(exc) and any(
                r.deliver_at is not None and r.deliver_at < today for r in ([body.reward] if body.reward else
                                                                             body.rewards)):
            sim.count("order refused: deliver_at passed before the retry")
            return f"{what}: 400 as expected (deliver_at passed)"
        raise Violation(f"{what}: refused with BadRequest: {exc}") from exc
    except ApiError as exc:
        raise Violation(f"{what}: refused with {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        if body.external_id is not None:
            sim.retry_later.append((org, raw, specs))  # a client retries after an error
        return _expected_failure(sim, exc, what)
    order = placed.order
    if known is not None:
        if not placed.replay or order["id"] != known.id or known.body != raw:
            raise Violation(f"{what}: external_id {body.external_id} answered {order['id']} "
                            f"(replay={placed.replay}), expected a replay of {known.id}")
        sim.count("order replayed")
        return f"{what}: replayed {known.id}"
    if placed.replay:
        raise Violation(f"{what}: a replay of an order the simulation never saw acknowledged: {order['id']}")
    if total > available:
        raise Violation(f"{what}: accepted {order['id']} for {total} with only {available} available")
    charged = round(Decimal(str(order["payment"]["total"])) * 100)
    if charged != total or len(order["rewards"]) != len(specs):
        raise Violation(f"{what}: order {order['id']} charged {charged} for {len(order['rewards'])} rewards, "
                        f"expected {total} for {len(specs)}")
    expiry_days = sim.expiry_days.get(org.id)
    expires_at = sim.clock.now + timedelta(days=expiry_days) if expiry_days else None
    reward_models = []
    for spec, wire in zip(specs, order["rewards"], strict=True):
        reward = RewardM(wire["id"], org.id, order["id"], spec["method"], spec["email"], spec["products"],
                         spec["cents"] + fee_of(spec["cents"], org), expires_at)
        link = (wire.get("delivery") or {}).get("link")
        if spec["method"] == "LINK":
            if not link:
                raise Violation(f"{what}: LINK reward {reward.id} has no link in the response")
            reward.tokens.append(link.rsplit("/", 1)[1])
        reward_models.append(reward)
    sim.model.add_order(OrderM(order["id"], org.id, body.external_id, raw, total, [r.id for r in reward_models]),
                        reward_models)
    sim.count("order placed")
    return f"{what}: placed {order['id']} ({len(specs)} rewards, {total} cents)"


def op_order(sim) -> str:
    rng = sim.rng
    if sim.retry_later and rng.random() < 0.5:
        org, raw, specs = sim.retry_later.pop(0)
        return place(sim, org, raw, specs, "retry of a failed order")
    org = rng.choice(sim.model.orgs)
    raw, specs = _new_body(sim, org, with_external_id=rng.random() < 0.6)
    return place(sim, org, raw, specs, f"order for {org.id}")


def op_duplicate(sim) -> str:
    """The same order again with the same external_id: the first order, and no second debit."""
    candidates = [o for o in sim.model.orders.values() if o.external_id is not None]
    if not candidates:
        return op_order(sim)
    order = candidates[sim.rng.randrange(len(candidates))]
    org = sim.model.org(order.org)
    specs = [{"cents": r.cost_cents} for r in (sim.model.rewards[i] for i in order.reward_ids)]
    # cost_cents includes the fee of the time; a replay does not charge, so fees do not matter here.
    return place(sim, org, order.body, [{**s, "cents": 0} for s in specs], f"duplicate of {order.id}")


def op_conflict(sim) -> str:
    """An earlier external_id with different parameters: 409, nothing changes."""
    candidates = [o for o in sim.model.orders.values() if o.external_id is not None]
    if not candidates:
        return op_order(sim)
    order = candidates[sim.rng.randrange(len(candidates))]
    org = sim.model.org(order.org)
    body = orjson.loads(order.body)
    target = body["reward"] if "reward" in body else body["rewards"][0]
    target["value"]["denomination"] = round(target["value"]["denomination"] + 1, 2)
    return place(sim, org, orjson.dumps(body), [{"cents": 0}], f"conflicting reuse of {order.external_id}")


def op_overdraft(sim) -> str:
    """An order larger than the balance: 402 and nothing changes."""
    org = sim.rng.choice(sim.model.orgs)
    available = sim.available(org)
    size = min(500, available // 50_000 + 2)  # enough 500 USD rewards to exceed the balance
    raw, _ = _new_body(sim, org, with_external_id=sim.rng.random() < 0.5, size=size)
    body = orjson.loads(raw)
    items = [body["reward"]] if "reward" in body else body["rewards"]
    specs = []
    for item in items:
        item["value"]["denomination"] = 500
        item["products"] = ["PGCNWBOOKS01US"]
        item["delivery"]["method"] = "LINK"
        specs.append({"method": "LINK", "email": item["recipient"]["email"], "cents": 50_000,
                      "products": item["products"]})
    return place(sim, org, orjson.dumps(body), specs, f"overdraft attempt for {org.id} ({available} available)")


# --- reward actions --------------------------------------------------------------------------

def _pick_reward(sim, *, prefer=None) -> RewardM | None:
    model = sim.model
    if not model.reward_order:
        return None
    if prefer is not None and sim.rng.random() < 0.8:
        preferred = [i for i in model.reward_order[-400:] if prefer(model.rewards[i])]
        if preferred:
            return model.rewards[preferred[sim.rng.randrange(len(preferred))]]
    return model.rewards[model.reward_order[sim.rng.randrange(len(model.reward_order))]]


def _live(sim, reward: RewardM) -> bool:
    return reward.outcome == "ACTIVE" and (reward.expires_at is None or reward.expires_at > sim.clock.now)


def op_cancel(sim) -> str:
    if sim.delivery_failed and sim.rng.random() < 0.6:
        reward = sim.model.rewards[sim.delivery_failed[sim.rng.randrange(len(sim.delivery_failed))]]
    else:
        reward = _pick_reward(sim, prefer=lambda r: r.outcome == "ACTIVE")
    if reward is None:
        return op_order(sim)
    if sim.rng.random() < 0.1:  # another organization's key: 404, nothing changes
        other = next(o for o in sim.model.orgs if o.id != reward.org)
        try:
            delivery.cancel_reward(sim.engine, org=other.id, reward_id=reward.id)
        except NotFound:
            return f"cancel {reward.id} by another organization: 404"
        except Exception as exc:
            return _expected_failure(sim, exc, f"cancel {reward.id} by another organization")
        raise Violation(f"organization {other.id} canceled reward {reward.id} of {reward.org}")
    with sim.fault.pause(), db.read(sim.engine) as conn:
        delivery_status = conn.execute(select(rewards.c.delivery_status).where(rewards.c.id == reward.id)).scalar_one()
    what = f"cancel {reward.id} ({reward.outcome}, delivery {delivery_status})"
    # API.md §2.5: only a reward whose delivery failed can be canceled.
    expected = _live(sim, reward) and delivery_status == "FAILED"
    try:
        refunded = delivery.cancel_reward(sim.engine, org=reward.org, reward_id=reward.id)
    except Unprocessable as exc:
        if expected:
            raise Violation(f"{what}: refused although it is active, unexpired and its delivery failed: {exc}") \
                from exc
        return f"{what}: 422 as expected"
    except Exception as exc:
        return _expected_failure(sim, exc, what)
    if not expected:
        raise Violation(f"{what}: canceled although it is {reward.outcome} (expires {reward.expires_at})")
    if refunded != reward.cost_cents:
        raise Violation(f"{what}: refunded {refunded}, expected {reward.cost_cents}")
    reward.outcome = "CANCELED"
    sim.count("reward canceled")
    return f"{what}: refunded {refunded}"


def op_resend(sim) -> str:
    if sim.delivery_failed and sim.rng.random() < 0.7:
        reward = sim.model.rewards[sim.delivery_failed[sim.rng.randrange(len(sim.delivery_failed))]]
    else:
        reward = _pick_reward(sim, prefer=lambda r: r.method == "EMAIL" and r.outcome == "ACTIVE")
    if reward is None:
        return op_order(sim)
    with sim.fault.pause(), db.read(sim.engine) as conn:
        row = conn.execute(select(rewards.c.status, rewards.c.delivery_status, rewards.c.expires_at)
                           .where(rewards.c.id == reward.id)).one()
    unexpired = row.expires_at is None or row.expires_at > sim.clock.now  # past it: expired before the sweep
    expected = reward.method == "EMAIL" and row.status == "ACTIVE" and unexpired and row.delivery_status == "FAILED"
    updated = None
    if reward.method == "EMAIL" and sim.rng.random() < 0.5:  # a corrected address (no sandbox failure tag)
        local, domain = sim.model.org(reward.org).member_email.split("@")
        updated = f"{local}+fixed{sim.rng.randrange(1000)}@{domain}"
    what = f"resend {reward.id} ({reward.method}, {row.status}, delivery {row.delivery_status})"
    try:
        delivery.resend_reward(sim.engine, sim.settings, org=reward.org, reward_id=reward.id,
                               updated_email=updated, updated_phone=None)
    except Unprocessable as exc:
        if expected:
            raise Violation(f"{what}: refused: {exc}") from exc
        return f"{what}: 422 as expected"
    except Exception as exc:
        return _expected_failure(sim, exc, what)
    if not expected:
        raise Violation(f"{what}: accepted")
    if updated:
        reward.email = updated
    sim.count("reward resent")
    return f"{what}: queued again"


def op_generate_link(sim) -> str:
    reward = _pick_reward(sim, prefer=lambda r: r.method == "LINK")
    if reward is None:
        return op_order(sim)
    what = f"generate_link {reward.id} ({reward.method})"
    try:
        link = delivery.generate_link(sim.engine, sim.settings, org=reward.org, reward_id=reward.id)
    except ApiError as exc:
        if reward.method == "LINK":
            raise Violation(f"{what}: refused: {exc}") from exc
        return f"{what}: refused as expected"
    except Exception as exc:
        return _expected_failure(sim, exc, what)
    if reward.method != "LINK":
        raise Violation(f"{what}: a link for a {reward.method} reward")
    reward.tokens.append(link.rsplit("/", 1)[1])
    return f"{what}: new link"


BANK_ACCOUNT = {"holder_name": "Sim Recipient", "routing_number": "021000021", "account_number": "000123456789",
                "account_type": "checking"}


def op_redeem(sim) -> str:
    reward = _pick_reward(sim, prefer=lambda r: r.tokens and r.outcome == "ACTIVE")
    if reward is None or not reward.tokens:
        return op_worker(sim)
    token = reward.tokens[sim.rng.randrange(len(reward.tokens))]
    product = NOT_OFFERED if sim.rng.random() < 0.08 else sim.rng.choice(reward.products)
    in_stock = sim.model.codes_loaded > sim.model.codes_issued
    if _live(sim, reward):
        expected = "invalid_choice" if product not in reward.products else (
            "unavailable" if product == INVENTORY_PRODUCT and not in_stock else "ok")
    else:
        expected = {"REDEEMED": "already_redeemed", "CANCELED": "canceled"}.get(reward.outcome, "expired")
    what = f"redeem {reward.id} for {product} ({reward.outcome}, expires {reward.expires_at})"
    try:
        # A product paid into a bank account needs one (redemption.recipient); the others ignore it.
        redeemed = redemption.redeem(sim.engine, token=token, product_id=product, settings=sim.settings,
                                     details=BANK_ACCOUNT)
        outcome = "ok" if redeemed == reward.id else f"redeemed {redeemed}"
    except redemption.RedemptionError as exc:
        outcome = exc.kind
    except Exception as exc:
        return _expected_failure(sim, exc, what)
    if outcome != expected:
        raise Violation(f"{what}: {outcome}, expected {expected}")
    if outcome == "ok":
        reward.outcome = "REDEEMED"
        reward.product = product
        sim.count("reward redeemed")
        if product == INVENTORY_PRODUCT:
            sim.model.codes_issued += 1
    elif outcome == "unavailable":
        sim.count("redemption refused: out of stock")
    return f"{what}: {outcome}"


# --- the worker ------------------------------------------------------------------------------

def op_worker(sim) -> str:
    """The worker runs a few batches; with the kill fault armed, it dies after a send."""
    rng = sim.rng
    worker = sim.worker
    notes = []
    if sim.kill_next_send:
        worker.transport.kill_after_send = True
        sim.kill_next_send = False
    try:
        if rng.random() < 0.3:
            reclaimed = worker.chores()
            if reclaimed:
                notes.append(f"reclaimed {reclaimed}")
        for _ in range(rng.randint(1, 5)):
            lane = rng.choice(LANES)
            claimed, event = worker.batch(lane)
            notes.append(f"{claimed} {lane} jobs" + (f" ({event})" if event else ""))
            if event:
                sim.count(f"fault: worker {event}")
                break
            if not claimed:
                break
    except Exception as exc:
        notes.append(_expected_failure(sim, exc, "worker"))
    finally:
        worker.transport.kill_after_send = False
        harvest_mail(sim)
    return "worker: " + ", ".join(notes)


def harvest_mail(sim) -> None:
    """Every email the SMTP server accepted carries a live link to its own reward."""
    mails = sim.smtp.take()
    if not mails:
        return
    with sim.fault.pause(), db.read(sim.engine) as conn:
        for mail in mails:
            reward = sim.model.rewards.get(mail.reward_id)
            if reward is None:
                raise Violation(f"an email for reward {mail.reward_id}, which no acknowledged order has")
            if mail.token is None or tokens.reward_for(conn, mail.token, sim.settings.environment) != reward.id:
                raise Violation(f"the email for {reward.id} carries a link that does not open it")
            if reward.expires_at is not None and reward.expires_at <= sim.clock.now:
                # The sender checks lifecycle.status: past its expiry a reward is expired even
                # before the sweep has run, and its link would only open an "expired" page.
                raise Violation(f"an email for reward {reward.id} at {sim.clock.now}, past its expiry "
                                f"{reward.expires_at}")
            seen = sim.model.emailed.get(reward.id, 0)
            sim.model.emailed[reward.id] = seen + 1
            sim.model.emails += 1
            if seen:
                sim.model.duplicate_emails += 1
            reward.tokens.append(mail.token)


# --- the operator and the environment --------------------------------------------------------

def op_fund(sim) -> str:
    """An operator funds a balance (`largesse balance fund`), usually with a reference: the same
    reference again credits nothing; one that failed by a fault is retried and then credits."""
    rng = sim.rng
    org = rng.choice(sim.model.orgs)
    if org.references and rng.random() < 0.3:
        reference = rng.choice(sorted(org.references))
        cents, expect_credit = org.references[reference], False
    elif sim.fund_retry and rng.random() < 0.5:
        org, reference, cents = sim.fund_retry.pop(0)
        expect_credit = True
    else:
        reference = f"wire-{sim.seed}-{sim.step}" if rng.random() < 0.8 else None
        cents, expect_credit = rng.randrange(10_000, 200_001), True
    what = f"fund {org.id} {cents} (reference {reference})"
    try:
        done = funding.fund(sim.engine, organization_id=org.id, amount_cents=cents, memo=f"step {sim.step}",
                            reference=reference)
    except Exception as exc:
        if reference is not None and reference not in org.references:  # never credited: retried later
            sim.fund_retry.append((org, reference, cents))
        return _expected_failure(sim, exc, what)
    if done.credited != expect_credit or done.amount_cents != cents:
        raise Violation(f"{what}: credited={done.credited} amount {done.amount_cents}, expected "
                        f"credited={expect_credit}")
    if done.credited:
        org.funded_cents += cents
        if reference is not None:
            org.references[reference] = cents
        sim.count("balance funded")
        return f"{what}: credited"
    sim.count("funding replayed")
    return f"{what}: already credited, nothing moved"


def op_restock(sim) -> str:
    count = sim.rng.randint(1, 4)
    try:
        imported = sim.restock(count)
    except Exception as exc:
        return _expected_failure(sim, exc, f"restock {count} codes")
    if imported != count:
        raise Violation(f"restock: {imported} codes imported of {count} new ones")
    return f"restock: {imported} codes"


def op_settings(sim) -> str:
    """Reward expiry or fees of an organization change (for rewards ordered from now on)."""
    org = sim.rng.choice(sim.model.orgs)
    try:
        if sim.rng.random() < 0.6:
            days = sim.rng.choice([None, 1, 2, 5])
            with db.write(sim.engine) as conn:
                delivery.set_expiry_days(conn, org=org.id, days=days)
            sim.expiry_days[org.id] = days
            return f"expiry of {org.id}: {days} days"
        bp, flat = sim.rng.choice([(0, 0), (250, 0), (125, 50), (0, 99)])
        with db.write(sim.engine) as conn:  # what `largesse org fees` does
            conn.execute(update(organizations).where(organizations.c.id == org.id)
                         .values(fee_basis_points=bp, fee_flat_cents=flat))
        org.fee_basis_points, org.fee_flat_cents = bp, flat
        return f"fees of {org.id}: {bp} bp + {flat}"
    except Exception as exc:
        return _expected_failure(sim, exc, f"settings of {org.id}")


def op_time(sim) -> str:
    rng = sim.rng
    seconds = rng.choice([rng.uniform(1, 120), rng.uniform(120, 900), rng.uniform(900, 4000)])
    sim.clock.advance(seconds)
    return f"clock +{seconds:.0f} s"


OPERATIONS = [
    (op_order, 30), (op_duplicate, 5), (op_conflict, 2), (op_overdraft, 3), (op_cancel, 7), (op_resend, 5),
    (op_generate_link, 2), (op_redeem, 12), (op_worker, 22), (op_fund, 3), (op_restock, 1), (op_settings, 2),
    (op_time, 8),
]
