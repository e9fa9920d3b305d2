"""/campaigns: create (ALL_FEE_FREE), get, list, partial PUT, validation and unknown products (422)."""

from __future__ import annotations

import concurrent.futures
import json
import re
import secrets
import threading

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

    # Built with keywords, the request carries only the keys given (from_dict() would send
    # description and auto_add_product_rule as null, which clears them: test_null_clears_...).
    updated = api.update_campaign(created.id, UpdateCampaignRequest(name="Holiday 2")).campaign
    assert updated.name == "Holiday 2" and updated.description == "Year end"
    assert _products(updated) == [GIFT_CARD_USD, CHARITY_USD]
    updated = api.update_campaign(created.id, UpdateCampaignRequest.from_dict({"products": [TRAVEL_MULTI],
                                                                              "description": "Year end"})).campaign
    assert updated.name == "Holiday 2" and _products(updated) == [TRAVEL_MULTI] and updated.description == "Year end"
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


def test_concurrent_style_updates_keep_each_others_keys(org):
    """Each PUT merges its style keys into the stored ones; PUTs at once must not lose each
    other's (on PostgreSQL two merges of one stale read did)."""
    updates = [{"webpage_style": {"headline": "H"}}, {"webpage_style": {"message": "M"}},
               {"webpage_style": {"background_color": "#111111"}},
               {"webpage_style": {"logo_background_color": "#222"}},
               {"email_style": {"sender_name": "S"}}, {"email_style": {"subject_line": "Subject"}},
               {"email_style": {"button_color": "#333333"}}, {"email_style": {"logo_background_color": "#444"}}]
    barrier = threading.Barrier(len(updates))

    def put(campaign_id: str, body: dict) -> int:
        with org.http() as http:
            barrier.wait()
            return http.put(f"/campaigns/{campaign_id}", json=body).status_code

    for _ in range(3):  # a fresh campaign each round: a lost key shows in the round it is lost
        with org.http() as http:
            campaign_id = make_campaign(http)["id"]
        with concurrent.futures.ThreadPoolExecutor(len(updates)) as pool:
            assert list(pool.map(put, [campaign_id] * len(updates), updates)) == [200] * len(updates)
        with org.http() as http:
            stored = ok(http.get(f"/campaigns/{campaign_id}"))["campaign"]
        assert stored["webpage_style"] == {"headline": "H", "message": "M", "background_color": "#111111",
                                           "logo_background_color": "#222"}
        assert stored["email_style"] == {"sender_name": "S", "subject_line": "Subject",
                                         "button_color": "#333333", "logo_background_color": "#444"}


@pytest.mark.parametrize("style", [
    {"webpage_style": {"background_color": "red"}},
    {"email_style": {"button_color": "#12345"}},
    {"webpage_style": {"logo_background_color": "#GGGGGG"}},
    # a final newline: a pattern's $ matches before it, and the page and the email then failed
    {"webpage_style": {"background_color": "#FFF\n"}},
    {"webpage_style": {"logo_background_color": "#abc\n"}},
    {"email_style": {"button_color": "#000\n"}},
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
    {"name": " ", "products": [GIFT_CARD_USD]},  # a blank name names nothing in a list or a picker
    {"name": "\n", "products": [GIFT_CARD_USD]},
    {"name": "\u200b", "products": [GIFT_CARD_USD]},  # invisible
    {"name": 5, "products": [GIFT_CARD_USD]},
    {"name": "C", "products": GIFT_CARD_USD},
    {"name": "C", "products": [GIFT_CARD_USD], "fee_charged_to": "NOBODY"},
    {"name": "C", "products": [GIFT_CARD_USD], "webpage_style": {"logo_image_height_px": "40"}},
])
def test_invalid_create_is_422(http, body):
    error(http.post("/campaigns", json=body), 422)
    assert ok(http.get("/campaigns"))["campaigns"] == []
    if isinstance(body.get("name"), str) and not body["name"].strip():  # a PUT of it changes nothing
        campaign = make_campaign(http)
        error(http.put(f"/campaigns/{campaign['id']}", json={"name": body["name"]}), 422)
        assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"] == campaign


RULE = {"enabled": True, "countries": ["US"], "currencies": ["USD"]}


