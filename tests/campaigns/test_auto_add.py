"""auto_add_product_rule: gift cards the catalog import activates join the matching campaigns of
every organization; `{"enabled": false}` clears the rule; filters must be covered by an active
product (the client's AutoAddProductRule, API.md §2.2)."""

from __future__ import annotations

import json
import re
import secrets

import pytest
from sqlalchemy import select

from largesse import db
from largesse.campaigns.models import campaigns
from tests.factories import CHARITY_USD, GIFT_CARD_USD, error, make_campaign, ok


def _product(prefix: str = "PAUTO", *, category: str = "merchant_card", countries=("US",), currencies=("USD",),
             **extra) -> dict:
    return {"id": prefix + secrets.token_hex(4).upper(), "name": "Auto Card", "category": category,
            "countries": list(countries), "images": [], "description": "d", "disclosure": "",
            "skus": [{"min": 5, "max": 500, "currency_code": c} for c in currencies], **extra}


def _import(cli, tmp_path, *products: dict) -> str:
    path = tmp_path / f"catalog-{secrets.token_hex(3)}.json"
    path.write_text(json.dumps({"products": list(products)}))
    return cli("products", "import", str(path)).stdout


def _products(http, campaign: dict) -> list[str]:
    return ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"]["products"]


def _updated_at(engine, campaign: dict):
    with db.read(engine) as conn:
        return conn.execute(select(campaigns.c.updated_at).where(campaigns.c.id == campaign["id"])).scalar_one()


def test_imported_gift_cards_join_the_matching_campaigns_of_every_organization(http, other_org, cli, tmp_path,
                                                                               engine):
    everything = make_campaign(http, products=[CHARITY_USD, GIFT_CARD_USD], auto_add_product_rule={"enabled": True})
    us = make_campaign(http, auto_add_product_rule={"enabled": True, "countries": ["US"]})
    gb = make_campaign(http, auto_add_product_rule={"enabled": True, "countries": ["GB"]})
    cad = make_campaign(http, auto_add_product_rule={"enabled": True, "countries": ["CA", "GB"],
                                                     "currencies": ["CAD"]})
    no_rule = make_campaign(http)
    with other_org.http() as other:
        usd_elsewhere = make_campaign(other, auto_add_product_rule={"enabled": True, "currencies": ["USD"]})
        gbp_elsewhere = make_campaign(other, auto_add_product_rule={"enabled": True, "currencies": ["GBP"]})
    before = _updated_at(engine, everything)

    gift_us = _product()
    gift_us_ca = _product(countries=("US", "CA"), currencies=("USD", "CAD"))
    not_gift_cards = [_product(category="visa_card"), _product(category="charity"), _product(fee_free=False),
                      _product(active=False)]
    printed = _import(cli, tmp_path, gift_us, *not_gift_cards, gift_us_ca)
    new = [gift_us["id"], gift_us_ca["id"]]
    assert re.search(r"6 created, 0 updated; \d+ added to \d+ campaigns by their auto_add_product_rule", printed)

    # Appended after the campaign's products, in the file's order; the others are not gift cards.
    assert _products(http, everything) == [CHARITY_USD, GIFT_CARD_USD, *new]
    assert _products(http, us) == [GIFT_CARD_USD, *new]
    assert _products(http, gb) == [GIFT_CARD_USD]
    assert _products(http, cad) == [GIFT_CARD_USD, gift_us_ca["id"]]  # both filters must match
    assert _products(http, no_rule) == [GIFT_CARD_USD]
    with other_org.http() as other:
        assert _products(other, usd_elsewhere) == [GIFT_CARD_USD, *new]
        assert _products(other, gbp_elsewhere) == [GIFT_CARD_USD]
    assert _updated_at(engine, everything) > before
    # The rule itself is unchanged, and the campaign with its new products reads as usual.
    assert ok(http.get(f"/campaigns/{us['id']}"))["campaign"]["auto_add_product_rule"] == {
        "enabled": True, "countries": ["US"]}

    # Importing them again (already active) adds nothing, and nothing twice.
    printed = _import(cli, tmp_path, gift_us, gift_us_ca)
    assert _products(http, everything) == [CHARITY_USD, GIFT_CARD_USD, *new]
    assert printed.strip().endswith("0 created, 2 updated")


