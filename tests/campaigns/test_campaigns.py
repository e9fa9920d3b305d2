"""/campaigns: create (ALL_FEE_FREE), get, list, partial PUT, validation and unknown products (422)."""

from __future__ import annotations

import re

import pytest

from tests.factories import CHARITY_USD, GIFT_CARD_USD, TRAVEL_MULTI, error, make_campaign, ok


def _create(api, body: dict):
    from tremendous import CreateCampaignRequest

    return api.create_campaign(CreateCampaignRequest.from_dict(body)).campaign


def _products(campaign) -> list[str]:
    return [p.actual_instance if hasattr(p, "actual_instance") else p for p in campaign.products]


def test_client_create_get_list_update(api, http):
    from tremendous import UpdateCampaignRequest

    created = _create(api, {"name": "Holiday", "description": "Year end", "products": [GIFT_CARD_USD, CHARITY_USD]})
    assert re.match(r"^[A-Z0-9]{12,20}$", created.id)
    assert created.name == "Holiday" and created.description == "Year end"
    assert _products(created) == [GIFT_CARD_USD, CHARITY_USD]
    fetched = api.get_campaign(created.id).campaign
    assert fetched.id == created.id and _products(fetched) == [GIFT_CARD_USD, CHARITY_USD]
    assert created.id in [c.id for c in api.list_campaigns().campaigns]

    updated = api.update_campaign(created.id, UpdateCampaignRequest.from_dict({"name": "Holiday 2"})).campaign
    assert updated.name == "Holiday 2" and updated.description == "Year end"
    assert _products(updated) == [GIFT_CARD_USD, CHARITY_USD]
    updated = api.update_campaign(created.id, UpdateCampaignRequest.from_dict({"products": [TRAVEL_MULTI]})).campaign
    assert updated.name == "Holiday 2" and _products(updated) == [TRAVEL_MULTI]
    assert ok(http.get(f"/campaigns/{created.id}"))["campaign"]["products"] == [TRAVEL_MULTI]


def test_all_fee_free_expands_to_the_fee_free_catalog(api, http):
    fee_free = [p["id"] for p in ok(http.get("/products", params={"id": "ALL_FEE_FREE"}))["products"]]
    assert fee_free
    campaign = _create(api, {"name": "Everything", "products": ["ALL_FEE_FREE", GIFT_CARD_USD]})
    assert sorted(_products(campaign)) == sorted(fee_free)
    assert "ALL_FEE_FREE" not in _products(campaign)
    assert len(_products(campaign)) == len(set(_products(campaign)))


def test_put_is_partial_for_styles(http):
    campaign = make_campaign(http, webpage_style={"headline": "Thanks!", "background_color": "#FFFFFF"})
    body = ok(http.put(f"/campaigns/{campaign['id']}", json={"webpage_style": {"headline": "Cheers"},
                                                             "description": "new"}))["campaign"]
    assert body["webpage_style"] == {"headline": "Cheers", "background_color": "#FFFFFF"}
    assert body["description"] == "new" and body["name"] == campaign["name"]


@pytest.mark.parametrize("style", [
    {"webpage_style": {"background_color": "red"}},
    {"email_style": {"button_color": "#12345"}},
    {"webpage_style": {"logo_background_color": "#GGGGGG"}},
])
def test_invalid_colour_is_422(http, style):
    errors = error(http.post("/campaigns", json={"name": "C", "products": [GIFT_CARD_USD], **style}), 422)
    (key,) = style
    assert key in errors["payload"]
    campaign = make_campaign(http)
    error(http.put(f"/campaigns/{campaign['id']}", json=style), 422)


def test_client_sees_422_body(api):
    from tremendous.exceptions import UnprocessableEntityException

    with pytest.raises(UnprocessableEntityException) as caught:
        _create(api, {"name": "C", "products": [GIFT_CARD_USD], "webpage_style": {"background_color": "red"}})
    assert caught.value.data.errors.payload is not None


