"""cancel, generate_link and expiry: refunds exactly once, whatever the races. A reward can be
canceled only once its delivery failed (API.md §2.5), unless LARGESSE_CANCEL_ANY_UNREDEEMED=1."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from largesse import db
from largesse.delivery import service
from largesse.delivery.models import jobs
from largesse.funding.models import ledger_entries
from largesse.orders.models import rewards
from largesse.redemption import tokens
from largesse.redemption.models import redemption_tokens
from largesse.timeutil import utcnow
from tests.conftest import failing
from tests.delivery.conftest import job_rows, reward_row
from tests.factories import available_cents, error, make_campaign, ok, place


def _refunds(engine, reward_id: str) -> list[int]:
    with db.read(engine) as conn:
        return list(conn.execute(select(ledger_entries.c.amount_cents).where(
            ledger_entries.c.reward_id == reward_id, ledger_entries.c.kind == "reward_refund")).scalars())


def _set_reward(engine, reward_id: str, **values) -> None:
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward_id).values(**values))


def test_cancel_refunds_value_and_fee_once(org, http, api, cli, engine, deliver):
    from tremendous.exceptions import UnprocessableEntityException

    cli("org", "fees", "--org", org.id, "--basis-points", "200", "--flat", "0.50")
    before = available_cents(http)
    order = place(http, failing(org.member_email), denomination=20)
    reward_id = order["rewards"][0]["id"]
    assert available_cents(http) == before - 2000 - 40 - 50
    deliver()
    assert api.get_reward(reward_id).reward.delivery.status == "FAILED"

    assert api.cancel_reward(reward_id) == {}
    assert available_cents(http) == before
    assert _refunds(engine, reward_id) == [2090]
    row = reward_row(engine, reward_id)
    assert row.status == "CANCELED" and row.canceled_at is not None
    got = ok(http.get(f"/orders/{order['id']}"))["order"]
    assert got["payment"]["refund"] == {"total": 20.9, "currency_code": "USD"}
    assert api.get_order(order["id"]).order.payment.refund.total == 20.9

    with pytest.raises(UnprocessableEntityException) as caught:
        api.cancel_reward(reward_id)
    assert "already canceled" in caught.value.data.errors.message
    assert _refunds(engine, reward_id) == [2090]
    assert "ledger OK" in cli("ledger", "verify").stdout


def test_cancel_only_after_a_failed_delivery(org, http, api, engine, deliver):
    # API.md §2.5: "cancel only works on non-expired rewards with a delivery failure".
    from tremendous.exceptions import UnprocessableEntityException

    before = available_cents(http)
    pending = place(http, org.member_email)["rewards"][0]["id"]
    link = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    with pytest.raises(UnprocessableEntityException) as refused:
        api.cancel_reward(pending)
    assert refused.value.data.errors.payload == {"id": ["its delivery has not failed (delivery PENDING)"]}
    deliver()
    assert api.get_reward(pending).reward.delivery.status == "SUCCEEDED"
    for reward_id in (pending, link):
        assert "has not failed" in error(http.post(f"/rewards/{reward_id}/cancel"), 422)["message"]
        assert reward_row(engine, reward_id).status == "ACTIVE" and _refunds(engine, reward_id) == []
    assert available_cents(http) == before - 5000


def test_cancel_any_unredeemed_reward_when_the_server_allows_it(org, make_server, engine):
    server = make_server(cancel_any_unredeemed=True)
    with org.http() as client:
        client.base_url = f"{server.url}/api/v2"
        reward_id = place(client, org.member_email)["rewards"][0]["id"]
        assert reward_row(engine, reward_id).delivery_status == "PENDING"
        ok(client.post(f"/rewards/{reward_id}/cancel"))
    assert reward_row(engine, reward_id).status == "CANCELED" and _refunds(engine, reward_id) == [2500]
    assert [j.status for j in job_rows(engine, reward_id)] == ["done"]  # the email will not go out


def test_concurrent_cancels_refund_once(org, engine, deliver):
    reward_id = place(org.http(), failing(org.member_email))["rewards"][0]["id"]
    deliver()
    barrier = threading.Barrier(8)

    def cancel(_):
        with org.http() as client:
            barrier.wait()
            return client.post(f"/rewards/{reward_id}/cancel").status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(cancel, range(8)))
    assert statuses == [200] + [422] * 7
    assert _refunds(engine, reward_id) == [2500]


def test_cancel_refused_for_redeemed_and_expired_rewards(org, http, engine):
    redeemed = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    _set_reward(engine, redeemed, status="REDEEMED", redeemed_at=utcnow())
    assert "redeemed" in error(http.post(f"/rewards/{redeemed}/cancel"), 422)["message"]
    late = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    _set_reward(engine, late, expires_at=utcnow() - timedelta(seconds=1))
    assert "expired" in error(http.post(f"/rewards/{late}/cancel"), 422)["message"]
    assert _refunds(engine, redeemed) == [] and _refunds(engine, late) == []
    # A REDEEMED reward without a payout is a finding of `ledger verify`: leave a consistent database.
    _set_reward(engine, redeemed, status="ACTIVE", redeemed_at=None)


def test_an_expired_reward_whose_delivery_failed_is_not_canceled(org, http, engine, deliver, make_server):
    """API.md §2.5: cancel works on non-expired rewards only. A reward whose delivery FAILED
    (the one cancelable kind) but whose expiry has passed (the sweep has not stored it yet) is
    refused and refunds nothing; so is any expired unredeemed reward on a server that cancels
    those whatever their delivery (LARGESSE_CANCEL_ANY_UNREDEEMED)."""
    failed = place(http, failing(org.member_email))["rewards"][0]["id"]
    deliver()
    assert reward_row(engine, failed).delivery_status == "FAILED"
    pending = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    for reward_id in (failed, pending):
        _set_reward(engine, reward_id, expires_at=utcnow() - timedelta(seconds=1))
    before = available_cents(http)
    assert error(http.post(f"/rewards/{failed}/cancel"), 422)["payload"] == {"id": ["it has expired"]}
    server = make_server(cancel_any_unredeemed=True)
    with org.http() as client:
        client.base_url = f"{server.url}/api/v2"
        for reward_id in (failed, pending):
            assert error(client.post(f"/rewards/{reward_id}/cancel"), 422)["payload"] == {"id": ["it has expired"]}
    for reward_id in (failed, pending):
        assert reward_row(engine, reward_id).status == "ACTIVE" and _refunds(engine, reward_id) == []
    assert available_cents(http) == before


def test_other_organizations_rewards_are_404(org, other_org, http):
    reward_id = place(http, org.member_email)["rewards"][0]["id"]
    with other_org.http() as other:
        for action in ("cancel", "resend", "generate_link"):
            error(other.post(f"/rewards/{reward_id}/{action}"), 404)
    error(http.post("/rewards/NOSUCHREWARD1/cancel"), 404)


def test_generate_link_for_link_rewards_only(org, http, api, engine):
    from tremendous.exceptions import ForbiddenException

    created = place(http, org.member_email, method="LINK")["rewards"][0]
    first = created["delivery"]["link"]
    generated = api.generate_reward_link(created["id"]).reward
    assert generated.id == created["id"] and generated.link != first and "/redeem/" in generated.link
    with db.read(engine) as conn:  # both links work: the first may already be in the recipient's hands
        assert tokens.reward_for(conn, first.rsplit("/", 1)[1], "sandbox") == created["id"]
        assert tokens.reward_for(conn, generated.link.rsplit("/", 1)[1], "sandbox") == created["id"]
    email_reward = place(http, org.member_email)["rewards"][0]["id"]
    with pytest.raises(ForbiddenException):
        api.generate_reward_link(email_reward)
    error(http.post(f"/rewards/{email_reward}/generate_link"), 403)


def test_generate_link_refused_for_canceled_and_expired_rewards(org, http, api, engine):
    """Their links show only "canceled" or "expired" (410): no new one is issued (403, which the
    client decodes); a redeemed reward's link still shows its payout."""
    from tremendous.exceptions import ForbiddenException

    canceled = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    _set_reward(engine, canceled, status="CANCELED")
    with pytest.raises(ForbiddenException):
        api.generate_reward_link(canceled)
    late = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    _set_reward(engine, late, expires_at=utcnow() - timedelta(seconds=1))
    assert "expired" in error(http.post(f"/rewards/{late}/generate_link"), 403)["message"]
    with db.read(engine) as conn:
        issued = conn.execute(select(func.count()).select_from(redemption_tokens)
                              .where(redemption_tokens.c.reward_id.in_([canceled, late]))).scalar_one()
    assert issued == 2  # the two of the orders' responses, no more
    redeemed = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    _set_reward(engine, redeemed, status="REDEEMED", redeemed_at=utcnow())
    assert "/redeem/" in api.generate_reward_link(redeemed).reward.link
    # No payout or refund behind these: leave a database `ledger verify` finds consistent.
    _set_reward(engine, redeemed, status="ACTIVE", redeemed_at=None)
    _set_reward(engine, canceled, status="ACTIVE")


