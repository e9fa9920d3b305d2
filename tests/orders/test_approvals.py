"""Order approvals through the official client (and httpx where the client cannot look): a
PENDING APPROVAL order holds its money, delivers nothing until approved, and a rejection gives
back every cent once. Concurrent decisions are in test_approval_races.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from tremendous import CreateOrderRequest, SingleRewardOrder
from tremendous.exceptions import ForbiddenException, NotFoundException, UnprocessableEntityException

from largesse import auth, db
from largesse.delivery import service as delivery
from largesse.delivery.worker import Worker
from largesse.funding.service import verify
from largesse.orders import approvals
from largesse.orders.models import orders, rewards
from largesse.timeutil import utcnow
from tests.factories import available_cents, client_order, error, ok, order_body, unique


def set_policy(engine, org, mode: str, above_cents: int | None = None, api_allowed: bool | None = None):
    """The service function the CLI (and later the dashboard) calls."""
    with db.write(engine) as conn:
        return approvals.set_policy(conn, org.id, mode=mode, above_cents=above_cents, api_allowed=api_allowed)


def meta(http) -> dict:
    return ok(http.get("/funding_sources/BALANCE"))["funding_source"]["meta"]


def findings(engine, org) -> list:
    with db.read(engine) as conn:
        return [p for p in verify(conn) if p.organization_id == org.id]


def drain(engine, base_settings) -> None:
    Worker(engine, base_settings).drain()


def test_pending_order_holds_money_and_delivers_nothing_until_approved(org, api, http, engine, base_settings):
    set_policy(engine, org, "api")
    before = available_cents(http)
    created = client_order(api, order_body(org.member_email, denomination=40))
    link_order = client_order(api, order_body(org.member_email, denomination=10, method="LINK"))
    assert created.status == link_order.status == "PENDING APPROVAL"
    assert created.rewards[0].delivery.status == "PENDING"
    assert link_order.rewards[0].delivery.status == "PENDING" and link_order.rewards[0].delivery.link is None
    assert meta(http)["available_cents"] == before - 5000
    assert meta(http)["pending_cents"] == 5000 and meta(http)["pending_amount"] == 50

    drain(engine, base_settings)  # a worker finds nothing to deliver
    reward = api.get_reward(created.rewards[0].id).reward
    assert reward.delivery.status == "PENDING"
    assert api.get_order(created.id).order.status == "PENDING APPROVAL"
    assert {o.id: o.status for o in api.list_orders().orders} == {created.id: "PENDING APPROVAL",
                                                                   link_order.id: "PENDING APPROVAL"}
    link_reward = link_order.rewards[0].id
    with pytest.raises(ForbiddenException) as refused:
        api.generate_reward_link(link_reward)
    assert json.loads(refused.value.body)["errors"]["payload"] == {"id": ["its order is pending approval"]}
    with pytest.raises(UnprocessableEntityException):
        api.cancel_reward(reward.id)

    approved = api.approve_order(created.id).order
    assert approved.status == "EXECUTED" and approved.id == created.id
    assert meta(http)["pending_cents"] == 1000 and meta(http)["available_cents"] == before - 5000
    drain(engine, base_settings)
    assert api.get_reward(reward.id).reward.delivery.status == "SUCCEEDED"

    approved_link = api.approve_order(link_order.id).order
    assert approved_link.rewards[0].delivery.status == "SUCCEEDED"
    assert "/redeem/" in api.generate_reward_link(link_reward).reward.link
    assert meta(http)["pending_cents"] == 0
    with db.read(engine) as conn:
        row = conn.execute(orders.select().where(orders.c.id == created.id)).first()
    assert row.approved_by_key_id is not None and row.approved_at is not None and row.rejected_at is None
    assert findings(engine, org) == []


def test_reject_gives_back_the_whole_total_once(org, api, http, engine):
    set_policy(engine, org, "all")
    before = available_cents(http)
    body = {**order_body(org.member_email, denomination=30), "external_id": unique("appr-")}
    order = ok(http.post("/orders", json=body))["order"]
    assert ok(http.post("/orders", json=body), 201)["order"] == order  # a replay returns it unchanged
    rejected = api.reject_order(order["id"]).order
    assert rejected.status == "CANCELED"
    assert rejected.payment.refund.total == 30
    assert meta(http)["pending_cents"] == 0
    assert available_cents(http) == before
    wire = ok(http.get(f"/rewards/{order['rewards'][0]['id']}"))["reward"]
    assert wire["redemption"]["status"] == "CANCELED"
    for decide in (api.reject_order, api.approve_order):
        with pytest.raises(UnprocessableEntityException) as refused:
            decide(order["id"])
        assert json.loads(refused.value.body)["errors"]["payload"] == {"id": ["is CANCELED, not PENDING APPROVAL"]}
    with pytest.raises(UnprocessableEntityException):
        api.cancel_reward(order["rewards"][0]["id"])
    # The replay of a rejected order returns it as it is now, still 201, and charges nothing.
    assert ok(http.post("/orders", json=body), 201)["order"]["status"] == "CANCELED"
    assert available_cents(http) == before
    assert findings(engine, org) == []


def test_policy_modes(org, http, engine):
    set_policy(engine, org, "above", above_cents=5000)
    assert ok(http.post("/orders", json=order_body(org.member_email, denomination=50)))["order"]["status"] == \
        "EXECUTED"  # not strictly above
    assert ok(http.post("/orders", json=order_body(org.member_email, denomination=50.01)))["order"]["status"] == \
        "PENDING APPROVAL"
    set_policy(engine, org, "off")
    assert ok(http.post("/orders", json=order_body(org.member_email)))["order"]["status"] == "EXECUTED"
    with db.read(engine) as conn:
        assert len(approvals.list_pending(conn, org.id)) == 1
    with pytest.raises(ValueError):
        set_policy(engine, org, "above")
    with pytest.raises(ValueError):
        set_policy(engine, org, "sometimes")


def test_errors_404_403_422(org, other_org, api, http, engine):
    executed = ok(http.post("/orders", json=order_body(org.member_email)))["order"]
    with pytest.raises(UnprocessableEntityException):
        api.approve_order(executed["id"])
    error(http.post(f"/order_approvals/{executed['id']}/reject"), 422)
    with pytest.raises(NotFoundException):
        api.approve_order("UNKNOWN0000000")
    set_policy(engine, org, "api")
    pending = ok(http.post("/orders", json=order_body(org.member_email)))["order"]
    for verb in ("approve", "reject"):
        with other_org.http() as stranger:
            assert error(stranger.post(f"/order_approvals/{pending['id']}/{verb}"), 404)["payload"] == \
                {"id": ["not found"]}
    set_policy(engine, org, "api", api_allowed=False)
    for decide in (api.approve_order, api.reject_order):
        with pytest.raises(ForbiddenException) as refused:
            decide(pending["id"])
        assert json.loads(refused.value.body)["errors"]["message"]
    set_policy(engine, org, "api", api_allowed=True)
    with db.write(engine) as conn:
        _, read_only = auth.issue_key(conn, organization_id=org.id, permission="read_only")
    response = http.post(f"/order_approvals/{pending['id']}/approve", headers={"Authorization": f"Bearer {read_only}"})
    error(response, 403)
    assert api.get_order(pending["id"]).order.status == "PENDING APPROVAL"
    assert api.approve_order(pending["id"]).order.status == "EXECUTED"


def test_a_key_cannot_make_an_approver_while_api_approval_is_off(org, http, engine):
    """Otherwise the key's holder adds themselves as an administrator and approves in the dashboard."""
    member = ok(http.post("/members", json={"email": unique("clerk") + "@example.org", "role": "MEMBER"}))["member"]
    set_policy(engine, org, "all", api_allowed=False)
    before = ok(http.get("/members"))["members"]
    refused = error(http.post("/members", json={"email": unique("boss") + "@example.org", "role": "ADMIN"}), 403)
    assert refused["payload"] == {"role": ["may not be given through the API while API approval is off"]}
    error(http.patch(f"/members/{member['id']}", json={"role": "ADMIN"}), 403)
    assert ok(http.get("/members"))["members"] == before
    # Roles that do not approve are still the key's to give, and the switch back restores the rest.
    ok(http.post("/members", json={"email": unique("viewer") + "@example.org", "role": "VIEWER"}))
    ok(http.patch(f"/members/{member['id']}", json={"role": "VIEWER"}))
    set_policy(engine, org, "all", api_allowed=True)
    assert ok(http.patch(f"/members/{member['id']}", json={"role": "ADMIN"}))["member"]["role"] == "ADMIN"


