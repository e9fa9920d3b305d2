"""Each page over HTTP: status, redirects, the text a person sees, scoping and roles."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from largesse import db
from tests.dashboard.conftest import add_member, csrf_of, deliver_mail, signed_in, text_of
from tests.factories import CHARITY_USD, GIFT_CARD_USD, make_campaign, make_field, ok, place

ADMIN_PAGES = ("/dashboard/funding", "/dashboard/team", "/dashboard/developers", "/dashboard/campaigns/new")
VIEW_PAGES = ("/dashboard", "/dashboard/send", "/dashboard/send/bulk", "/dashboard/orders", "/dashboard/rewards",
              "/dashboard/campaigns")


def post(client, page_path: str, action: str, data: dict, files=None):
    page = client.get(page_path)
    assert page.status_code == 200, page.text
    return client.post(action, data={"csrf_token": csrf_of(page.text), **data}, files=files)


HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def hidden_fields(page: str) -> dict[str, list[str]]:
    """A form's hidden inputs (the CSRF token included), as a browser would post them."""
    fields: dict[str, list[str]] = {}
    for name, value in HIDDEN.findall(page):
        fields.setdefault(name, []).append(html.unescape(value))
    return fields


def send_one(client, data: dict, *, confirm: bool = True):
    """"Send rewards" as a person does: the form, its summary (returned when confirm is False or
    the form was refused), then the summary's Send."""
    summary = post(client, "/dashboard/send", "/dashboard/send", data)
    if not confirm or summary.status_code != 200:
        return summary
    assert "Check and send" in summary.text, text_of(summary.text)
    return client.post("/dashboard/send/confirm", data=hidden_fields(summary.text))


def test_every_page_answers_with_a_strict_csp(admin):
    for path in VIEW_PAGES + ADMIN_PAGES:
        response = admin.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/html")
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert "<script>" not in response.text and " style=" not in response.text, path


def test_a_zero_decimal_currency_is_shown_in_whole_units(engine, server):
    """Amounts are kept in hundredths in every currency: the sandbox's 500000 of a JPY balance
    are 5000 JPY, not 500000 (nor 5000.00)."""
    from largesse.orgs import service as orgs

    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Tokyo", member_email="owner@tokyo.example", member_name="Owner",
                                  sandbox=True, currency_code="JPY")
    client = signed_in(engine, server.url, created.organization_id, created.member_id)
    try:
        text = text_of(client.get("/dashboard").text)
    finally:
        client.close()
    assert "5,000 JPY" in text and "500000" not in text, text


def test_an_organization_whose_currency_no_product_offers_sends_in_another(engine, server):
    """A JPY organization (no shipped product is offered in JPY) picks the reward's currency on
    the form; the order converts it into the balance's currency, as POST /orders does with
    value.currency_code, and the summary shows both amounts."""
    from largesse.orgs import service as orgs

    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Tokyo senders", member_email="owner@tokyo-send.example",
                                  member_name="Owner", sandbox=True, currency_code="JPY")
    client = signed_in(engine, server.url, created.organization_id, created.member_id)
    try:
        form = client.get("/dashboard/send").text
        options = re.findall(r'<option value="([A-Z]{3})"( selected)?>', form)
        assert options[0] == ("JPY", " selected") and ("USD", "") in options
        data = {"name": "Owner", "email": "owner@tokyo-send.example", "amount": "10", "currency": "USD",
                "method": "EMAIL", "products": GIFT_CARD_USD, "message": ""}
        summary = send_one(client, data, confirm=False)
        text = text_of(summary.text)
        assert summary.status_code == 200 and "Reward value 10.00 USD" in text, text
        converted = re.search(r"Amount, converted ([\d,]+) JPY", text)
        charged = re.search(r"Total charged to the balance ([\d,]+) JPY", text)
        assert converted and charged, text
        placed = send_one(client, data)
        assert placed.status_code == 303, text_of(placed.text)
        order_id = placed.headers["location"].rsplit("/", 1)[1]
    finally:
        client.close()
    with httpx.Client(base_url=f"{server.url}/api/v2", headers={"Authorization": f"Bearer {created.api_key}"}) as api:
        order = ok(api.get(f"/orders/{order_id}"))["order"]
    assert order["payment"]["currency_code"] == "JPY"
    assert order["rewards"][0]["value"] == {"denomination": 10.0, "currency_code": "USD"}
    # The summary showed what the order then charged, in yen (not the 10.00 USD as "10 JPY").
    assert int(converted.group(1).replace(",", "")) == order["payment"]["subtotal"] > 100
    assert int(charged.group(1).replace(",", "")) == order["payment"]["total"]


def test_overview_shows_balance_and_this_months_rewards(admin, http, org):
    place(http, org.member_email, denomination=30)
    text = text_of(admin.get("/dashboard").text)
    assert "Available 4,970.00 USD" in text
    assert "Active 1" in text and "Recent orders" in text


def test_member_role_cannot_reach_admin_pages(member_client):
    for path in ADMIN_PAGES:
        response = member_client.get(path)
        assert response.status_code == 403, path
        assert "Your role in this organization does not allow this page" in text_of(response.text)
    for path in VIEW_PAGES:
        assert member_client.get(path).status_code == 200, path
    nav = text_of(member_client.get("/dashboard").text)
    assert "Send rewards" in nav and "Developers" not in nav and "Team" not in nav


