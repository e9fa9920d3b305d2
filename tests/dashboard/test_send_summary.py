""""Send rewards" (one reward) shows what it will cost before anything moves: the summary's fee,
total and balance after come from the order service's own preview, nothing is charged until
Send, Send places one order however often it is posted, and Edit gives the form back as typed."""

from __future__ import annotations

import re
from decimal import Decimal

from largesse import db
from largesse.orders import approvals
from largesse.orgs import service as orgs
from tests.dashboard.conftest import text_of
from tests.dashboard.test_pages import hidden_fields, post, send_one
from tests.factories import CHARITY_USD, GIFT_CARD_USD, available_cents, make_campaign, make_field, ok, snapshot


def typed(org, amount: str = "20", **extra) -> dict:
    return {"name": "Rita Recipient", "email": org.member_email, "amount": amount, "method": "EMAIL",
            "products": GIFT_CARD_USD, "message": "", **extra}


def set_fees(engine, org, *, basis_points: int, flat_cents: int) -> None:
    with db.write(engine) as conn:
        orgs.set_fees(conn, org.id, basis_points=basis_points, flat_cents=flat_cents)


def test_the_summary_shows_fee_total_and_balance_after_and_charges_nothing(admin, http, org, engine):
    set_fees(engine, org, basis_points=250, flat_cents=50)  # 2.5 % + 0.50
    before = snapshot(http)
    summary = send_one(admin, typed(org, "20"), confirm=False)
    assert summary.status_code == 200, text_of(summary.text)
    text = text_of(summary.text)
    assert "Nothing has been sent or charged yet" in text and "Rita Recipient" in text
    assert "Amount 20.00 USD" in text and "Fee 1.00 USD" in text  # 2.5 % of 20.00 + 0.50
    assert "Total charged to the balance 21.00 USD" in text
    available = before[0]
    assert f"Balance after {Decimal(available - 2100).scaleb(-2):,.2f} USD" in text  # grouped: 4,979.00
    assert "approval policy" not in text
    assert snapshot(http) == before  # the summary placed and charged nothing
    # An odd amount: the fee is the service's rule (the same _plan place_order runs).
    text = text_of(send_one(admin, typed(org, "33.33"), confirm=False).text)
    assert "Fee 1.33 USD" in text and "Total charged to the balance 34.66 USD" in text
    assert snapshot(http) == before


def test_send_charges_exactly_once_even_when_posted_twice(admin, http, org, engine):
    set_fees(engine, org, basis_points=250, flat_cents=50)
    before_balance, before_orders, _ = snapshot(http)
    summary = send_one(admin, typed(org, "20"), confirm=False)
    fields = hidden_fields(summary.text)
    assert re.fullmatch(r"dashboard-send-[0-9A-Z]+", fields["token"][0])
    first = admin.post("/dashboard/send/confirm", data=fields)
    again = admin.post("/dashboard/send/confirm", data=fields)  # a double click, or the POST reloaded
    assert first.status_code == again.status_code == 303, text_of(again.text)
    assert first.headers["location"] == again.headers["location"]
    order = ok(http.get(f"/orders/{first.headers['location'].rsplit('/', 1)[1]}"))["order"]
    assert order["payment"]["total"] == 21.0 and order["payment"]["fees"] == 1.0 and len(order["rewards"]) == 1
    balance, orders_count, _ = snapshot(http)
    assert orders_count == before_orders + 1
    assert balance == before_balance - 2100  # one debit, the total the summary showed


def test_a_changed_fee_is_shown_again_before_anything_is_charged(admin, http, org, engine):
    summary = send_one(admin, typed(org, "20"), confirm=False)
    assert "Fee 0.00 USD" in text_of(summary.text)
    set_fees(engine, org, basis_points=0, flat_cents=75)  # changed after the summary was shown
    before = snapshot(http)
    response = admin.post("/dashboard/send/confirm", data=hidden_fields(summary.text))
    assert response.status_code == 200
    text = text_of(response.text)
    assert "The total changed since this page was shown" in text and "Fee 0.75 USD" in text
    assert snapshot(http) == before
    sent = admin.post("/dashboard/send/confirm", data=hidden_fields(response.text))
    assert sent.status_code == 303 and available_cents(http) == before[0] - 2075


def test_edit_gives_the_form_back_with_every_value(admin, http, org):
    field = make_field(http, options=("North", "South"), name="Region")
    campaign = make_campaign(http)
    data = typed(org, "120.50", method="LINK", campaign=campaign["id"], products=[GIFT_CARD_USD, CHARITY_USD],
                 message='Thanks "for" <everything> & more', **{f"field_{field['id']}": "South"})
    before = snapshot(http)
    summary = send_one(admin, data, confirm=False)
    assert summary.status_code == 200, text_of(summary.text)
    assert 'formaction="/dashboard/send/edit"' in summary.text
    page = admin.post("/dashboard/send/edit", data=hidden_fields(summary.text))
    assert page.status_code == 200 and "Send a reward" in page.text
    assert '<form method="get" action="/dashboard/send" class="filters"' in page.text  # not .../edit
    html = page.text
    assert 'id="name" name="name" required maxlength="200" value="Rita Recipient"' in html
    assert f'value="{org.member_email}"' in html
    assert re.search(r'id="amount" name="amount"[^>]* value="120\.50"', html)
    assert '<option value="LINK" selected>' in html
    assert f'<option value="{campaign["id"]}" selected>' in html
    for product in (GIFT_CARD_USD, CHARITY_USD):
        assert f'name="products" value="{product}" checked' in html
    assert "Thanks &#34;for&#34; &lt;everything&gt; &amp; more</textarea>" in html
    assert '<option value="South" selected>South</option>' in html
    assert snapshot(http) == before


def test_the_summary_says_when_the_order_will_need_approval(admin, http, org, engine):
    with db.write(engine) as conn:
        approvals.set_policy(conn, org.id, mode="above", above_cents=1500)
    assert "approval policy holds this order" in text_of(send_one(admin, typed(org, "20"), confirm=False).text)
    assert "approval policy" not in text_of(send_one(admin, typed(org, "10"), confirm=False).text)
    response = send_one(admin, typed(org, "20"))
    assert response.status_code == 303
    order = ok(http.get(f"/orders/{response.headers['location'].rsplit('/', 1)[1]}"))["order"]
    assert order["status"] == approvals.PENDING


def test_form_errors_stay_on_the_form_and_a_bad_token_places_nothing(admin, http, org):
    before = snapshot(http)
    refused = post(admin, "/dashboard/send", "/dashboard/send", typed(org, "7,5"))
    assert refused.status_code == 400 and "use a dot for decimals: 7.50" in text_of(refused.text)
    summary = send_one(admin, typed(org, "20"), confirm=False)
    fields = {**hidden_fields(summary.text), "token": ["anything/else"]}
    response = admin.post("/dashboard/send/confirm", data=fields)
    assert response.status_code == 200 and "Check the order again" in text_of(response.text)
    assert snapshot(http) == before
