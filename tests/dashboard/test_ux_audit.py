"""The UX audit's findings, over HTTP: one rule for typed amounts, forms that keep what was
typed, "Resend reward" only when it can work, a new link shown once after "Send rewards",
post/redirect/get for a new API key, unknown campaign placeholders, the field value filter."""

from __future__ import annotations

import re

from tests.dashboard.conftest import deliver_mail, text_of
from tests.dashboard.test_pages import post, send_one, upload
from tests.factories import CHARITY_USD, GIFT_CARD_USD, make_field, ok, place


def send(client, org, amount: str, **extra):
    """The form, its summary, and the summary's Send (the form's response when it refuses)."""
    return send_one(client, {
        "name": "Recipient", "email": org.member_email, "amount": amount, "method": "EMAIL",
        "products": GIFT_CARD_USD, **extra})


def test_a_problem_is_tied_to_its_field(admin, http, org):
    """A problem shown on a form names its control: the control is aria-invalid and described
    by the message (the shared rendering: every dashboard form's controls)."""
    response = send(admin, org, "25,50")
    assert response.status_code == 400
    message = re.search(r'<li id="(error-\d+)">Amount: use a dot for decimals: 25.50</li>', response.text)
    assert message, response.text
    amount = re.search(r'<input id="amount" name="amount"[^>]*>', response.text).group(0)
    assert 'aria-invalid="true"' in amount and f'aria-describedby="{message.group(1)}"' in amount
    name = re.search(r'<input id="name" name="name"[^>]*>', response.text).group(0)
    assert "aria-invalid" not in name and "aria-describedby" not in name
    currency = re.search(r'<select id="currency" name="currency"[^>]*>', response.text).group(0)
    assert 'aria-describedby="currency-hint"' in currency  # its own hint stays
    report = post(admin, "/dashboard/reports", "/dashboard/reports", {"amount_lte": "7,5"})
    assert report.status_code == 400 and '<p class="error" role="alert" id="error-1">' in report.text
    largest = re.search(r'<input id="report-max" name="amount_lte"[^>]*>', report.text).group(0)
    assert 'aria-invalid="true" aria-describedby="error-1"' in largest


def test_an_amount_with_a_decimal_comma_is_refused_not_multiplied(admin, http, org):
    before = ok(http.get("/orders"))["total_count"]
    for typed, fix in (("7,5", "7.50"), ("25,50", "25.50"), ("1.000,50", "1000.50")):
        response = send(admin, org, typed)
        assert response.status_code == 400, typed
        assert f"Amount: use a dot for decimals: {fix}" in text_of(response.text)
        # What was typed stays in the box.
        assert re.search(r'id="amount" name="amount"[^>]* value="' + re.escape(typed) + '"', response.text)
    response = send(admin, org, "12,34")
    assert "use a dot for decimals: 12.34" in text_of(response.text)
    response = send(admin, org, "1,0000")
    assert response.status_code == 400 and "commas only between thousands" in text_of(response.text)
    assert ok(http.get("/orders"))["total_count"] == before
    # Plain decimals, and a comma as a strict thousands separator.
    for typed, cents in (("7.50", 750), ("1,000", 100000), ("1,000.50", 100050)):
        response = send(admin, org, typed, products=CHARITY_USD)
        assert response.status_code == 303, (typed, text_of(response.text)[:400])
        order = ok(http.get(f"/orders/{response.headers['location'].rsplit('/', 1)[1]}"))["order"]
        assert round(order["rewards"][0]["value"]["denomination"] * 100) == cents, typed


def test_csv_amounts_follow_the_same_rule(admin, org):
    email = org.member_email
    content = f'name,email,amount\nAda,{email},"25,50"\nBob,{email},"1,000"\nCy,{email},7.5\n'
    text = text_of(admin.get(upload(admin, content, products=CHARITY_USD).headers["location"]).text)
    assert "1 row cannot be sent" in text and "Amount: use a dot for decimals: 25.50" in text
    fixed = f'name,email,amount\nAda,{email},25.50\nBob,{email},"1,000"\nCy,{email},7.5\n'
    text = text_of(admin.get(upload(admin, fixed, products=CHARITY_USD).headers["location"]).text)
    assert "Place order of 3 rewards" in text and "1,033.00 USD" in text


def test_resend_is_offered_only_when_the_delivery_failed(admin, http, org, engine, server):
    delivered = place(http, org.member_email)["rewards"][0]
    local, domain = org.member_email.split("@")
    failed = place(http, f"{local}+fail@{domain}")["rewards"][0]
    deliver_mail(engine, server.settings)
    page = admin.get(f"/dashboard/rewards/{delivered['id']}").text
    assert "Resend reward" not in page and "can be resent once its delivery has failed" in text_of(page)
    path = f"/dashboard/rewards/{failed['id']}"
    assert "Resend reward" in admin.get(path).text
    # A refused resend keeps the address typed.
    refused = post(admin, path, f"{path}/resend", {"email": "stranger@example.com"})
    assert refused.status_code == 422, text_of(refused.text)
    assert 'name="email" type="email" maxlength="320"' in refused.text
    assert 'value="stranger@example.com"' in refused.text