def test_member_role_cannot_post_admin_actions(member_client, org, http):
    keys_before = len(ok(http.get("/members"))["members"])
    response = post(member_client, "/dashboard", "/dashboard/team/invite", {"email": "x@example.com", "role": "ADMIN"})
    assert response.status_code == 403
    assert len(ok(http.get("/members"))["members"]) == keys_before


def test_another_orgs_objects_are_not_found(admin, other_org):
    with other_org.http() as other:
        order = place(other, other_org.member_email)
        campaign = make_campaign(other)
    reward_id = order["rewards"][0]["id"]
    for path in (f"/dashboard/orders/{order['id']}", f"/dashboard/rewards/{reward_id}",
                 f"/dashboard/campaigns/{campaign['id']}", "/dashboard/rewards/NOSUCHREWARD00",
                 "/dashboard/no-such-page", "/dashboard/rewards/%00x"):
        response = admin.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("text/html"), path
    response = post(admin, "/dashboard", f"/dashboard/rewards/{reward_id}/cancel", {})
    assert response.status_code == 404
    with other_org.http() as other:
        assert ok(other.get(f"/rewards/{reward_id}"))["reward"].get("redemption") is None  # still active
    listed = admin.get("/dashboard/rewards").text
    assert reward_id not in listed


def test_forms_without_csrf_are_refused(admin, http, org):
    reward_id = place(http, org.member_email)["rewards"][0]["id"]
    response = admin.post(f"/dashboard/rewards/{reward_id}/cancel", data={})
    assert response.status_code == 403 and "Please try again" in text_of(response.text)
    response = admin.post(f"/dashboard/rewards/{reward_id}/cancel", data={"csrf_token": "0" * 64})
    assert response.status_code == 403
    response = admin.post(f"/dashboard/rewards/{reward_id}/cancel", data={"csrf_token": "é"})  # was a 500
    assert response.status_code == 403 and "Please try again" in text_of(response.text)
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"].get("redemption") is None


def test_a_form_sent_from_another_site_is_refused(admin, http, org, engine, server):
    """docs/redemption.md's CSRF rule on every dashboard POST: when the browser names an Origin,
    it must be this host; a missing Origin, or "null" (what browsers send under no-referrer),
    leaves the decision to the CSRF token."""
    from tests.dashboard.test_order_links import token_count

    reward_id = place(http, org.member_email, method="LINK")["rewards"][0]["id"]
    path = f"/dashboard/rewards/{reward_id}"
    before = token_count(engine, [reward_id])
    port = server.url.rsplit(":", 1)[1]
    for origin in ("http://evil.example", "https://evil.example", f"http://evil.example:{port}"):
        token = csrf_of(admin.get(path).text)
        response = admin.post(f"{path}/link", data={"csrf_token": token}, headers={"Origin": origin})
        assert response.status_code == 403 and response.headers["content-type"].startswith("text/html")
        assert "sent from another site" in text_of(response.text)
    assert token_count(engine, [reward_id]) == before
    for origin in (server.url, "null", None):
        token = csrf_of(admin.get(path).text)
        response = admin.post(f"{path}/link", data={"csrf_token": token},
                              headers={"Origin": origin} if origin else {})
        assert response.status_code == 303, text_of(response.text)
    assert token_count(engine, [reward_id]) == before + 3
    # Behind a proxy that does not forward Host: the origin of LARGESSE_PUBLIC_URL is this site.
    token = csrf_of(admin.get(path).text)
    response = admin.post(f"{path}/link", data={"csrf_token": token},
                          headers={"Origin": server.settings.public_url, "Host": "upstream.internal:8000"})
    assert response.status_code == 303, text_of(response.text)
    # The sign-in form too (no session yet): a foreign Origin is refused before anything is read.
    with httpx.Client(base_url=server.url) as client:
        token = csrf_of(client.get("/dashboard/signin").text)
        response = client.post("/dashboard/signin", data={"csrf_token": token, "email": org.member_email},
                               headers={"Origin": "http://evil.example"})
        assert response.status_code == 403 and "sent from another site" in text_of(response.text)


def test_a_filter_the_lists_cannot_read_is_a_400_naming_it(admin, http, org):
    """An unknown status or a date that is no date is refused with the field's name, never
    dropped (which listed every reward as if they matched)."""
    place(http, org.member_email)
    for path, words in (("/dashboard/rewards?status=BOGUS", 'Status: "BOGUS" is not one of'),
                        ("/dashboard/rewards?delivery=nope", 'Delivery: "NOPE" is not one of'),
                        ("/dashboard/rewards?from=2026-13-45", 'From: "2026-13-45" is not a date'),
                        ("/dashboard/rewards?to=2026-02-30", 'To: "2026-02-30" is not a date'),
                        ("/dashboard/rewards?from=2026-01-011", 'From: "2026-01-011" is not a date'),
                        ("/dashboard/orders?from=yesterday", 'From: "yesterday" is not a date'),
                        ("/dashboard/funding?to=31/12/2026", 'To: "31/12/2026" is not a date')):
        response = admin.get(path)
        assert response.status_code == 400, path
        assert words in text_of(response.text), text_of(response.text)
    assert admin.get("/dashboard/rewards?status=active&from=2020-01-01&to=2099-12-31").status_code == 200


