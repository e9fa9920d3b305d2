"""POST /orders: the specification's rules, money, funding sources, recipients, custom fields."""

from __future__ import annotations

import re

import pytest
from tremendous.exceptions import BadRequestException

from tests.factories import (
    CHARITY_USD,
    GIFT_CARD_GBP,
    GIFT_CARD_USD,
    PIXEL_ARCADE,
    TRAVEL_MULTI,
    available_cents,
    client_order,
    client_search_rewards,
    error,
    make_campaign,
    make_field,
    many_rewards_body,
    ok,
    order_body,
    place,
    snapshot,
    unique,
)

ID = re.compile(r"^[A-Z0-9]{12,20}$")


def test_client_creates_order_debited_from_balance(org, api, http):
    order = client_order(api, order_body(org.member_email, denomination=12.34))
    assert ID.match(order.id) and order.status == "EXECUTED"
    assert (order.payment.subtotal, order.payment.fees, order.payment.total) == (12.34, 0, 12.34)
    assert order.payment.currency_code == "USD"
    (reward,) = order.rewards
    assert ID.match(reward.id) and reward.order_id == order.id
    assert (reward.delivery.method, reward.delivery.status) == ("EMAIL", "PENDING")
    assert reward.value.denomination == 12.34 and reward.value.currency_code == "USD"
    assert available_cents(http) == 500000 - 1234
    again = api.get_order(order.id).order
    assert again.id == order.id and again.payment.total == 12.34 and again.rewards[0].id == reward.id


def test_wire_order_shape(org, http):
    order = place(http, org.member_email, denomination=10.5)
    assert order["payment"] == {"subtotal": 10.5, "total": 10.5, "fees": 0, "discount": 0, "currency_code": "USD"}
    assert order["external_id"] is None and order["channel"] == "API"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", order["created_at"])
    reward = order["rewards"][0]
    assert reward["products"] == [GIFT_CARD_USD] and reward["campaign_id"] is None
    assert reward["recipient"] == {"name": "Recipient", "email": org.member_email}


def test_campaign_products_used_when_products_omitted(org, api, http):
    from tremendous import CreateCampaignRequest

    campaign = api.create_campaign(CreateCampaignRequest.from_dict(
        {"name": "Thanks", "products": [CHARITY_USD, TRAVEL_MULTI]})).campaign
    order = client_order(api, order_body(org.member_email, products=None, campaign_id=campaign.id))
    reward = ok(http.get(f"/rewards/{order.rewards[0].id}"))["reward"]
    assert reward["products"] == [CHARITY_USD, TRAVEL_MULTI]
    assert reward["campaign_id"] == campaign.id
    assert ok(http.get(f"/orders/{order.id}"))["order"]["campaign_id"] == campaign.id


def test_products_override_campaign(org, http):
    campaign = make_campaign(http, products=[CHARITY_USD])
    order = place(http, org.member_email, products=[GIFT_CARD_USD], campaign_id=campaign["id"])
    assert order["rewards"][0]["products"] == [GIFT_CARD_USD]
    assert order["rewards"][0]["campaign_id"] == campaign["id"]


def test_empty_products_fall_back_to_campaign(org, http):
    campaign = make_campaign(http, products=[CHARITY_USD])
    order = place(http, org.member_email, products=[], campaign_id=campaign["id"])
    assert order["rewards"][0]["products"] == [CHARITY_USD]


def test_no_products_and_no_campaign_is_refused(org, http):
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(org.member_email, products=[])), 400)
    assert "reward" in errors["payload"]
    errors = error(http.post("/orders", json=order_body(org.member_email, products=None)), 400)
    assert "reward" in errors["payload"]
    assert snapshot(http) == before


def test_campaign_without_products_and_no_products_is_refused(org, http):
    campaign = make_campaign(http, products=[])
    errors = error(http.post("/orders", json=order_body(org.member_email, products=None,
                                                        campaign_id=campaign["id"])), 400)
    assert "products" in errors["payload"]["reward"]