def test_expiry_sweep_expires_and_refunds_once(org, http, cli, fast, drain, engine):
    assert "reward expiry of organization" in cli("org", "settings", "--org", org.id).stdout  # shows, changes nothing
    assert "not set" in cli("org", "settings", "--org", org.id).stdout
    both = cli("org", "settings", "--org", org.id, "--reward-expiry-days", "2", "--no-reward-expiry", check=False)
    assert both.returncode == 1 and "not both" in both.stderr
    cli("org", "settings", "--org", org.id, "--reward-expiry-days", "2")
    assert f"reward expiry of organization {org.id}: 2 days" in cli("org", "settings", "--org", org.id).stdout
    # A campaign without its own expiry shows the organization's, which its rewards get.
    campaign = make_campaign(http)["id"]
    shown = cli("org", "settings", "--org", org.id, "--campaign", campaign).stdout
    assert f"campaign {campaign}: not set, so the organization's 2 days apply" in shown, shown
    before = available_cents(http)
    reward = place(http, org.member_email, method="LINK")["rewards"][0]
    row = reward_row(engine, reward["id"])
    assert timedelta(days=2) - timedelta(minutes=1) < row.expires_at - row.created_at <= timedelta(days=2)
    _set_reward(engine, reward["id"], expires_at=utcnow() - timedelta(seconds=1))
    with db.write(engine) as conn:  # make the periodic sweep due now
        conn.execute(update(jobs).where(jobs.c.dedupe_key == "expire_rewards", jobs.c.status == "queued")
                     .values(run_after=utcnow()))
    drain(fast())
    assert reward_row(engine, reward["id"]).status == "EXPIRED"
    assert available_cents(http) == before and _refunds(engine, reward["id"]) == [2500]
    assert "expired" in error(http.post(f"/rewards/{reward['id']}/cancel"), 422)["message"]
    with db.read(engine) as conn:
        sweep = conn.execute(select(jobs).where(jobs.c.dedupe_key == "expire_rewards")).all()
    assert len(sweep) == 1 and sweep[0].status in ("queued", "running") and sweep[0].run_after > utcnow()
    assert "ledger OK" in cli("ledger", "verify").stdout
    cli("org", "settings", "--org", org.id, "--no-reward-expiry")
    assert place(http, org.member_email, method="LINK")["rewards"][0]["expires_at"] is None