def test_send_one_reward_looks_like_an_api_order(admin, http, org):
    response = send_one(admin, {
        "name": "Recipient", "email": org.member_email, "amount": "25", "method": "EMAIL",
        "products": GIFT_CARD_USD, "message": ""})
    assert response.status_code == 303, text_of(response.text)
    order_id = response.headers["location"].rsplit("/", 1)[1]
    page = text_of(admin.get(response.headers["location"]).text)
    assert f"Order {order_id}" in page and "25.00 USD" in page
    from_dashboard = ok(http.get(f"/orders/{order_id}"))["order"]
    from_api = place(http, org.member_email, denomination=25)

    def shape(order):
        order = {**order, "id": "X", "created_at": "X", "channel": "X", "external_id": "X"}
        order["rewards"] = [{**r, "id": "X", "order_id": "X", "created_at": "X", "expires_at": "X"}
                            for r in order["rewards"]]
        return order

    assert shape(from_dashboard) == shape(from_api)
    assert from_dashboard["channel"] == "UI" and from_api["channel"] == "API"
    assert from_dashboard["external_id"].startswith("dashboard-send-")  # the summary's idempotency token
    from tests.factories import client_order  # noqa: F401 - the official client reads it too
    org_api = org.api()
    assert org_api.get_order(order_id).order.id == order_id


def test_send_one_shows_the_apis_errors(admin, http, org):
    before = ok(http.get("/orders"))["total_count"]
    response = post(admin, "/dashboard/send", "/dashboard/send", {
        "name": "Recipient", "email": "stranger@example.com", "amount": "25", "products": GIFT_CARD_USD})
    assert response.status_code == 400
    assert "rewards can only be sent to members of your organization" in text_of(response.text)
    response = post(admin, "/dashboard/send", "/dashboard/send", {
        "name": "Recipient", "email": org.member_email, "amount": "lots", "products": GIFT_CARD_USD})
    assert response.status_code == 400 and "Amount: must be a number" in text_of(response.text)
    assert ok(http.get("/orders"))["total_count"] == before


def test_product_search_and_category_filter(admin):
    page = admin.get("/dashboard/send", params={"q": "coffee"}).text
    assert "Harbor Coffee" in page and "Northwind Books" not in page
    page = admin.get("/dashboard/send", params={"category": "charity"}).text
    assert "Harbor Coffee" not in page


def test_a_dropdowns_options_show_their_labels(admin, http):
    ok(http.post("/fields", json={"display_name": "Tier", "data_type": "Dropdown",
                                  "data": {"options": ["gold", "silver"], "labels": {"gold": "Gold tier"}}}))
    page = admin.get("/dashboard/send").text
    assert '<option value="gold">Gold tier</option>' in page and '<option value="silver">silver</option>' in page


def upload(client, content: str, **options):
    return post(client, "/dashboard/send/bulk", "/dashboard/send/bulk", {"products": GIFT_CARD_USD, **options},
                files={"file": ("people.csv", content.encode(), "text/csv")})


def test_csv_with_a_bad_row_then_fixed_places_one_order_once(admin, http, org):
    field = make_field(http, options=("Sales", "Support"), name="Department")
    email = org.member_email
    bad = f"name,email,amount,Department\nAda,{email},20,Sales\nBob,{email},abc,Support\nCy,{email},15,Legal\n"
    response = upload(admin, bad)
    assert response.status_code == 303
    preview = admin.get(response.headers["location"])
    text = text_of(preview.text)
    assert "2 rows cannot be sent" in text
    assert "3 Bob" in text and "Amount: must be a number" in text
    assert "must be one of: Sales, Support" in text
    assert "Place order" not in text
    fixed = f"name,email,amount,Department\nAda,{email},20,Sales\nBob,{email},10,Support\nCy,{email},15,Sales\n"
    response = upload(admin, fixed)
    preview_url = response.headers["location"]
    text = text_of(admin.get(preview_url).text)
    assert f"2 Ada {email} 20.00 USD OK" in text  # each row's amount as read, in the balance's currency
    assert "Total 45.00 USD" in text and "Available balance 5,000.00 USD" in text
    assert "Place order of 3 rewards" in text
    placed = post(admin, preview_url, preview_url, {})
    assert placed.status_code == 303
    order_id = placed.headers["location"].rsplit("/", 1)[1]
    order = ok(http.get(f"/orders/{order_id}"))["order"]
    assert len(order["rewards"]) == 3 and order["payment"]["total"] == 45
    assert {r["custom_fields"][0]["value"] for r in order["rewards"]} == {"Sales", "Support"}
    assert order["rewards"][0]["custom_fields"][0]["id"] == field["id"]
    # The same file with the same choices, even as a new upload: "Place order" again is the same
    # order, nothing sent twice; the preview says so and offers to send it again on purpose.
    again = upload(admin, fixed).headers["location"]
    text = text_of(admin.get(again).text)
    assert f"already sent with these choices as order {order_id} (executed" in text, text
    assert "Send it again: a new order of 3 rewards" in text
    assert post(admin, again, again, {}).headers["location"].endswith(order_id)
    assert ok(http.get("/orders"))["total_count"] == 1
    # Sent again on purpose (next month's thank-you, or after a rejection): one new order, however
    # often the button is pressed.
    second = post(admin, again, again, {"again": "1"}).headers["location"].rsplit("/", 1)[1]
    assert second != order_id
    assert post(admin, again, again, {"again": "1"}).headers["location"].endswith(second)
    text = text_of(admin.get(again).text)
    assert f"This upload was sent again as order {second}" in text and "Place order" not in text
    assert ok(http.get("/orders"))["total_count"] == 2
    # The same file with other choices (another message) is another order at once.
    other = upload(admin, fixed, message="Thanks for a great quarter").headers["location"]
    assert "already sent" not in text_of(admin.get(other).text)
    third = post(admin, other, other, {}).headers["location"].rsplit("/", 1)[1]
    assert third not in (order_id, second) and ok(http.get("/orders"))["total_count"] == 3