def test_a_reactivated_gift_card_is_added_once_and_deactivation_removes_nothing(http, cli, tmp_path):
    card = _product(countries=("GB",), currencies=("GBP",))
    _import(cli, tmp_path, card)  # active before the campaign exists: not added later by an update
    campaign = make_campaign(http, auto_add_product_rule={"enabled": True, "currencies": ["GBP"]})
    _import(cli, tmp_path, {**card, "name": "Renamed"})
    assert _products(http, campaign) == [GIFT_CARD_USD]

    _import(cli, tmp_path, {**card, "active": False})
    assert _products(http, campaign) == [GIFT_CARD_USD]
    _import(cli, tmp_path, card)  # re-activated
    assert _products(http, campaign) == [GIFT_CARD_USD, card["id"]]

    _import(cli, tmp_path, {**card, "active": False})  # deactivated: the campaign keeps it
    assert _products(http, campaign) == [GIFT_CARD_USD, card["id"]]
    _import(cli, tmp_path, card)  # active again: still once
    assert _products(http, campaign) == [GIFT_CARD_USD, card["id"]]


@pytest.mark.parametrize("disabled", [{"enabled": False}, {"enabled": False, "countries": ["us"]},
                                      {"enabled": False, "countries": None, "currencies": ["USD"]}])
def test_enabled_false_clears_the_rule(api, http, cli, tmp_path, disabled):
    created = make_campaign(http, auto_add_product_rule=disabled)
    assert "auto_add_product_rule" not in created
    assert "auto_add_product_rule" not in ok(http.get(f"/campaigns/{created['id']}"))["campaign"]

    configured = make_campaign(http, auto_add_product_rule={"enabled": True, "countries": ["US"]})
    cleared = ok(http.put(f"/campaigns/{configured['id']}", json={"auto_add_product_rule": disabled}))["campaign"]
    assert cleared == {k: v for k, v in configured.items() if k != "auto_add_product_rule"}
    assert ok(http.get(f"/campaigns/{configured['id']}"))["campaign"] == cleared
    assert api.get_campaign(configured["id"]).campaign.auto_add_product_rule is None

    _import(cli, tmp_path, _product())
    assert _products(http, created) == _products(http, configured) == [GIFT_CARD_USD]


NOT_COVERED = "is not covered by any active product"


@pytest.mark.parametrize(("rule", "key", "messages"), [
    ({"enabled": True, "countries": ["BR"]}, "countries", [f"'BR' {NOT_COVERED}"]),
    ({"enabled": True, "countries": ["US", "br", "BR"]}, "countries", [f"'BR' {NOT_COVERED}"]),
    ({"enabled": True, "countries": ["US"], "currencies": ["BRL", "USD"]}, "currencies", [f"'BRL' {NOT_COVERED}"]),
    ({"enabled": False, "currencies": ["BRL"]}, "currencies", [f"'BRL' {NOT_COVERED}"]),
])
def test_a_filter_no_active_product_covers_is_422(api, http, rule, key, messages):
    from tremendous import CreateCampaignRequest
    from tremendous.exceptions import UnprocessableEntityException

    body = {"name": "C", "products": [GIFT_CARD_USD], "auto_add_product_rule": rule}
    errors = error(http.post("/campaigns", json=body), 422)
    assert errors["payload"] == {"auto_add_product_rule": {key: messages}}
    assert errors["message"] == f"auto_add_product_rule.{key}: {messages[0]}"
    assert ok(http.get("/campaigns"))["campaigns"] == []
    with pytest.raises(UnprocessableEntityException) as caught:
        api.create_campaign(CreateCampaignRequest.from_dict(body))
    assert caught.value.data.errors.payload == {"auto_add_product_rule": {key: messages}}

    campaign = make_campaign(http, auto_add_product_rule={"enabled": True, "countries": ["US"]})
    errors = error(http.put(f"/campaigns/{campaign['id']}", json={"auto_add_product_rule": rule}), 422)
    assert errors["payload"] == {"auto_add_product_rule": {key: messages}}
    assert ok(http.get(f"/campaigns/{campaign['id']}"))["campaign"] == campaign


def test_a_filter_is_accepted_once_an_active_product_covers_it(http, cli, tmp_path):
    rule = {"enabled": True, "countries": ["MX"], "currencies": ["MXN"]}
    assert list(error(http.post("/campaigns", json={"name": "C", "products": [], "auto_add_product_rule": rule}),
                      422)["payload"]["auto_add_product_rule"]) == ["countries"]
    # An inactive product covers nothing; a charity counts (any active product of the catalog).
    charity = _product(category="charity", countries=("MX",), currencies=("MXN",), active=False)
    _import(cli, tmp_path, charity)
    error(http.post("/campaigns", json={"name": "C", "products": [], "auto_add_product_rule": rule}), 422)
    _import(cli, tmp_path, {**charity, "active": True})
    campaign = make_campaign(http, products=[], auto_add_product_rule=rule)
    assert campaign["auto_add_product_rule"] == rule

    card = _product(countries=("MX",), currencies=("MXN",))
    _import(cli, tmp_path, card)
    assert _products(http, campaign) == [card["id"]]
