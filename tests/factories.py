"""Small factories shared by the tests: they act through the public HTTP surface only."""

from __future__ import annotations

import secrets

import httpx

from tests.conftest import GIFT_CARD_USD, order_body

CHARITY_USD = "PCHOCEANTR01US"  # USD 1..10000
TRAVEL_MULTI = "PGCSKYHRBR01WW"  # USD/CAD 25..1000, GBP/EUR 25..750
GIFT_CARD_GBP = "PGCKTLCRMB01GB"  # GBP only
PIXEL_ARCADE = "PGCPIXLARC01US"  # USD 5..100

__all__ = ["GIFT_CARD_USD", "order_body"]


def ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, f"{response.status_code}: {response.text}"
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def error(response: httpx.Response, status: int) -> dict:
    """Assert the one error shape (API.md §4) and return {message, payload}."""
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.text}"
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("errors"), dict), body
    assert isinstance(body["errors"].get("message"), str) and body["errors"]["message"], body
    assert isinstance(body["errors"].get("payload"), dict), body
    return body["errors"]


def unique(prefix: str = "x") -> str:
    return f"{prefix}{secrets.token_hex(4)}"


def available_cents(http: httpx.Client) -> int:
    return ok(http.get("/funding_sources/BALANCE"))["funding_source"]["meta"]["available_cents"]


def orders_count(http: httpx.Client) -> int:
    return ok(http.get("/orders"))["total_count"]


def rewards_count(http: httpx.Client) -> int:
    return ok(http.get("/rewards"))["total_count"]


def snapshot(http: httpx.Client) -> tuple[int, int, int]:
    """(balance, orders, rewards): what a refused order must leave untouched."""
    return available_cents(http), orders_count(http), rewards_count(http)


def place(http: httpx.Client, email: str, status: int = 200, **kwargs) -> dict:
    return ok(http.post("/orders", json=order_body(email, **kwargs)), status)["order"]


def many_rewards_body(email: str, denominations, products=(GIFT_CARD_USD,)) -> dict:
    rewards = [order_body(email, denomination=d, products=products)["reward"] for d in denominations]
    return {"payment": {"funding_source_id": "balance"}, "rewards": rewards}


def make_campaign(http: httpx.Client, products=(GIFT_CARD_USD,), **extra) -> dict:
    body = {"name": extra.pop("name", unique("Campaign ")), "products": list(products), **extra}
    return ok(http.post("/campaigns", json=body))["campaign"]


def make_field(http: httpx.Client, *, data_type: str = "Dropdown", options=("Sales", "Support"),
               required: bool = False, name: str | None = None) -> dict:
    body = {"display_name": name or unique("dept_"), "data_type": data_type, "required": required}
    if options is not None:
        body["data"] = {"options": list(options)}
    return ok(http.post("/fields", json=body))["field"]


def client_order(api, body: dict):
    """create_order through the official client, as a user would."""
    from tremendous import CreateOrderRequest, SingleRewardOrder

    return api.create_order(CreateOrderRequest(SingleRewardOrder.from_dict(body))).order


def client_search_rewards(api, params: list[tuple[str, str]]):
    """GET /rewards?<label>=<value> through the client's transport (API.md §7.13)."""
    client = api.api_client
    prepared = client.param_serialize(method="GET", resource_path="/rewards", query_params=params,
                                      header_params={"Accept": "application/json"}, auth_settings=["BearerApiKey"])
    response = client.call_api(*prepared)
    response.read()
    return client.response_deserialize(response, {"200": "ListRewards200Response"}).data