def test_uploaded_files_are_kept_a_week(admin, org, engine, server):
    """A file holds recipients' names and addresses: past UPLOAD_DAYS its preview answers 404,
    and the worker's periodic sweep deletes it (they were kept for ever)."""
    from datetime import timedelta

    from sqlalchemy import func, select, update

    from largesse.dashboard.models import uploads
    from largesse.delivery.models import jobs
    from largesse.timeutil import utcnow

    old = upload(admin, f"name,email,amount\nAda,{org.member_email},5\n").headers["location"]
    recent = upload(admin, f"name,email,amount\nBo,{org.member_email},6\n").headers["location"]
    with db.write(engine) as conn:
        conn.execute(update(uploads).where(uploads.c.id == old.rsplit("/", 1)[1])
                     .values(created_at=utcnow() - timedelta(days=8)))
    assert admin.get(old).status_code == 404 and admin.get(recent).status_code == 200
    with db.write(engine) as conn:  # the periodic sweep due now, then a worker's pass runs it
        conn.execute(update(jobs).where(jobs.c.kind == "expire_rewards").values(run_after=utcnow()))
    deliver_mail(engine, server.settings)

    def count(upload_id: str) -> int:
        with db.read(engine) as conn:
            return conn.execute(select(func.count()).select_from(uploads)
                                .where(uploads.c.id == upload_id)).scalar_one()

    assert count(old.rsplit("/", 1)[1]) == 0 and count(recent.rsplit("/", 1)[1]) == 1


def test_csv_of_5000_rows_is_one_order(admin, http, org, backend):
    rows = "".join(f"Person {i},{org.member_email},1\n" for i in range(5000))
    location = upload(admin, "name,email,amount\n" + rows, products=CHARITY_USD, method="LINK").headers["location"]
    text = text_of(admin.get(location).text)
    assert "Total 5,000.00 USD" in text and "Place order of 5000 rewards" in text
    placed = post(admin, location, location, {})
    assert placed.status_code == 303, text_of(placed.text)[:500]
    order = ok(http.get(f"/orders/{placed.headers['location'].rsplit('/', 1)[1]}"))["order"]
    assert len(order["rewards"]) == 5000
    assert ok(http.get("/funding_sources/BALANCE"))["funding_source"]["meta"]["available_cents"] == 0


def test_csv_file_problems(admin):
    text = text_of(admin.get(upload(admin, "who,amount\nx,1\n").headers["location"]).text)
    assert "must name the columns name, email, amount; missing: name, email" in text


def test_a_reward_past_its_expiry_reads_expired_on_its_page(admin, http, org, engine, server):
    """As the API and its link do, before the sweep stores it: no Cancel then (it would be 422)."""
    from datetime import timedelta

    from sqlalchemy import update

    from largesse.orders.models import rewards
    from largesse.timeutil import utcnow

    local, domain = org.member_email.split("@")
    reward = place(http, f"{local}+fail@{domain}")["rewards"][0]
    deliver_mail(engine, server.settings)
    path = f"/dashboard/rewards/{reward['id']}"
    assert "Cancel reward" in admin.get(path).text  # its delivery failed
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward["id"])
                     .values(expires_at=utcnow() - timedelta(seconds=1)))
    page = admin.get(path).text
    assert "Cancel reward" not in page and "Status Expired" in text_of(page), text_of(page)


@pytest.mark.parametrize("overdue_cap", [2_000, 0])  # 0: more overdue rewards than the cap, in SQL
def test_lists_and_counts_show_a_reward_past_its_expiry_as_expired(admin, http, org, engine, monkeypatch,
                                                                    overdue_cap):
    """The list, its status filter and the overview's counts read the status the reward's page and
    the API show (the list showed Active, the Expired filter missed it, the overview counted it
    Active), whether or not the sweep has stored it yet."""
    from datetime import timedelta

    from sqlalchemy import update

    from largesse.orders import browse
    from largesse.orders.models import rewards
    from largesse.timeutil import utcnow

    monkeypatch.setattr(browse, "OVERDUE_CAP", overdue_cap, raising=False)
    late, fresh = (place(http, org.member_email, method="LINK")["rewards"][0]["id"] for _ in range(2))
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == late).values(expires_at=utcnow() - timedelta(seconds=1)))

    def listed(query: str) -> set[str]:
        return set(re.findall(r'href="/dashboard/rewards/(\w+)"', admin.get(f"/dashboard/rewards{query}").text))

    assert ok(http.get(f"/rewards/{late}"))["reward"]["redemption"]["status"] == "EXPIRED"
    page = admin.get("/dashboard/rewards").text
    row = page[page.index(f">{late}</a>"):]
    assert row.index("status-expired") < row.index("</tr>"), row[:600]
    assert {late, fresh} <= listed("")
    assert late in listed("?status=EXPIRED") and fresh not in listed("?status=EXPIRED")
    assert fresh in listed("?status=ACTIVE") and late not in listed("?status=ACTIVE")
    counts = re.findall(r"(Active|Expired)\D{0,200}?(\d+)", text_of(admin.get("/dashboard").text))
    assert ("Active", "1") in counts and ("Expired", "1") in counts, counts
    # A reward of an order waiting for approval does not expire, whatever its expires_at says.
    from tests.dashboard.test_approval_pages import set_policy

    set_policy(engine, org.id, "api")
    waiting = place(http, org.member_email, method="LINK")
    assert waiting["status"] == "PENDING APPROVAL"
    held = waiting["rewards"][0]["id"]
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == held).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert held in listed("?status=ACTIVE") and held not in listed("?status=EXPIRED")
    set_policy(engine, org.id, "off")