def test_unknown_product_is_422_which_the_client_decodes(api, http):
    # create_campaign and update_campaign decode the error body of 422 only (API.md §1).
    from tremendous.exceptions import UnprocessableEntityException

    errors = error(http.post("/campaigns", json={"name": "C", "products": [GIFT_CARD_USD, "NOSUCHPRODUCT0"]}), 422)
    assert "NOSUCHPRODUCT0" in errors["payload"]["products"][0]
    campaign = make_campaign(http)
    error(http.put(f"/campaigns/{campaign['id']}", json={"products": ["NOSUCHPRODUCT0"]}), 422)
    assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"]["products"] == [GIFT_CARD_USD]
    with pytest.raises(UnprocessableEntityException) as caught:
        _create(api, {"name": "C", "products": ["NOSUCHPRODUCT0"]})
    assert caught.value.data.errors.payload == {"products": ["unknown product NOSUCHPRODUCT0"]}


@pytest.mark.parametrize(("rule", "key"), [
    ({"enabled": True, "countries": ["ZZ"]}, "countries"),
    ({"enabled": True, "countries": ["US", "QQ"]}, "countries"),
    ({"enabled": True, "currencies": ["XYZ"]}, "currencies"),
    ({"enabled": False, "countries": ["US"], "currencies": ["ABC"]}, "currencies"),
])
def test_auto_add_rule_with_an_unknown_country_or_currency_is_422(http, rule, key):
    # API.md §2.2: "an unknown country or currency gives 422", on create and on update.
    errors = error(http.post("/campaigns", json={"name": "C", "products": [GIFT_CARD_USD],
                                                 "auto_add_product_rule": rule}), 422)
    assert list(errors["payload"]["auto_add_product_rule"]) == [key]
    campaign = make_campaign(http)
    error(http.put(f"/campaigns/{campaign['id']}", json={"auto_add_product_rule": rule}), 422)
    assert "auto_add_product_rule" not in ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"]
    assert [c["id"] for c in ok(http.get("/campaigns"))["campaigns"]] == [campaign["id"]]


def test_auto_add_rule_codes_are_kept_upper_case(http):
    rule = {"enabled": True, "countries": ["us", "CA", "US"], "currencies": ["usd"]}
    created = ok(http.post("/campaigns", json={"name": "C", "products": [GIFT_CARD_USD],
                                               "auto_add_product_rule": rule}))["campaign"]
    expected = {"enabled": True, "countries": ["US", "CA"], "currencies": ["USD"]}
    assert created["auto_add_product_rule"] == expected
    assert ok(http.get(f"/campaigns/{created['id']}"))["campaign"]["auto_add_product_rule"] == expected


@pytest.mark.parametrize("body", [
    {"products": [GIFT_CARD_USD]},
    {"name": "C"},
    {"name": "", "products": [GIFT_CARD_USD]},
    {"name": 5, "products": [GIFT_CARD_USD]},
    {"name": "C", "products": GIFT_CARD_USD},
    {"name": "C", "products": [GIFT_CARD_USD], "fee_charged_to": "NOBODY"},
    {"name": "C", "products": [GIFT_CARD_USD], "webpage_style": {"logo_image_height_px": "40"}},
])
def test_invalid_create_is_422(http, body):
    error(http.post("/campaigns", json=body), 422)


def test_null_keys_in_update_change_nothing(http):
    # The client's from_dict() sends description/fee_charged_to/auto_add_product_rule as null.
    campaign = make_campaign(http, description="Kept", webpage_style={"headline": "Hi"})
    nulls = {k: None for k in ("name", "products", "description", "fee_charged_to", "auto_add_product_rule",
                               "webpage_style", "email_style")}
    assert ok(http.put(f"/campaigns/{campaign['id']}", json=nulls))["campaign"] == campaign
    assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"] == campaign


@pytest.mark.parametrize("body", [{"name": ""}, {"name": 7}, {"fee_charged_to": "NOBODY"}, {"products": "X"},
                                  {"products": [""]}, {"email_style": {"logo_image_height_px": 0}}])
def test_invalid_update_is_422_and_changes_nothing(http, body):
    campaign = make_campaign(http)
    error(http.put(f"/campaigns/{campaign['id']}", json=body), 422)
    assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"] == campaign


def test_unknown_campaign_is_404(api, http):
    from tremendous.exceptions import NotFoundException

    error(http.get("/campaigns/NOSUCHCAMPAIGN"), 404)
    error(http.put("/campaigns/NOSUCHCAMPAIGN", json={"name": "x"}), 404)
    with pytest.raises(NotFoundException):
        api.get_campaign("NOSUCHCAMPAIGN")