def test_pending_rewards_do_not_expire_and_expiry_starts_at_approval(org, api, http, engine):
    set_policy(engine, org, "api")
    with db.write(engine) as conn:
        delivery.set_expiry_days(conn, org=org.id, days=2)
    try:
        order = ok(http.post("/orders", json=order_body(org.member_email)))["order"]
        reward_id = order["rewards"][0]["id"]
        delivery.expire_due(engine, now=utcnow() + timedelta(days=3))
        assert ok(http.get(f"/rewards/{reward_id}"))["reward"].get("redemption") is None  # still ACTIVE
        with db.write(engine) as conn:  # as if it had waited a day for the approval
            created_at = conn.execute(orders.select().where(orders.c.id == order["id"])).first().created_at
            conn.execute(orders.update().where(orders.c.id == order["id"])
                         .values(created_at=created_at - timedelta(days=1)))
            conn.execute(rewards.update().where(rewards.c.id == reward_id)
                         .values(expires_at=created_at + timedelta(days=1)))
        approved = api.approve_order(order["id"]).order
        expires = approved.rewards[0].expires_at.replace(tzinfo=None)
        assert timedelta(days=2) - timedelta(minutes=1) < expires - utcnow() <= timedelta(days=2, minutes=1)
    finally:
        with db.write(engine) as conn:
            delivery.set_expiry_days(conn, org=org.id, days=None)
    assert findings(engine, org) == []