def test_a_campaign_offers_its_products_that_take_the_rewards_currency_and_value(org, api, http):
    """Spec rule 1 with a campaign of several currencies and ranges: the reward offers the
    campaign's products that take it, and is refused only when none does."""
    campaign = make_campaign(http, products=[PIXEL_ARCADE, GIFT_CARD_GBP, TRAVEL_MULTI])  # USD 5..100, GBP, USD 25..

    def offered(denomination) -> list[str]:
        return place(http, org.member_email, products=None, campaign_id=campaign["id"],
                     denomination=denomination)["rewards"][0]["products"]

    assert offered(10) == [PIXEL_ARCADE]
    assert offered(50) == [PIXEL_ARCADE, TRAVEL_MULTI]
    assert offered(500) == [TRAVEL_MULTI]
    before = snapshot(http)
    too_much = order_body(org.member_email, products=None, campaign_id=campaign["id"], denomination=5000)
    assert error(http.post("/orders", json=too_much), 400)["payload"]["reward"]["value"]["denomination"] == [
        f"no product of campaign {campaign['id']} takes this value: their ranges lie between 5.00 and 1000.00 USD"]
    only_gbp = make_campaign(http, products=[GIFT_CARD_GBP])
    refused = error(http.post("/orders", json=order_body(org.member_email, products=None,
                                                         campaign_id=only_gbp["id"])), 400)
    assert refused["payload"]["reward"]["campaign_id"] == [
        f"none of campaign {only_gbp['id']}'s products is offered in USD"]
    assert snapshot(http) == before
    # Products named in the request are each checked: one that does not take the reward refuses it.
    named = order_body(org.member_email, products=[PIXEL_ARCADE, GIFT_CARD_GBP], campaign_id=campaign["id"],
                       denomination=10)
    assert "products" in error(http.post("/orders", json=named), 400)["payload"]["reward"]
    # A campaign made from ALL_FEE_FREE (products of four currencies) sends in USD.
    fee_free = ok(http.post("/campaigns", json={"name": "All fee-free", "products": ["ALL_FEE_FREE"]}))["campaign"]
    order = client_order(api, order_body(org.member_email, products=None, campaign_id=fee_free["id"]))
    offered = ok(http.get(f"/rewards/{order.rewards[0].id}"))["reward"]["products"]
    assert offered and set(offered) < set(fee_free["products"])


def test_custom_fields_stored_and_read_back_with_label(org, api, http):
    from tremendous import CreateFieldRequest

    field = api.create_field(CreateFieldRequest.from_dict({
        "display_name": "Team Name", "data_type": "Dropdown", "data": {"options": ["Red", "Blue"]},
        "required": False})).var_field
    assert field.label == "Team Name"
    order = client_order(api, order_body(org.member_email, custom_fields=[{"id": field.id, "value": "Blue"}]))
    expected = {"id": field.id, "value": "Blue", "label": "Team Name"}

    reward = ok(http.get(f"/rewards/{order.rewards[0].id}"))["reward"]
    assert reward["custom_fields"] == [expected]
    cf = api.get_order(order.id).order.rewards[0].custom_fields[0]
    assert (cf.id, cf.value, cf.label) == (field.id, "Blue", "Team Name")
    found = client_search_rewards(api, [("Team Name", "Blue")])
    assert [r.id for r in found.rewards] == [order.rewards[0].id]
    assert found.rewards[0].custom_fields[0].label == "Team Name"
    assert client_search_rewards(api, [("Team Name", "Red")]).rewards == []