def test_cancel_resend_and_generate_link(admin, http, org, engine, server):
    pending = place(http, org.member_email)["rewards"][0]
    path = f"/dashboard/rewards/{pending['id']}"
    page = text_of(admin.get(path).text)
    assert "Cancel reward" not in page and "can be canceled once its delivery has failed" in page
    refused = post(admin, path, f"{path}/cancel", {})  # API.md §2.5: only after a failed delivery
    assert refused.status_code == 422 and "its delivery has not failed" in text_of(refused.text)
    local, domain = org.member_email.split("@")
    reward = place(http, f"{local}+fail@{domain}")["rewards"][0]
    deliver_mail(engine, server.settings)
    path = f"/dashboard/rewards/{reward['id']}"
    assert "Cancel reward" in admin.get(path).text
    response = post(admin, path, f"{path}/cancel", {})
    assert response.status_code == 303
    assert "The reward was canceled and refunded" in text_of(admin.get(response.headers["location"]).text)
    assert ok(http.get(f"/rewards/{reward['id']}"))["reward"]["redemption"]["status"] == "CANCELED"
    again = post(admin, path, f"{path}/cancel", {})
    assert again.status_code == 404 or "Cancel reward" not in again.text
    # A delivery that fails, then a resend to a new address.
    failing = place(http, f"{local}+fail@{domain}")["rewards"][0]
    deliver_mail(engine, server.settings)
    path = f"/dashboard/rewards/{failing['id']}"
    assert "Email: Failed" in text_of(admin.get(path).text)
    response = post(admin, path, f"{path}/resend", {"email": org.member_email})
    assert response.status_code == 303
    reward_now = ok(http.get(f"/rewards/{failing['id']}"))["reward"]
    assert reward_now["delivery"]["status"] == "PENDING" and reward_now["recipient"]["email"] == org.member_email
    refused = post(admin, path, f"{path}/resend", {})
    assert refused.status_code == 422 and "Only rewards whose delivery failed" in text_of(refused.text)
    link_reward = place(http, org.member_email, method="LINK")["rewards"][0]
    path = f"/dashboard/rewards/{link_reward['id']}"
    response = post(admin, path, f"{path}/link", {})
    assert response.status_code == 303 and response.headers["location"] == path  # post/redirect/get
    response = admin.get(path)
    assert "A new link was generated" in response.text
    assert re.search(r'value="http://127\.0\.0\.1:\d+/redeem/[A-Za-z0-9_\-]+"', response.text)


def test_reward_filters(admin, http, org):
    field = make_field(http, options=("North", "South"), name="Region")
    north = place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "North"}])["rewards"][0]
    south = place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "South"}])["rewards"][0]
    page = admin.get("/dashboard/rewards", params={"field": "Region", "value": "North"}).text
    assert north["id"] in page and south["id"] not in page
    page = admin.get("/dashboard/rewards", params={"status": "CANCELED"}).text
    assert north["id"] not in page and "No rewards match" in page
    page = admin.get("/dashboard/rewards", params={"from": "2000-01-01", "to": "2000-01-02"}).text
    assert "No rewards match" in page
    for path in ("/dashboard/rewards", "/dashboard/orders", "/dashboard/funding"):  # the last day there is
        response = admin.get(path, params={"to": "9999-12-31"})
        assert response.status_code == 200, (path, response.status_code)
    assert north["id"] in admin.get("/dashboard/rewards", params={"to": "9999-12-31"}).text


def test_rewards_of_one_recipient(admin, http, org, engine):
    """The Recipient email box: the whole address in any capitals, with the other filters, and
    its pages keep it."""
    from tests.factories import many_rewards_body

    _, mia = add_member(engine, org.id)
    field = make_field(http, options=("North", "South"), name="Area")
    hers = ok(http.post("/orders", json=many_rewards_body(mia, [5] * 27)))["order"]["rewards"]
    north = place(http, mia, custom_fields=[{"id": field["id"], "value": "North"}])["rewards"][0]
    other = place(http, org.member_email)["rewards"][0]
    page = admin.get("/dashboard/rewards", params={"recipient": mia.upper()})
    assert page.status_code == 200 and f'value="{mia.upper()}"' in page.text
    assert page.text.count('href="/dashboard/rewards/') == 25 and north["id"] in page.text
    assert other["id"] not in page.text
    rest = admin.get(re.search(r'href="([^"]+)" rel="next"', page.text).group(1).replace("&amp;", "&")).text
    assert rest.count('href="/dashboard/rewards/') == 3 and other["id"] not in rest
    assert {r["id"] for r in hers} <= set(re.findall(r'href="/dashboard/rewards/([A-Z0-9]+)"', page.text + rest))
    both = admin.get("/dashboard/rewards", params={"recipient": mia, "field": "Area", "value": "North"}).text
    assert both.count('href="/dashboard/rewards/') == 1 and north["id"] in both
    nobody = admin.get("/dashboard/rewards", params={"recipient": "nobody@example.com"}).text
    assert "No rewards match" in nobody
    mine = admin.get("/dashboard/rewards", params={"recipient": f" {org.member_email} "}).text
    assert other["id"] in mine and north["id"] not in mine