def test_a_scheduled_pending_rewards_expiry_counts_from_its_delivery_day(org, api, http, engine):
    """Approved before its delivery day, a scheduled reward keeps the expiry it was given (its
    days from that day): the wait for the approval was added on top of it."""
    set_policy(engine, org, "all")
    with db.write(engine) as conn:
        delivery.set_expiry_days(conn, org=org.id, days=30)
    try:
        day = (utcnow() + timedelta(days=60)).date()
        order = ok(http.post("/orders", json=order_body(org.member_email, deliver_at=day.isoformat())))["order"]
        given = order["rewards"][0]["expires_at"]
        assert given.startswith((day + timedelta(days=30)).isoformat())
        with db.write(engine) as conn:  # as if it had waited ten days for the approval
            created_at = conn.execute(orders.select().where(orders.c.id == order["id"])).first().created_at
            conn.execute(orders.update().where(orders.c.id == order["id"])
                         .values(created_at=created_at - timedelta(days=10)))
        approved = api.approve_order(order["id"]).order
        assert approved.rewards[0].expires_at.date() == day + timedelta(days=30)
        # One stored before expiry ran from the delivery day (created + 30 days, before its day
        # of 60): approved, it runs 30 days from its delivery, never ends before it is sent.
        legacy = ok(http.post("/orders", json=order_body(org.member_email, deliver_at=day.isoformat())))["order"]
        with db.write(engine) as conn:
            created_at = conn.execute(orders.select().where(orders.c.id == legacy["id"])).first().created_at
            conn.execute(rewards.update().where(rewards.c.order_id == legacy["id"])
                         .values(expires_at=created_at + timedelta(days=30)))
        approved = api.approve_order(legacy["id"]).order
        assert approved.rewards[0].expires_at.date() == day + timedelta(days=30)
    finally:
        with db.write(engine) as conn:
            delivery.set_expiry_days(conn, org=org.id, days=None)