def test_custom_fields_come_back_in_one_order_from_create_and_reads(org, http):
    """By label: the create response lists them as GET /rewards/{id}, GET /orders/{id} and the
    search do, whatever order the request gave."""
    dept = make_field(http, options=("Eng", "Ops"), name="dept")
    cost = make_field(http, options=("Z", "Y"), name="cost center")
    created = place(http, org.member_email, custom_fields=[{"id": dept["id"], "value": "Eng"},
                                                           {"id": cost["id"], "value": "Z"}])
    listed = created["rewards"][0]["custom_fields"]
    assert [f["label"] for f in listed] == ["cost center", "dept"]
    reward_id = created["rewards"][0]["id"]
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["custom_fields"] == listed
    assert ok(http.get(f"/orders/{created['id']}"))["order"]["rewards"][0]["custom_fields"] == listed
    assert ok(http.get("/rewards", params={"dept": "Eng"}))["rewards"][0]["custom_fields"] == listed


def test_dropdown_value_outside_options_is_refused(org, http):
    field = make_field(http, options=["Sales", "Support"])
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(
        org.member_email, custom_fields=[{"id": field["id"], "value": "Marketing"}])), 400)
    assert list(errors["payload"]["reward"]["custom_fields"]["0"]) == ["value"]
    assert "Sales" in errors["payload"]["reward"]["custom_fields"]["0"]["value"][0]
    assert snapshot(http) == before


def test_unknown_custom_field_is_400(org, http):
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(
        org.member_email, custom_fields=[{"id": "NOSUCHFIELD00", "value": "x"}])), 400)
    assert "id" in errors["payload"]["reward"]["custom_fields"]["0"]
    assert snapshot(http) == before


def test_required_field_must_be_present(org, http):
    field = make_field(http, required=True)
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(org.member_email)), 400)
    assert field["label"] in errors["payload"]["reward"]["custom_fields"][0]
    assert snapshot(http) == before
    place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "Sales"}])


def test_a_null_value_gives_an_optional_field_none_and_a_required_one_is_400(org, http):
    """The Node client declares `custom_fields[].value?: string | null` and sends the null it is
    given; it was a 400 'Input should be a valid string' whatever the field."""
    optional = make_field(http, data_type="Text", options=None)
    order = place(http, org.member_email, custom_fields=[{"id": optional["id"], "value": None}])
    assert order["rewards"][0]["custom_fields"] == []
    required = make_field(http, data_type="Text", options=None, required=True)
    before = snapshot(http)
    body = order_body(org.member_email, custom_fields=[{"id": required["id"], "value": None}])
    errors = error(http.post("/orders", json=body), 400)
    assert "value" in errors["payload"]["reward"]["custom_fields"]["0"], errors
    body = order_body(org.member_email, custom_fields=[{"id": required["id"]}])  # the key is still required
    assert "value" in error(http.post("/orders", json=body), 400)["payload"]["reward"]["custom_fields"]["0"]
    assert snapshot(http) == before


def test_required_text_field_must_not_be_blank(org, http):
    field = make_field(http, data_type="Text", options=None, required=True)
    before = snapshot(http)
    for blank in ("", "   "):
        body = order_body(org.member_email, custom_fields=[{"id": field["id"], "value": blank}])
        errors = error(http.post("/orders", json=body), 400)
        assert "value" in errors["payload"]["reward"]["custom_fields"]["0"]
    assert snapshot(http) == before
    place(http, org.member_email, custom_fields=[{"id": field["id"], "value": "x"}])
    optional = make_field(http, data_type="Text", options=None)
    place(http, org.member_email,
          custom_fields=[{"id": field["id"], "value": "x"}, {"id": optional["id"], "value": ""}])


def test_sandbox_recipient_must_be_a_member(org, http):
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body("stranger@example.com")), 400)
    assert "email" in errors["payload"]["reward"]["recipient"]
    assert snapshot(http) == before
    local, domain = org.member_email.split("@")
    place(http, f"{local}+tagged@{domain}")
    place(http, org.member_email.upper())


def test_sandbox_lookalike_of_a_member_address_is_a_stranger(org, http):
    """KELVIN SIGN lower-cases to "k" but names another mailbox: it must not pass for kim's."""
    kim = f"kim-{unique('m')}@example.org"
    ok(http.post("/members", json={"email": kim, "role": "MEMBER"}))
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(kim.replace("k", "\u212a", 1))), 400)
    assert "email" in errors["payload"]["reward"]["recipient"]
    assert snapshot(http) == before
    place(http, kim.replace("k", "K", 1))


