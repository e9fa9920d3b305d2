"""An order's links as CSV (UX audit: a CSV order of LINK rewards never showed its links), over
HTTP on both databases: one fresh working link per active LINK reward, earlier links still
valid, formula-looking names neutralised, refused while the order waits for approval, another
organization's order 404, a role without "send" 403."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import httpx
from sqlalchemy import func, select, update

from largesse import db
from largesse.orders.models import rewards
from largesse.redemption.models import redemption_tokens
from largesse.timeutil import utcnow
from tests.dashboard.conftest import add_member, signed_in, text_of
from tests.dashboard.test_pages import post, upload
from tests.factories import CHARITY_USD, ok, place

COLUMNS = ["reward_id", "recipient_name", "recipient_email", "amount", "currency", "link"]


def token_count(engine, reward_ids) -> int:
    with db.read(engine) as conn:
        return conn.execute(select(func.count()).select_from(redemption_tokens)
                            .where(redemption_tokens.c.reward_id.in_(list(reward_ids)))).scalar_one()


def csv_order(admin, org, names: list[str]) -> str:
    rows = "".join(f"{name},{org.member_email},{i + 1}\n" for i, name in enumerate(names))
    location = upload(admin, "name,email,amount\n" + rows, products=CHARITY_USD, method="LINK").headers["location"]
    placed = post(admin, location, location, {})
    assert placed.status_code == 303, text_of(placed.text)[:500]
    return placed.headers["location"].rsplit("/", 1)[1]


def download(client, order_id: str) -> httpx.Response:
    path = f"/dashboard/orders/{order_id}"
    return post(client, path, f"{path}/links", {})


def test_a_csv_order_of_link_rewards_downloads_one_working_link_per_reward(admin, http, org, engine, server):
    names = ["=HYPERLINK(1)", "+Ada", "@Bo", "-Cy", "Dee"]
    order_id = csv_order(admin, org, names)
    reward_ids = [r["id"] for r in ok(http.get(f"/orders/{order_id}"))["order"]["rewards"]]
    page = admin.get(f"/dashboard/orders/{order_id}").text
    form = re.search(r'<form method="post" action="/dashboard/orders/' + order_id + r'/links"[^>]*>', page)
    assert form and "data-confirm=" in form.group(0) and "Earlier links keep working" in form.group(0)
    assert "Download links (CSV)" in page
    # One reward past its expiry: left out (generate_link refuses it too).
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward_ids[-1])
                     .values(expires_at=utcnow() - timedelta(minutes=1)))
    tokens_before = token_count(engine, reward_ids)

    response = download(admin, order_id)
    assert response.status_code == 200, text_of(response.text)[:500]
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"] == f'attachment; filename="order-{order_id}-links.csv"'
    assert response.headers["cache-control"] == "no-store"
    table = list(csv.reader(io.StringIO(response.text)))
    assert table[0] == COLUMNS
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in table[1:]]
    assert [r["reward_id"] for r in rows] == reward_ids[:4]  # one row per active LINK reward
    assert sorted(r["recipient_name"] for r in rows) == sorted(["'=HYPERLINK(1)", "'+Ada", "'@Bo", "'-Cy"])
    assert {r["recipient_email"] for r in rows} == {org.member_email}
    assert sorted(r["amount"] for r in rows) == ["1.00", "2.00", "3.00", "4.00"]
    assert {r["currency"] for r in rows} == {"USD"}
    for row in rows:
        assert re.fullmatch(re.escape(server.url) + r"/redeem/[A-Za-z0-9_\-]+", row["link"]), row
        assert httpx.get(row["link"]).status_code == 200  # the redemption page
    assert token_count(engine, reward_ids) == tokens_before + 4  # only the new tokens' hashes

    # Each download issues new links; the earlier ones keep working.
    again = list(csv.DictReader(io.StringIO(download(admin, order_id).text)))
    assert len(again) == 4 and {r["link"] for r in again}.isdisjoint({r["link"] for r in rows})
    assert httpx.get(rows[0]["link"]).status_code == 200


def test_an_order_pending_approval_gets_no_links(admin, http, org, engine):
    from largesse.orders import approvals

    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
    waiting = place(http, org.member_email, method="LINK")
    assert waiting["status"] == "PENDING APPROVAL"
    path = f"/dashboard/orders/{waiting['id']}"
    assert "available once the order is approved" in text_of(admin.get(path).text)
    before = token_count(engine, [waiting["rewards"][0]["id"]])
    response = download(admin, waiting["id"])
    assert response.status_code == 403 and response.headers["content-type"].startswith("text/html")
    assert f"Order {waiting['id']} is pending approval; links are available once the order is approved" in \
        text_of(response.text)
    assert token_count(engine, [waiting["rewards"][0]["id"]]) == before


def test_a_reward_of_an_order_pending_approval_offers_no_link_nor_cancel(admin, member_client, http, org, engine):
    """The reward's page follows its order page (and generate_link's rule): it says the order
    waits for approval and offers neither "Generate a new link" nor cancel; once approved, the
    link button is back."""
    from largesse.orders import approvals

    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
    waiting = place(http, org.member_email, method="LINK")
    reward_id = waiting["rewards"][0]["id"]
    path = f"/dashboard/rewards/{reward_id}"
    for client in (admin, member_client):
        page = client.get(path)
        assert page.status_code == 200
        text = text_of(page.text)
        assert f"Its order {waiting['id']} is pending approval" in text and "Order pending approval" in text
        assert "available once its order is approved" in text
        assert f"{path}/link" not in page.text and "Generate a new link" not in text
        assert f"{path}/cancel" not in page.text and "can be canceled once" not in text
    approved = post(admin, "/dashboard/approvals", f"/dashboard/approvals/{waiting['id']}/approve", {})
    assert approved.status_code == 303, text_of(approved.text)[:500]
    page = admin.get(path)
    assert "pending approval" not in text_of(page.text) and f'action="{path}/link"' in page.text


def test_another_orgs_order_is_not_found(admin, other_org, engine):
    with other_org.http() as other:
        order = place(other, other_org.member_email, method="LINK")
    before = token_count(engine, [order["rewards"][0]["id"]])
    response = post(admin, "/dashboard", f"/dashboard/orders/{order['id']}/links", {})
    assert response.status_code == 404 and "text/csv" not in response.headers["content-type"]
    assert token_count(engine, [order["rewards"][0]["id"]]) == before


def test_links_need_the_send_action(engine, server, org, http, member_client):
    order = place(http, org.member_email, method="LINK")
    path = f"/dashboard/orders/{order['id']}"
    mid, _ = add_member(engine, org.id, role="VIEWER")
    viewer = signed_in(engine, server.url, org.id, mid)
    try:
        assert "Download links (CSV)" not in viewer.get(path).text
        before = token_count(engine, [order["rewards"][0]["id"]])
        response = download(viewer, order["id"])
        assert response.status_code == 403 and "does not allow" in text_of(response.text)
        assert token_count(engine, [order["rewards"][0]["id"]]) == before
    finally:
        viewer.close()
    # A MEMBER may, as they may "Generate a new link".
    response = download(member_client, order["id"])
    assert response.status_code == 200 and len(list(csv.DictReader(io.StringIO(response.text)))) == 1


def test_an_order_without_active_link_rewards_says_so(admin, http, org):
    email_order = place(http, org.member_email)
    assert "Download links (CSV)" not in admin.get(f"/dashboard/orders/{email_order['id']}").text
    response = download(admin, email_order["id"])
    assert response.status_code == 403 and "has no active LINK reward" in text_of(response.text)