def test_a_link_reward_sent_from_the_form_shows_its_link_once(admin, http, org, server):
    response = send(admin, org, "10", method="LINK")
    assert response.status_code == 303, text_of(response.text)
    location = response.headers["location"]
    page = admin.get(location)
    link = re.search(r'id="new-link-1" readonly value="(http://127\.0\.0\.1:\d+/redeem/[A-Za-z0-9_\-]+)"', page.text)
    assert link, text_of(page.text)
    assert "it is shown on this page once" in text_of(page.text)
    import httpx

    assert httpx.get(link.group(1)).status_code == 200  # the link works
    again = admin.get(location)
    assert again.status_code == 200 and "/redeem/" not in again.text  # a reload shows (and makes) no link
    reward_id = ok(http.get(f"/orders/{location.rsplit('/', 1)[1]}"))["order"]["rewards"][0]["id"]
    assert text_of(admin.get(f"/dashboard/rewards/{reward_id}").text).count("Link issued") == 1
    # An EMAIL reward: no link on the order's page.
    email_order = send(admin, org, "10").headers["location"]
    assert "/redeem/" not in admin.get(email_order).text


def test_a_new_api_key_survives_no_reload(admin, http):
    keys_before = text_of(admin.get("/dashboard/developers").text).count("Revoke key")
    response = post(admin, "/dashboard/developers", "/dashboard/developers/keys", {"label": "once"})
    assert response.status_code == 303 and response.headers["location"] == "/dashboard/developers?done=created"
    flash = response.headers["set-cookie"]
    page = admin.get(response.headers["location"]).text
    key = re.search(r'id="new-key" class="wide" readonly value="(LRG_SANDBOX_[^"]+)"', page).group(1)
    # The cookie that carried it is encrypted: neither the key nor its base64 is in it.
    import base64 as b64

    secret = key.removeprefix("LRG_SANDBOX_")
    assert secret not in flash and b64.urlsafe_b64encode(key.encode()).decode()[8:40] not in flash
    assert "LRG_" not in b64.urlsafe_b64decode(flash.split("=", 1)[1].split(";")[0] + "==").decode("latin-1")
    assert "Copy it now: it will not be shown again" in text_of(page)
    reloaded = admin.get(response.headers["location"]).text
    assert key not in reloaded and 'id="new-key"' not in reloaded
    assert "It was shown once and cannot be shown again" in text_of(reloaded)
    assert text_of(reloaded).count("Revoke key") == keys_before + 1  # one key, not two
    # A forged value is not shown (the flash is signed and bound to the session).
    import base64
    import json

    body = base64.urlsafe_b64encode(json.dumps({"exp": 9999999999, "data": "LRG_SANDBOX_FORGED"}).encode()).decode()
    admin.cookies.set("largesse_dashboard_flash", body.rstrip("=") + ".00", path="/dashboard/developers")
    assert "LRG_SANDBOX_FORGED" not in admin.get("/dashboard/developers?done=created").text


def test_unknown_campaign_placeholders_are_named(admin, http):
    make_field(http, options=("Sales", "Support"), name="Department")
    response = post(admin, "/dashboard/campaigns/new", "/dashboard/campaigns/new", {
        "name": "Hello", "products": GIFT_CARD_USD, "page_headline": "Thanks {{ Name }} from {{ department }}",
        "page_message": "Dear {{Name}}, {{ Team }}", "email_subject_line": "For {{ Department }}"})
    assert response.status_code == 303, text_of(response.text)  # saved all the same
    text = text_of(admin.get(response.headers["location"]).text)
    assert "Campaign saved" in text
    assert "Page headline: {{ Name }}" in text and "Page message: {{ Name }}, {{ Team }}" in text
    assert "Email subject" not in text  # {{ Department }} is a field
    assert "Available: {{ Department }}" in text
    preview = text_of(admin.get("/dashboard/campaigns/new", params={"page_headline": "Hi {{ Who }}"}).text)
    assert "Page headline: {{ Who }}" in preview
    clean = text_of(admin.get("/dashboard/campaigns/new", params={"page_headline": "Hi {{ Department }}"}).text)
    assert "match none of your organization's custom fields" not in clean


def test_a_field_value_without_a_field_asks_for_the_field(admin, http, org):
    field = make_field(http, options=("North", "South"), name="Region")
    north = place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "North"}])["rewards"][0]
    page = admin.get("/dashboard/rewards", params={"field": "", "value": "North"})
    assert page.status_code == 200
    assert "Choose the custom field to look in" in text_of(page.text) and north["id"] not in page.text
    assert 'id="value" name="value" value="North"' in page.text
    assert north["id"] in admin.get("/dashboard/rewards", params={"field": "Region", "value": "North"}).text


def test_irreversible_actions_ask_first(admin, http, org, engine):
    """Each one-click irreversible form carries data-confirm (dashboard.js asks; see test_browser)."""
    from largesse import db
    from largesse.orders import approvals
    from tests.dashboard.conftest import add_member

    add_member(engine, org.id)
    link_reward = place(http, org.member_email, method="LINK")["rewards"][0]
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="api")
    waiting = place(http, org.member_email)
    pages = {f"/dashboard/rewards/{link_reward['id']}": "/link",
             f"/dashboard/orders/{link_reward['order_id']}": "/links",
             "/dashboard/approvals": f"/approvals/{waiting['id']}/reject",
             "/dashboard/team": "/remove", "/dashboard/developers": "/revoke"}
    for path, action in pages.items():
        forms = re.findall(r'<form method="post" action="[^"]*' + re.escape(action) + r'"[^>]*>', admin.get(path).text)
        assert forms and all('data-confirm="' in f for f in forms), (path, forms)