def test_sandbox_member_rule_per_reward_and_per_organization(org, other_org, http):
    """The member check is asked inside the order's context statement for one address and by a
    query of its own for several: both give the same answers, for this organization only."""
    def rewards_body(*emails):
        one = order_body(org.member_email)["reward"]
        return {"payment": {"funding_source_id": "balance"},
                "rewards": [{**one, "recipient": {"name": "R", "email": e}} for e in emails]}

    before = snapshot(http)
    # Another organization's member is a stranger here, alone or among this org's members.
    errors = error(http.post("/orders", json=order_body(other_org.member_email)), 400)
    assert "email" in errors["payload"]["reward"]["recipient"]
    errors = error(http.post("/orders", json=rewards_body(org.member_email, other_org.member_email)), 400)
    assert list(errors["payload"]["rewards"]) == ["1"]
    assert snapshot(http) == before
    # Two rewards to one member (one address), and two spellings of it.
    local, domain = org.member_email.split("@")
    for body in (rewards_body(org.member_email, org.member_email),
                 rewards_body(org.member_email, f"{local}+x@{domain}".upper())):
        order = ok(http.post("/orders", json=body))["order"]
        assert len(order["rewards"]) == 2


def test_production_accepts_any_valid_email(engine, make_server):
    from tests.conftest import production_org

    server = make_server(environment="production")
    with production_org(engine, server.url).http() as prod:
        order = place(prod, "anyone@elsewhere.example.org")
        assert order["rewards"][0]["recipient"]["email"] == "anyone@elsewhere.example.org"
        errors = error(prod.post("/orders", json=order_body("not-an-email")), 400)
        assert "email" in errors["payload"]["reward"]["recipient"]


def test_phone_delivery_without_sms_transport_names_the_setting(org, http):
    body = order_body(org.member_email, method="PHONE")
    body["reward"]["recipient"] = {"name": "R", "phone": "+14155550100"}
    before = snapshot(http)
    errors = error(http.post("/orders", json=body), 400)
    assert "LARGESSE_SMS_URL" in errors["message"]
    assert "LARGESSE_SMS_URL" in errors["payload"]["reward"]["delivery"]["method"][0]
    assert snapshot(http) == before


@pytest.mark.parametrize("denomination", [0, -5, 10.005, 0.001, 501, 4.99, "10", True, None, [10], {"a": 1}])
def test_bad_denomination_is_400_with_mirrored_payload(org, http, denomination):
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(org.member_email, denomination=denomination)), 400)
    assert list(errors["payload"]) == ["reward"]
    assert list(errors["payload"]["reward"]) == ["value"]
    messages = errors["payload"]["reward"]["value"]["denomination"]
    assert isinstance(messages, list) and all(isinstance(m, str) for m in messages)
    assert snapshot(http) == before


def test_band_is_per_product(org, http):
    # 150 is inside the gift card's band but above Pixel Arcade's 5..100.
    errors = error(http.post("/orders", json=order_body(
        org.member_email, denomination=150, products=[GIFT_CARD_USD, PIXEL_ARCADE])), 400)
    assert PIXEL_ARCADE in errors["payload"]["reward"]["value"]["denomination"][0]
    place(http, org.member_email, denomination=100, products=[GIFT_CARD_USD, PIXEL_ARCADE])


def test_denomination_with_two_decimals_is_exact(org, http):
    order = place(http, org.member_email, denomination=19.99)
    assert order["payment"]["total"] == 19.99
    assert available_cents(http) == 500000 - 1999


def test_currency_code_is_case_insensitive(org, http):
    # Rewards in another currency convert (tests/funding/test_currencies.py).
    before = snapshot(http)
    body = order_body(org.member_email, products=[TRAVEL_MULTI])
    body["reward"]["value"] = {"denomination": 30, "currency_code": "usd"}
    assert "conversion" not in ok(http.post("/orders", json=body))["order"]["payment"]
    assert snapshot(http)[0] == before[0] - 3000