def test_cli_sets_the_policy_and_a_member_decides(org, api, http, cli):
    shown = json.loads(cli("org", "approvals", "--org", org.id, "--json").stdout)
    assert shown == {"organization_id": org.id, "mode": "off", "above": None, "currency_code": "USD",
                     "api_approval_allowed": True}
    out = cli("org", "approvals", "--org", org.id, "--mode", "above", "--above", "100.00", "--no-api-approval")
    assert "above 100.00" in out.stdout and "may not approve" in out.stdout
    assert cli("org", "approvals", "--org", org.id, "--mode", "sometimes", check=False).returncode != 0
    small = client_order(api, order_body(org.member_email, denomination=100))
    big = client_order(api, order_body(org.member_email, denomination=100.01))
    assert (small.status, big.status) == ("EXECUTED", "PENDING APPROVAL")
    with pytest.raises(ForbiddenException):
        api.approve_order(big.id)
    assert big.id in cli("orders", "pending", "--org", org.id).stdout
    member = json.loads(cli("members", "list", "--org", org.id, "--json").stdout)["members"][0]["id"]
    assert cli("orders", "approve", big.id, "--org", org.id, "--member", "NOSUCHMEMBER", check=False).returncode != 0
    unknown = cli("orders", "approve", big.id, "--org", org.id, "--member", "nobody@example.com", check=False)
    assert unknown.returncode == 1 and "give a member's ID or address" in unknown.stderr
    # Only a member whose role may approve orders decides (ADMIN): a VIEWER or MEMBER is refused,
    # and nothing changes (the CLI approved for any member of the organization).
    for role in ("VIEWER", "MEMBER"):
        added = cli("members", "add", "--org", org.id, "--email", f"{role.lower()}-{big.id.lower()}@example.com",
                    "--role", role)
        assert added.returncode == 0, added.stderr
        refused = cli("orders", "approve", big.id, "--org", org.id, "--member", f"{role.lower()}-{big.id.lower()}"
                      "@example.com", check=False)
        assert refused.returncode == 1 and "may approve orders" in refused.stderr, refused.stderr
        assert api.get_order(big.id).order.status == "PENDING APPROVAL"
    by_address = org.member_email.upper()  # a member's address works as well as the ID
    decided = json.loads(cli("orders", "approve", big.id, "--org", org.id, "--member", by_address, "--json").stdout)
    assert decided["order"]["status"] == "EXECUTED"
    again = cli("orders", "reject", big.id, "--org", org.id, "--member", member, check=False)
    assert again.returncode != 0 and "EXECUTED" in again.stderr
    assert api.get_order(big.id).order.status == "EXECUTED"
    assert cli("ledger", "verify", check=False).returncode == 0


def test_a_yen_threshold_is_whole_yen(engine, server, cli):
    """--above is in the organization's currency and its decimals: 100.50 JPY is refused (it
    was stored), 100 JPY is taken."""
    from tests.yen_kit import yen_org

    yen = yen_org(engine, server.url)
    refused = cli("org", "approvals", "--org", yen.id, "--above", "100.50", check=False)
    assert refused.returncode == 1 and "whole units" in refused.stderr, refused.stderr
    assert json.loads(cli("org", "approvals", "--org", yen.id, "--json").stdout)["mode"] == "off"
    shown = cli("org", "approvals", "--org", yen.id, "--above", "100").stdout
    assert "orders above 100 JPY need approval" in shown, shown
    policy = json.loads(cli("org", "approvals", "--org", yen.id, "--json").stdout)
    assert (policy["mode"], policy["above"], policy["currency_code"]) == ("above", "100", "JPY")


def test_create_order_request_through_client_is_unchanged_by_replay(org, api, engine):
    set_policy(engine, org, "api")
    body = {**order_body(org.member_email), "external_id": unique("client-")}
    first = api.create_order(CreateOrderRequest(SingleRewardOrder.from_dict(body))).order
    again = api.create_order(CreateOrderRequest(SingleRewardOrder.from_dict(body))).order
    assert again.id == first.id and again.status == "PENDING APPROVAL"


def test_fees_are_held_and_given_back_and_scheduled_rewards_wait_for_their_day(org, api, http, engine):
    from largesse.orgs.models import organizations

    with db.write(engine) as conn:
        conn.execute(organizations.update().where(organizations.c.id == org.id)
                     .values(fee_basis_points=250, fee_flat_cents=50))
    set_policy(engine, org, "all")
    before = available_cents(http)
    day = (utcnow() + timedelta(days=5)).date()
    scheduled = ok(http.post("/orders", json={**order_body(org.member_email, denomination=40,
                                                           deliver_at=f"{day.isoformat()}T00:00:00.000Z"),
                                              "external_id": unique("sched-")}))["order"]
    rejected = ok(http.post("/orders", json=order_body(org.member_email, denomination=20)))["order"]
    assert scheduled["payment"]["total"] == 41.5 and rejected["payment"]["total"] == 21
    assert scheduled["rewards"][0]["delivery"]["status"] == "PENDING"
    assert meta(http)["pending_cents"] == 4150 + 2100
    assert api.reject_order(rejected["id"]).order.payment.refund.total == 21
    approved = api.approve_order(scheduled["external_id"]).order  # an external_id names the order too
    assert approved.id == scheduled["id"] and approved.rewards[0].delivery.status == "SCHEDULED"
    assert approved.rewards[0].deliver_at == day
    assert available_cents(http) == before - 4150 and meta(http)["pending_cents"] == 0
    assert findings(engine, org) == []
