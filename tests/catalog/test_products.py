"""/products: every product deserializes in the client; filters; unknown product."""

from __future__ import annotations

import pytest

from tests.factories import GIFT_CARD_GBP, GIFT_CARD_USD, TRAVEL_MULTI, error, ok


def _ids(response) -> list[str]:
    return [p["id"] for p in ok(response)["products"]]


def test_every_product_deserializes_in_the_client(api, http):
    raw = ok(http.get("/products"))["products"]
    products = api.list_products().products
    assert len(products) == len(raw) >= 30
    for product in products:
        assert product.currency_codes and product.countries and product.images is not None
        single = api.get_product(product.id).product
        assert single.id == product.id and single.name == product.name
        for sku in product.skus or []:
            assert 0 < sku.min <= sku.max


def test_filter_by_id_list_as_the_client_sends_it(api, http):
    wanted = [GIFT_CARD_USD, TRAVEL_MULTI]
    assert sorted(p.id for p in api.list_products(id=",".join(wanted)).products) == sorted(wanted)
    assert sorted(_ids(http.get(f"/products?id={GIFT_CARD_USD}%2C{TRAVEL_MULTI}"))) == sorted(wanted)
    assert _ids(http.get("/products", params={"id": "NOSUCHPRODUCT0"})) == []


def test_filter_all_fee_free(http):
    everything = _ids(http.get("/products"))
    fee_free = _ids(http.get("/products", params={"id": "ALL_FEE_FREE"}))
    assert fee_free and set(fee_free) <= set(everything)


def test_filter_by_country_currency_subcategory(api, http):
    gb = ok(http.get("/products", params={"country": "GB"}))["products"]
    assert gb and all(any(c["abbr"] == "GB" for c in p["countries"]) for p in gb)
    assert GIFT_CARD_GBP in [p["id"] for p in gb] and GIFT_CARD_USD not in [p["id"] for p in gb]
    assert sorted(p.id for p in api.list_products(country="gb,ca").products) == sorted(
        _ids(http.get("/products", params={"country": "CA,GB"})))
    eur = ok(http.get("/products", params={"currency": "EUR"}))["products"]
    assert eur and all("EUR" in p["currency_codes"] for p in eur)
    food = ok(http.get("/products", params={"subcategory": "food_and_drink"}))["products"]
    assert food and all(p["subcategory"] == "food_and_drink" for p in food)
    combined = _ids(http.get("/products", params={"subcategory": "food_and_drink", "currency": "GBP"}))
    assert combined == [GIFT_CARD_GBP]
    assert _ids(http.get("/products", params={"country": "ZZ"})) == []


def test_unknown_product_is_404(api, http):
    from tremendous.exceptions import NotFoundException

    error(http.get("/products/UNKNOWN"), 404)
    with pytest.raises(NotFoundException):
        api.get_product("NOSUCHPRODUCT0")


def _product(**changes) -> dict:
    product = {"id": "PGCIMPORTED01US", "name": "Imported", "category": "merchant_card", "countries": ["US"],
               "skus": [{"min": 5, "max": 100, "currency_code": "USD"}],
               "images": [{"src": "/static/products/x.svg", "type": "logo"}]}
    return {**product, **changes}


@pytest.mark.parametrize("changes, problem", [
    ({"images": [{"src": "/static/products/x.svg", "type": "banner"}]}, "images must be a list"),
    ({"images": [{"src": "/static/products/x.svg", "type": None}]}, "images must be a list"),
    ({"fee_free": "false"}, "fee_free must be true or false"),
    ({"active": 0}, "active must be true or false"),
])
def test_import_refuses_what_the_wire_could_not_carry(changes, problem):
    """An image type outside API.md §5 ImageType (card, logo) would reach every client; a
    "false" string read as a flag is True (a fee-free or active product by mistake)."""
    from largesse.catalog.service import CatalogError, parse_catalog

    assert parse_catalog({"products": [_product()]})[0]["images"][0]["type"] == "logo"
    with pytest.raises(CatalogError, match=problem):
        parse_catalog({"products": [_product(**changes)]})