def test_product_without_the_currency_is_refused(org, http):
    errors = error(http.post("/orders", json=order_body(org.member_email, products=[GIFT_CARD_GBP])), 400)
    assert "products" in errors["payload"]["reward"]


def test_overdraft_is_402_and_changes_nothing(org, http):
    place(http, org.member_email, denomination=4990, products=[CHARITY_USD])
    assert available_cents(http) == 1000
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(org.member_email, denomination=10.01)), 402)
    assert errors["payload"] == {"payment": {"funding_source_id": ["insufficient funds"]}}
    assert snapshot(http) == before
    place(http, org.member_email, denomination=10)
    assert available_cents(http) == 0


@pytest.mark.parametrize("keyword", ["balance", "BALANCE", "Balance", "real-id"])
def test_funding_source_keyword_or_id(org, http, keyword):
    body = order_body(org.member_email)
    body["payment"]["funding_source_id"] = org.funding_source_id if keyword == "real-id" else keyword
    ok(http.post("/orders", json=body))
    assert available_cents(http) == 500000 - 2500


@pytest.mark.parametrize("source", ["INVOICE", "invoice", "INVOICE_THEN_BALANCE"])
def test_invoice_is_refused(org, http, source):
    body = order_body(org.member_email)
    body["payment"]["funding_source_id"] = source
    before = snapshot(http)
    errors = error(http.post("/orders", json=body), 400)
    assert "funding_source_id" in errors["payload"]["payment"]
    assert snapshot(http) == before


def test_unknown_funding_source_is_400(org, api, http):
    body = order_body(org.member_email)
    body["payment"]["funding_source_id"] = "NOSUCHSOURCE00"
    errors = error(http.post("/orders", json=body), 400)
    assert errors["payload"] == {"payment": {"funding_source_id": ["not found"]}}
    # A 400 is an error body create_order decodes (it decodes none for 404).
    with pytest.raises(BadRequestException) as caught:
        client_order(api, body)
    assert caught.value.data.errors.payload == {"payment": {"funding_source_id": ["not found"]}}


def test_unknown_product_is_400(org, http):
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(org.member_email, products=["NOSUCHPRODUCT0"])), 400)
    assert "NOSUCHPRODUCT0" in errors["payload"]["reward"]["products"][0]
    assert snapshot(http) == before


@pytest.mark.parametrize("language", ["zz", "xx-invalid", "english", "e", "", 5])
def test_language_not_iso_639_1_is_400(org, http, language):
    # API.md §2.1: language is an ISO-639-1 code.
    before = snapshot(http)
    errors = error(http.post("/orders", json=order_body(org.member_email, language=language)), 400)
    assert list(errors["payload"]["reward"]) == ["language"]
    assert snapshot(http) == before


@pytest.mark.parametrize(("language", "stored"), [("de", "de"), ("EN", "en"), ("pt-BR", "pt-BR"),
                                                   ("zh-Hant", "zh-Hant"), ("PT-br", "pt-br")])
def test_language_iso_639_1_with_subtags_is_accepted(org, http, engine, language, stored):
    """docs/api.md: stored with the code in lower case, the subtags as given (the API's reward
    has no language field: the email's copy carries it, tests/delivery/test_email.py)."""
    from tests.delivery.conftest import reward_row

    order = ok(http.post("/orders", json=order_body(org.member_email, language=language)))["order"]
    assert reward_row(engine, order["rewards"][0]["id"]).language == stored


def test_unknown_campaign_is_400(org, http):
    errors = error(http.post("/orders", json=order_body(org.member_email, campaign_id="NOSUCHCAMPAIGN")), 400)
    assert "campaign_id" in errors["payload"]["reward"]


