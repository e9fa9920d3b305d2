"""Approvals in the dashboard over HTTP: the queue, approve and reject as a member (the same
service as POST /order_approvals/{id}/approve|reject), who decided and when, the overview's
count, the policy form (administrators), scoping, roles and CSRF."""

from __future__ import annotations

import re

from largesse import db
from largesse.orders import approvals
from largesse.orders.models import orders
from tests.dashboard.conftest import add_member, csrf_of, member_id, signed_in, text_of
from tests.factories import available_cents, ok, place


def set_policy(engine, org_id: str, mode: str, **kwargs):
    with db.write(engine) as conn:
        return approvals.set_policy(conn, org_id, mode=mode, **kwargs)


def post(client, page_path: str, action: str, data: dict):
    page = client.get(page_path)
    assert page.status_code == 200, page.text
    return client.post(action, data={"csrf_token": csrf_of(page.text), **data})


def waiting_order(engine, org, http, denomination=40) -> dict:
    set_policy(engine, org.id, "api")
    order = place(http, org.member_email, denomination=denomination)
    assert order["status"] == "PENDING APPROVAL"
    return order


def test_queue_approve_shows_who_and_when(admin, engine, org, http):
    order = waiting_order(engine, org, http)
    text = text_of(admin.get("/dashboard").text)
    assert "Orders waiting for approval" in text and "1 order waiting for approval" in text
    # The orders lists say which orders wait (they looked like any other).
    assert f"{order['id']} " in text and "Pending approval" in text
    assert "Pending approval" in text_of(admin.get("/dashboard/orders").text)
    page = admin.get("/dashboard/approvals")
    assert page.status_code == 200
    text = text_of(page.text)
    assert order["id"] in text and "40.00 USD" in text and f"Approve order {order['id']}" in text

    response = post(admin, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/approve", {})
    assert response.status_code == 303
    text = text_of(admin.get(response.headers["location"]).text)
    assert f"Order {order['id']} approved by {org.member_email} at " in text
    assert "No order is waiting for approval" in text
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "EXECUTED"
    with db.read(engine) as conn:
        row = conn.execute(orders.select().where(orders.c.id == order["id"])).one()
    assert row.approved_by_member_id == member_id(engine, org.id, org.member_email) and row.approved_by_key_id is None
    order_page = text_of(admin.get(f"/dashboard/orders/{order['id']}").text)
    assert f"Approved by {org.member_email}" in order_page
    assert "waiting for approval" not in text_of(admin.get("/dashboard").text)

    # A second decision on the same order is the service's 422, shown on the page; nothing changes.
    response = post(admin, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/reject", {})
    assert response.status_code == 422
    assert "only a PENDING APPROVAL order can be rejected" in text_of(response.text)
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "EXECUTED"


def test_reject_refunds_the_whole_total(admin, engine, org, http):
    before = available_cents(http)
    order = waiting_order(engine, org, http, denomination=30)
    assert available_cents(http) == before - 3000
    response = post(admin, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/reject", {})
    assert response.status_code == 303
    text = text_of(admin.get(response.headers["location"]).text)
    assert f"Order {order['id']} rejected by {org.member_email}" in text
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "CANCELED"
    assert available_cents(http) == before


def test_dashboard_decides_even_when_api_keys_may_not(admin, engine, org, http):
    order = waiting_order(engine, org, http)
    set_policy(engine, org.id, "api", api_allowed=False)
    assert http.post(f"/order_approvals/{order['id']}/approve").status_code == 403
    response = post(admin, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/approve", {})
    assert response.status_code == 303


def test_policy_form_sets_the_organizations_policy(admin, engine, org, http):
    page = text_of(admin.get("/dashboard/approvals").text)
    assert "Approval policy" in page and "Save approval policy" in page
    response = post(admin, "/dashboard/approvals", "/dashboard/approvals/policy",
                    {"mode": "above", "above": "100.50", "api_allowed": "yes"})
    assert response.status_code == 303
    assert "Approval policy saved" in text_of(admin.get(response.headers["location"]).text)
    with db.read(engine) as conn:
        assert approvals.get_policy(conn, org.id) == approvals.Policy("above", 10050, True)
    assert place(http, org.member_email, denomination=100)["status"] == "EXECUTED"
    assert place(http, org.member_email, denomination=101)["status"] == "PENDING APPROVAL"

    for bad in ({"mode": "above", "above": "lots"}, {"mode": "above", "above": "1.234"}, {"mode": "sometimes"}):
        response = post(admin, "/dashboard/approvals", "/dashboard/approvals/policy", bad)
        assert response.status_code == 400, bad
    assert "Amount: must be a number like 25, 25.50 or 1,000.50" in text_of(
        post(admin, "/dashboard/approvals", "/dashboard/approvals/policy", {"mode": "above", "above": "x"}).text)
    # The dashboard's one amount rule: a comma separates thousands only, and what was typed stays.
    refused = post(admin, "/dashboard/approvals", "/dashboard/approvals/policy", {"mode": "above", "above": "7,5"})
    assert refused.status_code == 400 and "Amount: use a dot for decimals: 7.50" in text_of(refused.text)
    assert 'name="above" inputmode="decimal" maxlength="20" value="7,5"' in refused.text
    assert re.search(r'id="mode-above" name="mode" value="above" checked', refused.text)
    response = post(admin, "/dashboard/approvals", "/dashboard/approvals/policy",
                    {"mode": "above", "above": "1,000.50"})
    assert response.status_code == 303
    with db.read(engine) as conn:
        assert approvals.get_policy(conn, org.id).above_cents == 100050
    response = post(admin, "/dashboard/approvals", "/dashboard/approvals/policy", {"mode": "off"})
    assert response.status_code == 303
    with db.read(engine) as conn:
        assert approvals.get_policy(conn, org.id) == approvals.Policy("off", None, False)


def test_member_role_may_not_approve_or_set_the_policy(member_client, engine, org, http):
    order = waiting_order(engine, org, http)
    assert member_client.get("/dashboard/approvals").status_code == 403
    assert "Approvals" not in text_of(member_client.get("/dashboard").text)
    for action, data in ((f"/dashboard/approvals/{order['id']}/approve", {}),
                         (f"/dashboard/approvals/{order['id']}/reject", {}),
                         ("/dashboard/approvals/policy", {"mode": "off"})):
        assert post(member_client, "/dashboard", action, data).status_code == 403, action
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "PENDING APPROVAL"
    with db.read(engine) as conn:
        assert approvals.get_policy(conn, org.id).mode == "api"


def test_another_orgs_order_is_not_found(admin, engine, other_org):
    with other_org.http() as other:
        order = waiting_order(engine, other_org, other)
        response = post(admin, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/approve", {})
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("text/html")
        assert order["id"] not in admin.get("/dashboard/approvals").text
        assert ok(other.get(f"/orders/{order['id']}"))["order"]["status"] == "PENDING APPROVAL"


def test_decisions_without_csrf_are_refused(admin, engine, org, http):
    order = waiting_order(engine, org, http)
    for action in (f"/dashboard/approvals/{order['id']}/approve", "/dashboard/approvals/policy"):
        response = admin.post(action, data={"mode": "off"})
        assert response.status_code == 403 and "Please try again" in text_of(response.text)
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["status"] == "PENDING APPROVAL"


def test_a_second_admin_sees_who_decided(engine, server, org, http):
    order = waiting_order(engine, org, http)
    mid, email = add_member(engine, org.id, role="ADMIN")
    second = signed_in(engine, server.url, org.id, mid)
    try:
        response = post(second, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/approve", {})
        assert response.status_code == 303
        assert f"Approved by {email}" in text_of(second.get(f"/dashboard/orders/{order['id']}").text)
    finally:
        second.close()


def test_new_pages_answer_with_a_strict_csp(admin):
    for path in ("/dashboard/approvals", "/dashboard/funding/invoices", "/dashboard/funding/topups",
                 "/dashboard/reports"):
        response = admin.get(path)
        assert response.status_code == 200, path
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert "<script>" not in response.text and " style=" not in response.text, path


def test_a_waiting_orders_rewards_offer_no_cancel(engine, org, http, make_server):
    """Cancel refuses them (rejecting the order refunds them): the page offered a button that
    could only fail, on a server that lets any unredeemed reward be canceled."""
    server = make_server(cancel_any_unredeemed=True)
    order = waiting_order(engine, org, http)
    reward_path = f"/dashboard/rewards/{order['rewards'][0]['id']}"
    admin = signed_in(engine, server.url, org.id, member_id(engine, org.id, org.member_email))
    try:
        assert "Cancel reward" not in admin.get(reward_path).text
        assert post(admin, "/dashboard/approvals", f"/dashboard/approvals/{order['id']}/approve", {}).status_code == 303
        assert "Cancel reward" in admin.get(reward_path).text  # approved: any unredeemed reward now
    finally:
        admin.close()