def test_pagination_is_in_the_database(admin, http, org):
    from tests.factories import many_rewards_body

    order = ok(http.post("/orders", json=many_rewards_body(org.member_email, [5] * 30)))["order"]
    page = admin.get(f"/dashboard/orders/{order['id']}").text
    assert page.count('href="/dashboard/rewards/') == 25
    rest = admin.get(re.search(r'href="([^"]+)" rel="next"', page).group(1).replace("&amp;", "&")).text
    assert rest.count('href="/dashboard/rewards/') == 5 and f"Order {order['id']}" in rest
    first = admin.get("/dashboard/rewards")
    assert first.text.count('href="/dashboard/rewards/') == 25 and "Next page" in first.text
    second = admin.get(re.search(r'href="([^"]+)" rel="next"', first.text).group(1).replace("&amp;", "&"))
    assert second.text.count('href="/dashboard/rewards/') == 5 and "Next page" not in second.text
    assert "Newest" in second.text


def test_funding_ledger_has_a_running_balance(admin, http, org):
    place(http, org.member_email, denomination=100)
    text = text_of(admin.get("/dashboard/funding").text)
    assert "-100.00 USD 4,900.00 USD" in text and "Sandbox pre-loaded balance 5,000.00 USD 5,000.00 USD" in text


def test_keys_created_once_and_revoked(admin, org, server):
    import httpx

    response = post(admin, "/dashboard/developers", "/dashboard/developers/keys",
                    {"label": "dashboard key", "permission": "read_write"})
    assert response.status_code == 303  # post/redirect/get: the key is on the next page, once
    shown = admin.get(response.headers["location"]).text
    assert "Copy it now: it will not be shown again" in shown
    key = re.search(r'id="new-key" class="wide" readonly value="(LRG_SANDBOX_[^"]+)"', shown).group(1)
    api = httpx.Client(base_url=f"{server.url}/api/v2", headers={"Authorization": f"Bearer {key}"})
    assert api.get("/orders").status_code == 200
    page = admin.get("/dashboard/developers").text
    assert key not in page and key[:16] in page
    key_id = re.search(r'/dashboard/developers/keys/([A-Z0-9]+)/revoke"[^<]*<input[^>]*>\s*<button[^>]*>Revoke key '
                       + re.escape(key[:16]), page).group(1)
    assert post(admin, "/dashboard/developers", f"/dashboard/developers/keys/{key_id}/revoke", {}).status_code == 303
    assert api.get("/orders").status_code == 401
    api.close()


def test_team_invite_sends_a_sign_in_link(admin, http, engine, server):
    response = post(admin, "/dashboard/team", "/dashboard/team/invite",
                    {"email": "new.hire@example.com", "name": "New Hire", "role": "MEMBER"})
    assert response.status_code == 303
    assert "Invitation sent" in text_of(admin.get(response.headers["location"]).text)
    members = ok(http.get("/members"))["members"]
    assert {"new.hire@example.com": "MEMBER"}.items() <= {m["email"]: m["role"] for m in members}.items()
    deliver_mail(engine, server.settings)
    from tests.dashboard.conftest import signin_links

    assert signin_links(server.settings, "new.hire@example.com")
    team = text_of(admin.get("/dashboard/team").text)  # who has not signed in yet
    assert "new.hire@example.com New Hire Invited, not signed in yet" in team
    assert "Signed in (last " in team  # the admin, signed in
    duplicate = post(admin, "/dashboard/team", "/dashboard/team/invite", {"email": "new.hire@example.com",
                                                                          "name": "Twice", "role": "ADMIN"})
    assert duplicate.status_code == 400 and "already a member" in text_of(duplicate.text)
    # The form shows what was typed, the role included (it fell back to Member).
    assert 'value="new.hire@example.com"' in duplicate.text and 'value="Twice"' in duplicate.text
    assert '<option value="ADMIN" selected>' in duplicate.text, duplicate.text


def invitations_to(settings, address: str) -> list:
    import mailbox

    box = mailbox.Maildir(settings.mail_dir, create=False)
    return sorted((m for m in box if m["X-Largesse-Kind"] == "dashboard-invitation" and address in m["To"]),
                  key=lambda m: m.get_date())