def test_null_clears_description_and_auto_add_rule_and_absent_keys_stay(http):
    campaign = make_campaign(http, description="Old", auto_add_product_rule=RULE)
    assert campaign["auto_add_product_rule"] == RULE
    kept = ok(http.put(f"/campaigns/{campaign['id']}", json={"name": "Renamed"}))["campaign"]
    assert kept == {**campaign, "name": "Renamed"}
    cleared = ok(http.put(f"/campaigns/{campaign['id']}",
                          json={"description": None, "auto_add_product_rule": None}))["campaign"]
    assert cleared["description"] is None and "auto_add_product_rule" not in cleared
    assert cleared["name"] == "Renamed" and cleared["products"] == campaign["products"]
    assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"] == cleared


def test_client_none_clears_description_and_auto_add_rule(api, http):
    # What the official client sends when the caller sets the nullable keys to None.
    from tremendous import UpdateCampaignRequest

    campaign = make_campaign(http, description="Old", auto_add_product_rule=RULE)
    request = UpdateCampaignRequest(description=None, auto_add_product_rule=None)
    assert request.to_dict() == {"description": None, "auto_add_product_rule": None}
    updated = api.update_campaign(campaign["id"], request).campaign
    assert updated.description is None and updated.auto_add_product_rule is None
    assert updated.name == campaign["name"] and _products(updated) == campaign["products"]
    fetched = ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"]
    expected = {k: v for k, v in campaign.items() if k != "auto_add_product_rule"}
    assert fetched == {**expected, "description": None}


def test_null_clears_the_other_nullable_keys(http):
    campaign = make_campaign(http, webpage_style={"headline": "Hi"}, email_style={"sender_name": "Ann"},
                             reward_expiry_days=30)
    cleared = ok(http.put(f"/campaigns/{campaign['id']}", json={"webpage_style": None, "email_style": None,
                                                                "reward_expiry_days": None}))["campaign"]
    assert not {"webpage_style", "email_style", "reward_expiry_days"} & set(cleared)
    assert cleared == {k: v for k, v in campaign.items()
                       if k not in ("webpage_style", "email_style", "reward_expiry_days")}


@pytest.mark.parametrize("key", ["name", "products"])
def test_null_name_or_products_is_422_as_on_create(http, key):
    # Neither can be null on create either (both required).
    body = {"name": "C", "products": [GIFT_CARD_USD], key: None}
    assert key in error(http.post("/campaigns", json=body), 422)["payload"]
    campaign = make_campaign(http, description="Kept")
    errors = error(http.put(f"/campaigns/{campaign['id']}", json={key: None, "description": None}), 422)
    assert list(errors["payload"]) == [key]
    assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"] == campaign


def test_null_fee_charged_to_keeps_it_as_a_null_on_create_means_the_default(api, http):
    # Create takes fee_charged_to null as "the default" (SENDER), and the client's from_dict()
    # sends it as null in every create and update: on update it leaves the value unchanged.
    from tremendous import UpdateCampaignRequest

    assert make_campaign(http, fee_charged_to=None)["fee_charged_to"] == "SENDER"
    campaign = make_campaign(http, fee_charged_to="RECIPIENT")
    assert ok(http.put(f"/campaigns/{campaign['id']}", json={"fee_charged_to": None}))["campaign"] == campaign
    request = UpdateCampaignRequest.from_dict({"name": "From dict"})
    assert request.to_dict()["fee_charged_to"] is None
    updated = api.update_campaign(campaign["id"], request).campaign
    assert (updated.name, updated.fee_charged_to) == ("From dict", "RECIPIENT")


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


def _product_with_fees(cli, tmp_path) -> str:
    """A product that is not fee-free (the shipped catalog has none), imported by the operator."""
    pid = "PFEE" + secrets.token_hex(5).upper()
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"products": [{
        "id": pid, "name": "Premium Card", "category": "merchant_card", "currency_codes": ["USD"],
        "countries": ["US"], "images": [], "description": "d", "disclosure": "", "fee_free": False,
        "skus": [{"min": 5, "max": 500, "currency_code": "USD"}]}]}))
    cli("products", "import", str(path))
    return pid


FEE_FREE_NEEDED = "must include a fee-free product when fee_charged_to is RECIPIENT"


