"""A reward past its expires_at is EXPIRED everywhere before the expiry sweep has stored it
(orders/lifecycle.status): the API's reward, order and list forms, the reports' reward_status,
and its link (410), alike."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select, update
from tremendous import CreateReportRequest

from largesse import db
from largesse.delivery import jobs as job_queue
from largesse.delivery import service as delivery
from largesse.orders import approvals
from largesse.orders.models import rewards
from largesse.reports import generate
from largesse.timeutil import utcnow
from tests.factories import ok, place
from tests.fraud.conftest import refund_count
from tests.redemption.conftest import page_client


def backdate(engine, reward_id: str) -> None:
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward_id)
                     .values(expires_at=utcnow() - timedelta(seconds=1)))


def stored_status(engine, reward_id: str) -> str:
    with db.read(engine) as conn:
        return conn.execute(select(rewards.c.status).where(rewards.c.id == reward_id)).scalar_one()


EXPIRED = {"status": "EXPIRED", "redeemed_at": None, "canceled_at": None}


def test_a_reward_past_its_expiry_reads_expired_before_the_sweep(org, http, engine, cli):
    order = place(http, org.member_email, method="LINK")
    reward = order["rewards"][0]
    live = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    assert ok(http.get(f"/rewards/{reward['id']}"))["reward"].get("redemption") is None
    backdate(engine, reward["id"])

    got = ok(http.get(f"/rewards/{reward['id']}"))["reward"]
    assert got["redemption"] == EXPIRED
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["rewards"][0]["redemption"] == EXPIRED
    listed = {r["id"]: r for r in ok(http.get("/rewards"))["rewards"]}
    assert listed[reward["id"]]["redemption"] == EXPIRED and "redemption" not in listed[live]
    with page_client() as client:
        assert client.get(reward["delivery"]["link"]).status_code == 410  # what its link said already
    assert stored_status(engine, reward["id"]) == "ACTIVE" and refund_count(engine, reward["id"]) == 0

    # The sweep stores it and refunds it; the API's answer does not change.
    delivery.expire_due(engine)
    assert stored_status(engine, reward["id"]) == "EXPIRED" and refund_count(engine, reward["id"]) == 1
    assert ok(http.get(f"/rewards/{reward['id']}"))["reward"] == got
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "EXECUTED"  # expiry keeps the order
    cli("ledger", "verify")


def run_report_job(engine, settings, org_id: str) -> None:
    """Run the organization's queued generate_report jobs, and no other job (the expiry sweep
    among them): claim the mail lane, give back what is not the report's, run the report's."""
    from largesse.delivery import tasks
    from largesse.delivery.transport import open_transport

    ctx = tasks.Context(engine, settings, "report-only-worker", open_transport(settings))
    try:
        for _ in range(20):
            claimed = job_queue.claim(engine, ctx.worker_id, limit=20, lease_seconds=30, lane=job_queue.MAIL)
            mine = [r for r in claimed if r.kind == "generate_report" and r.organization_id == org_id]
            job_queue.release(engine, ctx.worker_id, [r.id for r in claimed if r not in mine])
            if not mine:
                return
            for row in mine:
                generate.generate_report(ctx, row)
    finally:
        ctx.transport.close()


def test_a_report_shows_a_reward_past_its_expiry_as_expired_before_the_sweep(org, api, http, engine,
                                                                              base_settings, deliver):
    deliver()  # earlier tests' due jobs: the claims below find this organization's report
    expired = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    live = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
    waiting = place(http, org.member_email, method="LINK")
    assert waiting["status"] == "PENDING APPROVAL"
    for reward_id in (expired, waiting["rewards"][0]["id"]):
        backdate(engine, reward_id)

    report_id = api.create_report(CreateReportRequest.from_dict(
        {"report_type": "digital_rewards", "format": "csv"})).report.id
    run_report_job(engine, base_settings, org.id)
    report = api.get_report(report_id).report
    assert report.status == "READY_FOR_DOWNLOAD"
    response = httpx.get(report.url, timeout=30)
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.text)))
    status = {row["reward_id"]: row["reward_status"] for row in rows}
    # A waiting order's rewards never expire (docs/approvals.md): their expiry starts at approval.
    assert status == {expired: "EXPIRED", live: "ACTIVE", waiting["rewards"][0]["id"]: "ACTIVE"}
    assert stored_status(engine, expired) == "ACTIVE"  # no sweep ran
    # The API says the same of the waiting order's reward (it read EXPIRED, then ACTIVE again
    # once the order was approved and its expiry moved).
    waiting_reward = waiting["rewards"][0]["id"]
    assert "redemption" not in ok(http.get(f"/rewards/{waiting_reward}"))["reward"]
    assert "redemption" not in ok(http.get(f"/orders/{waiting['id']}"))["order"]["rewards"][0]
    listed = {r["id"]: r for r in ok(http.get("/rewards"))["rewards"]}
    assert "redemption" not in listed[waiting_reward] and listed[expired]["redemption"]["status"] == "EXPIRED"


def test_a_reward_that_cannot_expire_does_not_stop_the_others(org, http, engine, cli):
    """The sweep took rewards in expires_at order and ended at the first whose expiry failed:
    every reward of every organization after it stayed unrefunded, run after run. A trigger
    (a real database error) makes the first one fail; the next is refunded and the run reports it."""
    first, second = (place(http, org.member_email, method="LINK")["rewards"][0]["id"] for _ in range(2))
    backdate(engine, first)
    backdate(engine, second)
    sqlite = engine.dialect.name == "sqlite"
    with db.write(engine) as conn:
        if sqlite:
            conn.exec_driver_sql(f"CREATE TRIGGER poisoned BEFORE UPDATE ON rewards WHEN NEW.id = '{first}' "
                                 "BEGIN SELECT RAISE(ABORT, 'poisoned'); END")
        else:
            conn.exec_driver_sql("CREATE FUNCTION poisoned() RETURNS trigger LANGUAGE plpgsql AS "
                                 "$$ BEGIN RAISE EXCEPTION 'poisoned'; END $$")
            conn.exec_driver_sql(f"CREATE TRIGGER poisoned BEFORE UPDATE ON rewards FOR EACH ROW "
                                 f"WHEN (NEW.id = '{first}') EXECUTE FUNCTION poisoned()")
    try:
        with pytest.raises(delivery.ExpiryFailed, match="1 reward"):
            delivery.expire_due(engine)
        assert (stored_status(engine, first), refund_count(engine, first)) == ("ACTIVE", 0)
        assert (stored_status(engine, second), refund_count(engine, second)) == ("EXPIRED", 1)
    finally:
        with db.write(engine) as conn:
            conn.exec_driver_sql("DROP TRIGGER poisoned" if sqlite else "DROP TRIGGER poisoned ON rewards")
            if not sqlite:
                conn.exec_driver_sql("DROP FUNCTION poisoned()")
    assert delivery.expire_due(engine) >= 1  # the retry, once the fault is gone
    assert (stored_status(engine, first), refund_count(engine, first)) == ("EXPIRED", 1)
    cli("ledger", "verify")