def test_an_invitation_says_who_and_as_what_lasts_a_week_and_can_be_sent_again(admin, http, engine, server, org):
    """The invitation email names the inviter, the organization and the role; its link lasts
    INVITE_DAYS (a sign-in link lasts 15 minutes); MEMBERS.INVITED is emitted with it; until
    the member signs in, the Team page sends it again with a new link, and not after."""
    from datetime import timedelta

    from sqlalchemy import select

    from largesse.dashboard.models import signin_tokens
    from largesse.orgs.models import organizations
    from largesse.timeutil import utcnow
    from tests.dashboard.conftest import page_client, sign_in_with_link, signin_links
    from tests.fraud.conftest import events_for

    assert http.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"}).status_code == 200
    assert post(admin, "/dashboard/team", "/dashboard/team/invite",
                {"email": "viewer@example.com", "role": "VIEWER"}).status_code == 303
    deliver_mail(engine, server.settings)
    [mail] = invitations_to(server.settings, "viewer@example.com")
    body = mail.get_payload(decode=True).decode()
    first = ok(http.get("/members"))["members"][0]
    with db.read(engine) as conn:
        org_name = conn.execute(select(organizations.c.name).where(organizations.c.id == org.id)).scalar_one()
    assert mail["Subject"] == f"{first['name'] or first['email']} invited you to {org_name} on Largesse"
    assert "as viewer. What this role can do: Sees the organization's orders" in body
    assert "for 7 days" in body and f"{server.url}/dashboard/signin" in body
    new_id = next(m["id"] for m in ok(http.get("/members"))["members"] if m["email"] == "viewer@example.com")
    assert events_for(engine, org.id, new_id) == ["MEMBERS.CREATED", "MEMBERS.INVITED"]
    with db.read(engine) as conn:
        expires = conn.execute(select(signin_tokens.c.expires_at).where(signin_tokens.c.member_id == new_id)
                               ).scalar_one()
    assert timedelta(days=6, hours=23) < expires - utcnow() <= timedelta(days=7)

    again = f"/dashboard/team/members/{new_id}/invite"
    page = admin.get("/dashboard/team").text
    assert f'action="{again}"' in page and "Send the invitation again to viewer@example.com" in text_of(page)
    response = post(admin, "/dashboard/team", again, {})
    assert response.status_code == 303
    assert "Invitation sent again" in text_of(admin.get(response.headers["location"]).text)
    deliver_mail(engine, server.settings)
    links = signin_links(server.settings, "viewer@example.com")
    assert len(invitations_to(server.settings, "viewer@example.com")) == 2 and len(set(links)) == 2
    assert events_for(engine, org.id, new_id) == ["MEMBERS.CREATED", "MEMBERS.INVITED", "MEMBERS.INVITED"]

    viewer = page_client(server.url)
    assert sign_in_with_link(viewer, links[-1]).status_code == 303
    viewer.close()
    page = admin.get("/dashboard/team").text
    assert f'action="{again}"' not in page
    refused = post(admin, "/dashboard/team", again, {})
    assert refused.status_code == 409 and "has signed in already" in text_of(refused.text)
    assert len(invitations_to(server.settings, "viewer@example.com")) == 2


def test_sign_in_sets_the_members_last_login(engine, server, org, api):
    """Member.last_login_at and get_member's last_login event (API.md §3): absent until the
    member signs in to the dashboard, then the time of the latest sign-in; status INVITED
    until then, REGISTERED after."""
    mid, _ = add_member(engine, org.id)
    assert api.list_members().members[-1].last_login_at is None
    assert api.get_member(mid).member.status == "INVITED"
    assert [e.type for e in api.get_member(mid).member.events] == ["created"]
    signed_in(engine, server.url, org.id, mid).close()
    listed = next(m for m in api.list_members().members if m.id == mid)
    events = api.get_member(mid).member.events
    assert listed.status == "REGISTERED" and api.get_member(mid).member.status == "REGISTERED"
    assert [e.type for e in events] == ["created", "last_login"]
    assert listed.last_login_at is not None and events[1].date_utc == listed.last_login_at >= listed.created_at


def test_team_role_change_and_last_admin(engine, admin, http, org):
    mid, _ = add_member(engine, org.id, role="MEMBER")
    response = post(admin, "/dashboard/team", f"/dashboard/team/members/{mid}/role", {"role": "ADMIN"})
    assert response.status_code == 303
    assert ok(http.get(f"/members/{mid}"))["member"]["role"] == "ADMIN"
    assert post(admin, "/dashboard/team", f"/dashboard/team/members/{mid}/remove", {}).status_code == 303
    assert ok(http.get("/members"))["members"].__len__() == 1


def test_webhook_simulate_and_deliveries(admin, http):
    response = post(admin, "/dashboard/developers", "/dashboard/developers/webhook", {"url": "http://127.0.0.1:9/hook"})
    assert response.status_code == 303
    page = admin.get("/dashboard/developers").text
    hook = ok(http.get("/webhooks"))["webhooks"][0]
    assert hook["url"] == "http://127.0.0.1:9/hook" and hook["private_key"] in page
    response = post(admin, "/dashboard/developers", f"/dashboard/developers/webhook/{hook['id']}/simulate",
                    {"event": "ORDERS.CREATED"})
    assert response.status_code == 303 and "Test event queued" in text_of(admin.get(response.headers["location"]).text)
    bad = post(admin, "/dashboard/developers", "/dashboard/developers/webhook", {"url": "ftp://x"})
    assert bad.status_code == 400 and 'value="ftp://x"' in bad.text  # what was typed, not the saved URL