def test_recipient_campaign_without_products_is_422(api, http):
    # API.md §2.2: a RECIPIENT campaign needs at least one fee-free product.
    from tremendous import CreateCampaignRequest
    from tremendous.exceptions import UnprocessableEntityException

    errors = error(http.post("/campaigns", json={"name": "re", "products": [], "fee_charged_to": "RECIPIENT"}), 422)
    assert errors["payload"] == {"products": [FEE_FREE_NEEDED]}
    assert ok(http.get("/campaigns"))["campaigns"] == []
    with pytest.raises(UnprocessableEntityException) as caught:
        api.create_campaign(CreateCampaignRequest(name="re", description=None, products=[], fee_charged_to="RECIPIENT"))
    assert caught.value.data.errors.payload == {"products": [FEE_FREE_NEEDED]}
    # A SENDER campaign may still have no products.
    assert ok(http.post("/campaigns", json={"name": "se", "products": []}))["campaign"]["products"] == []


def test_recipient_campaign_needs_a_fee_free_product_among_its_products(http, cli, tmp_path):
    priced = _product_with_fees(cli, tmp_path)
    body = {"name": "re", "products": [priced], "fee_charged_to": "RECIPIENT"}
    assert error(http.post("/campaigns", json=body), 422)["payload"] == {"products": [FEE_FREE_NEEDED]}
    assert ok(http.get("/campaigns"))["campaigns"] == []
    created = ok(http.post("/campaigns", json={**body, "products": [priced, GIFT_CARD_USD]}))["campaign"]
    assert created["fee_charged_to"] == "RECIPIENT" and created["products"] == [priced, GIFT_CARD_USD]
    assert ok(http.post("/campaigns", json={**body, "products": ["ALL_FEE_FREE"]}))["campaign"]["products"]
    assert make_campaign(http, products=[priced])["fee_charged_to"] == "SENDER"


def test_update_keeps_the_recipient_rule_for_the_campaign_as_saved(http, cli, tmp_path):
    priced = _product_with_fees(cli, tmp_path)
    sender = make_campaign(http, products=[priced])
    # Switching to RECIPIENT checks the products it keeps.
    errors = error(http.put(f"/campaigns/{sender['id']}", json={"fee_charged_to": "RECIPIENT"}), 422)
    assert errors["payload"] == {"products": [FEE_FREE_NEEDED]}
    assert ok(http.get(f"/campaigns/{sender['id']}"))["campaign"] == sender
    switched = ok(http.put(f"/campaigns/{sender['id']}", json={"fee_charged_to": "RECIPIENT",
                                                               "products": [priced, CHARITY_USD]}))["campaign"]
    assert switched["fee_charged_to"] == "RECIPIENT" and switched["products"] == [priced, CHARITY_USD]

    # A RECIPIENT campaign cannot lose its last fee-free product, nor all of them.
    for products in ([], [priced]):
        errors = error(http.put(f"/campaigns/{sender['id']}", json={"products": products}), 422)
        assert errors["payload"] == {"products": [FEE_FREE_NEEDED]}
        assert ok(http.get(f"/campaigns/{sender['id']}"))["campaign"] == switched
    # Switching back to SENDER in the same request allows them.
    back = ok(http.put(f"/campaigns/{sender['id']}", json={"fee_charged_to": "SENDER", "products": []}))["campaign"]
    assert (back["fee_charged_to"], back["products"]) == ("SENDER", [])
    # Other keys of a RECIPIENT campaign change as before.
    recipient = make_campaign(http, fee_charged_to="RECIPIENT")
    assert ok(http.put(f"/campaigns/{recipient['id']}", json={"name": "n"}))["campaign"]["name"] == "n"


def test_a_colour_stored_before_the_check_was_exact_falls_back_on_the_page(org, engine):
    """A campaign stored with "#FFF\\n" (accepted before the colour check refused a final
    newline) shows its links with the default colours instead of failing them."""
    from sqlalchemy import update

    from largesse import db
    from largesse.campaigns.models import campaigns
    from tests.redemption.conftest import GIFT_CARD, link_reward, page_client

    with org.http() as http:
        campaign = make_campaign(http, products=(GIFT_CARD,), webpage_style={"background_color": "#ffcc00"})
    with db.write(engine) as conn:
        conn.execute(update(campaigns).where(campaigns.c.id == campaign["id"]).values(
            webpage_style={"background_color": "#FFF\n", "logo_background_color": "#abc\n"}))
    _, link = link_reward(org, products=None, campaign_id=campaign["id"])
    with page_client() as client:
        page = client.get(link)
    assert page.status_code == 200 and "#FFF" not in page.text