def test_rewards_array_pays_for_all(org, http):
    order = ok(http.post("/orders", json=many_rewards_body(org.member_email, [10, 20.5, 30])))["order"]
    assert order["payment"] == {"subtotal": 60.5, "total": 60.5, "fees": 0, "discount": 0, "currency_code": "USD"}
    assert sorted(r["value"]["denomination"] for r in order["rewards"]) == [10, 20.5, 30]
    assert len({r["id"] for r in order["rewards"]}) == 3
    assert available_cents(http) == 500000 - 6050
    listed = ok(http.get(f"/orders/{order['id']}"))["order"]
    assert len(listed["rewards"]) == 3 and listed["payment"]["total"] == 60.5


def test_an_orders_rewards_read_back_in_the_requests_order(org, http):
    # A client pairs order.rewards[i] with its own request's item i, after a read too.
    denominations = [12, 5, 30, 7, 25, 6, 9, 10, 11, 8, 20, 15]
    order = ok(http.post("/orders", json=many_rewards_body(org.member_email, denominations)))["order"]
    created = [r["id"] for r in order["rewards"]]
    assert [r["value"]["denomination"] for r in order["rewards"]] == denominations
    read = ok(http.get(f"/orders/{order['id']}"))["order"]["rewards"]
    assert [r["id"] for r in read] == created
    assert [r["value"]["denomination"] for r in read] == denominations
    listed = ok(http.get("/orders"))["orders"][0]["rewards"]
    assert [r["id"] for r in listed] == created


def test_error_in_second_reward_mirrors_its_index(org, http):
    body = many_rewards_body(org.member_email, [10, 0])
    before = snapshot(http)
    errors = error(http.post("/orders", json=body), 400)
    assert "denomination" in errors["payload"]["rewards"]["1"]["value"]
    assert snapshot(http) == before


def test_reward_and_rewards_together_is_refused(org, http):
    body = many_rewards_body(org.member_email, [10])
    body["reward"] = body["rewards"][0]
    error(http.post("/orders", json=body), 400)
    error(http.post("/orders", json={"payment": {"funding_source_id": "balance"}, "rewards": []}), 400)


def test_org_fee_settings_apply(org, http, cli):
    cli("org", "fees", "--org", org.id, "--basis-points", "250", "--flat", "0.50")
    order = ok(http.post("/orders", json=many_rewards_body(org.member_email, [20, 40])))["order"]
    # 2.5% of 20 + 0.50 = 1.00; 2.5% of 40 + 0.50 = 1.50
    assert order["payment"]["subtotal"] == 60 and order["payment"]["fees"] == 2.5
    assert order["payment"]["total"] == 62.5
    assert available_cents(http) == 500000 - 6250


def test_a_percentage_fee_rounds_half_up_to_the_cent(org, http, cli):
    """docs/api.md: the percentage is in basis points, rounded half up: 2.5 % of 20.20 USD is
    50.5 cents, charged as 0.51 (a truncation would charge 0.50)."""
    cli("org", "fees", "--org", org.id, "--basis-points", "250")
    order = ok(http.post("/orders", json=many_rewards_body(org.member_email, [20.20])))["order"]
    assert (order["payment"]["subtotal"], order["payment"]["fees"], order["payment"]["total"]) == (20.2, 0.51, 20.71)
    assert available_cents(http) == 500000 - 2071


def test_a_zero_decimal_currencys_range_is_written_without_decimals(engine, server):
    """The band of a JPY product, in the message of a refused denomination: "100 and 100000 JPY",
    not "100.00 and 100000.00 JPY" (amounts of a currency are written with its own decimals)."""
    from tests.yen_kit import yen_order_body, yen_org, yen_product

    org, product = yen_org(engine, server.url), yen_product(engine)
    with org.http() as http:
        refused = error(http.post("/orders", json=yen_order_body(org.member_email, product, yen=50)), 400)
    assert refused["payload"]["reward"]["value"]["denomination"] == [
        f"must be between 100 and 100000 JPY for product {product}"]