def test_concurrent_sweeps_and_cancel_refund_once(org, http, engine):
    ids = [r["id"] for r in ok(http.post("/orders", json={
        "payment": {"funding_source_id": "balance"},
        "rewards": [{"value": {"denomination": 5}, "recipient": {"name": "R", "email": org.member_email},
                     "delivery": {"method": "LINK"}, "products": ["PGCNWBOOKS01US"]} for _ in range(6)],
    }))["order"]["rewards"]]
    past = utcnow() - timedelta(seconds=1)
    for reward_id in ids:
        _set_reward(engine, reward_id, expires_at=past)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(service.expire_due, engine) for _ in range(3)]
        futures.append(pool.submit(lambda: _try_cancel(engine, org.id, ids[0])))
        [f.result() for f in futures]
    with db.read(engine) as conn:
        counts = dict(conn.execute(
            select(ledger_entries.c.reward_id, func.count()).where(ledger_entries.c.reward_id.in_(ids))
            .group_by(ledger_entries.c.reward_id)).all())
    assert counts == {reward_id: 1 for reward_id in ids}
    assert {reward_row(engine, i).status for i in ids} == {"EXPIRED"}


def _try_cancel(engine, org_id: str, reward_id: str):
    from largesse.errors import Unprocessable

    try:
        # any_delivery: these LINK rewards never fail delivery; the race is cancel against expiry.
        return service.cancel_reward(engine, org=org_id, reward_id=reward_id, any_delivery=True)
    except Unprocessable:
        return 0