def test_campaign_create_edit_and_preview(admin, http):
    response = post(admin, "/dashboard/campaigns/new", "/dashboard/campaigns/new", {
        "name": "Thank you", "products": GIFT_CARD_USD, "page_headline": "Thanks for your help",
        "email_subject_line": "A thank-you from us", "email_button_color": "#123456"})
    assert response.status_code == 303, text_of(response.text)
    campaign_id = response.headers["location"].split("/")[-1].split("?")[0]
    campaign = ok(http.get(f"/campaigns/{campaign_id}"))["campaign"]
    assert campaign["webpage_style"]["headline"] == "Thanks for your help"
    assert campaign["email_style"]["button_color"] == "#123456"
    bad = post(admin, f"/dashboard/campaigns/{campaign_id}", f"/dashboard/campaigns/{campaign_id}", {
        "name": "Thank you", "products": GIFT_CARD_USD, "email_button_color": "blue"})
    assert bad.status_code == 400 and "must be a hex colour" in text_of(bad.text)
    page = admin.get("/dashboard/campaigns/preview/page", params={"products": GIFT_CARD_USD,
                                                                  "page_headline": "Hello there"})
    assert page.status_code == 200 and "Hello there" in page.text and "Northwind Books" in page.text
    assert "frame-ancestors 'self'" in page.headers["content-security-policy"]
    email = admin.get("/dashboard/campaigns/preview/email", params={"email_subject_line": "Subject!"})
    assert email.status_code == 200 and "Alex Recipient" in email.text


def test_a_refused_style_leaves_the_others_in_the_preview(admin):
    """One value the API refuses (a colour named "red") is left out of the previews; the others
    typed with it still show, and the editor's "Update preview" names the one left out."""
    typed = {"products": GIFT_CARD_USD, "page_headline": "MYHEADLINE", "page_background_color": "red",
             "email_subject_line": "MYSUBJECT", "email_button_color": "#12345"}
    page = admin.get("/dashboard/campaigns/preview/page", params=typed)
    assert page.status_code == 200 and "MYHEADLINE" in page.text and "--page-bg:red" not in page.text
    email = admin.get("/dashboard/campaigns/preview/email", params=typed)
    assert email.status_code == 200 and "MYSUBJECT" in email.text and "#12345" not in email.text
    editor = text_of(admin.get("/dashboard/campaigns/new", params={**typed, "name": "Draft", "preview": "1"}).text)
    assert "Left out of the previews" in editor
    assert "Background colour: must be a hex colour" in editor and "Button colour: must be a hex colour" in editor
    assert "Left out of the previews" not in text_of(admin.get("/dashboard/campaigns/new").text)


@pytest.mark.parametrize("path", ["/dashboard/team", "/dashboard/developers"])
def test_signed_out_visitors_are_sent_to_sign_in(server, path):
    import httpx

    response = httpx.get(server.url + path)
    assert response.status_code == 303 and response.headers["location"].startswith("/dashboard/signin?next=")


def test_member_of_other_org_sees_only_their_org(engine, server, org, other_org, http):
    place(http, org.member_email)
    mid, _ = add_member(engine, other_org.id, role="ADMIN")
    client = signed_in(engine, server.url, other_org.id, mid)
    assert "No orders yet" in text_of(client.get("/dashboard").text)
    assert "No rewards match" in client.get("/dashboard/rewards").text
    client.close()


def test_csv_line_endings_and_a_repeated_column(admin, org):
    """Old Mac line endings (CR only) read as rows (they were "The file is empty."); a column
    named twice is refused (the last one was used, silently)."""
    email = org.member_email
    for ending in ("\r", "\r\n", "\n"):
        response = upload(admin, ending.join(["name,email,amount", f"Ada,{email},20", ""]))
        assert response.status_code == 303, text_of(response.text)
        assert f"2 Ada {email} 20.00 USD OK" in text_of(admin.get(response.headers["location"]).text), repr(ending)
    repeated = upload(admin, f"name,Name,email,amount\nA,B,{email},10\n")
    text = text_of(admin.get(repeated.headers["location"]).text if repeated.status_code == 303 else repeated.text)
    assert "The header row names name more than once" in text and "Place order" not in text
    # A header of 20,000 columns took 12 s of CPU to check for repeats (and again at each preview).
    wide = upload(admin, ",".join(["name", "email", "amount", *(f"c{n}" for n in range(20_000))]) + "\n")
    text = text_of(admin.get(wide.headers["location"]).text if wide.status_code == 303 else wide.text)
    assert "The header row has 20,003 columns, more than 1,000" in text and "Place order" not in text


def test_bad_bytes_get_an_answer_not_an_error(admin, server):
    from tests.dashboard.conftest import page_client

    nul = upload(admin, "name,email,amount\nA\x00,a@example.com,5\n")
    assert nul.status_code == 400 and "not a CSV text file" in text_of(nul.text)
    latin = post(admin, "/dashboard/send/bulk", "/dashboard/send/bulk", {},
                 files={"file": ("x.csv", "name,email,amount\nJos\xe9,a@example.com,5\n".encode("latin-1"),
                                 "text/csv")})
    assert latin.status_code == 400 and "not UTF-8" in text_of(latin.text)
    with page_client(server.url) as client:
        form = client.get("/dashboard/signin")
        response = client.post("/dashboard/signin",
                               data={"csrf_token": csrf_of(form.text), "email": "a\x00b@example.com"})
        assert response.status_code == 400 and "holds a NUL character" in text_of(response.text)
    assert admin.get("/dashboard/rewards", params={"field": "x\x00", "value": "y\x00"}).status_code == 200
