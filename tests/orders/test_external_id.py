"""external_id: 200 new, 201 identical replay (charged once), 409 different parameters; lookups."""

from __future__ import annotations

import pytest

from tests.factories import available_cents, error, ok, order_body, orders_count, unique


def body_with(email: str, external_id: str, **kwargs) -> dict:
    return {**order_body(email, **kwargs), "external_id": external_id}


def test_replay_returns_the_original_order_charged_once(org, http):
    key = unique("inv-")
    first = ok(http.post("/orders", json=body_with(org.member_email, key)), 200)["order"]
    assert first["external_id"] == key
    replay = ok(http.post("/orders", json=body_with(org.member_email, key)), 201)["order"]
    assert replay["id"] == first["id"] and replay["external_id"] == key
    assert [r["id"] for r in replay["rewards"]] == [r["id"] for r in first["rewards"]]
    assert available_cents(http) == 500000 - 2500
    assert orders_count(http) == 1


def test_replay_of_a_link_order_hands_over_a_working_link(org, http):
    # A client retrying after a timeout never saw the first response: the replay must carry
    # a link too (the first stays valid: it may already be in the recipient's hands).
    import httpx

    key = unique("link-")
    body = body_with(org.member_email, key, method="LINK")
    first = ok(http.post("/orders", json=body), 200)["order"]["rewards"][0]
    replay = ok(http.post("/orders", json=body), 201)["order"]["rewards"][0]
    assert replay["id"] == first["id"] and replay["delivery"]["method"] == "LINK"
    assert first["delivery"]["link"] and replay["delivery"]["link"]
    for link in (first["delivery"]["link"], replay["delivery"]["link"]):
        assert link.startswith(org.base_url + "/redeem/")
        assert httpx.get(link).status_code == 200
    assert available_cents(http) == 500000 - 2500 and orders_count(http) == 1
    # An EMAIL order's replay has no link, as its first answer had none.
    email = ok(http.post("/orders", json=body_with(org.member_email, unique("mail-"))), 200)["order"]
    assert "link" not in email["rewards"][0]["delivery"]
    again = ok(http.post("/orders", json=body_with(org.member_email, email["external_id"])), 201)["order"]
    assert "link" not in again["rewards"][0]["delivery"]


def test_replay_through_the_client_is_201_not_none(org, api, http):
    from tremendous import CreateOrderRequest, SingleRewardOrder

    key = unique("cli-")
    request = CreateOrderRequest(SingleRewardOrder.from_dict(body_with(org.member_email, key)))
    first = api.create_order_with_http_info(request)
    second = api.create_order_with_http_info(request)
    assert (first.status_code, second.status_code) == (200, 201)
    assert second.data.order.id == first.data.order.id
    assert available_cents(http) == 500000 - 2500


def test_same_external_id_with_other_parameters_is_409(org, http):
    key = unique("inv-")
    ok(http.post("/orders", json=body_with(org.member_email, key)))
    errors = error(http.post("/orders", json=body_with(org.member_email, key, denomination=26)), 409)
    assert "external_id" in errors["payload"]
    assert available_cents(http) == 500000 - 2500 and orders_count(http) == 1


def test_external_ids_are_per_organization(org, other_org, http):
    key = unique("shared-")
    ok(http.post("/orders", json=body_with(org.member_email, key)))
    with other_org.http() as other:
        ok(other.post("/orders", json=body_with(other_org.member_email, key)), 200)


def test_get_order_by_external_id_and_filter(org, api, http):
    key = unique("ref-")
    order = ok(http.post("/orders", json=body_with(org.member_email, key)))["order"]
    place_other = ok(http.post("/orders", json=order_body(org.member_email)))["order"]
    assert api.get_order(key).order.id == order["id"]
    assert ok(http.get(f"/orders/{key}"))["order"]["id"] == order["id"]
    listed = api.list_orders(external_id=key)
    assert listed.total_count == 1 and [o.id for o in listed.orders] == [order["id"]]
    assert place_other["id"] not in [o.id for o in listed.orders]
    assert api.list_orders(external_id="no-such-reference").total_count == 0
    error(http.get("/orders/no-such-reference"), 404)


def test_external_id_with_a_slash_is_refused_up_front(org, http):
    # The client quotes "/" as %2F and the server decodes it before routing, so such an
    # order could never be fetched with get_order: refuse it when it is created.
    errors = error(http.post("/orders", json=body_with(org.member_email, "a/b")), 400)
    assert "external_id" in errors["payload"]
    # "." and "..": the client's HTTP library drops such path segments, get_order(".") would
    # ask for GET /orders.
    for dots in (".", ".."):
        errors = error(http.post("/orders", json=body_with(org.member_email, dots)), 400)
        assert "external_id" in errors["payload"]
    assert orders_count(http) == 0
    # Dots within an ID are fine.
    ok(http.post("/orders", json=body_with(org.member_email, "v1.2...x")))


def test_blank_or_huge_external_id_is_400(org, http):
    error(http.post("/orders", json=body_with(org.member_email, "")), 400)
    error(http.post("/orders", json=body_with(org.member_email, "x" * 201)), 400)
    error(http.post("/orders", json=body_with(org.member_email, 12345)), 400)


def _raw(http, body: dict, denomination: str):
    """POST /orders with the denomination's JSON text as written (httpx would send a float)."""
    import json

    text = json.dumps(body).replace('"denomination": 25', f'"denomination": {denomination}', 1)
    assert denomination in text
    return http.post("/orders", content=text, headers={"Content-Type": "application/json"})


def test_amounts_below_a_floats_precision_are_other_parameters(org, http):
    # The fingerprint read amounts through a float: 25.000000000000001 replayed the order of
    # 25 (201), though a new order of it is refused (400: too many decimals).
    key = unique("exact-")
    body = body_with(org.member_email, key)
    first = ok(_raw(http, body, "25"), 200)["order"]
    for same in ("25.0", "25.00", "2.5e1", "2.50E+1"):
        assert ok(_raw(http, body, same), 201)["order"]["id"] == first["id"], same
    for other in ("25.000000000000001", "25.0000000000000000000000000000001"):
        errors = error(_raw(http, body, other), 409)
        assert "external_id" in errors["payload"]
    assert available_cents(http) == 500000 - 2500 and orders_count(http) == 1


def _hash_as_before(body: dict) -> str:
    """The fingerprint as the code before exact amounts computed it (1109b98): the request
    model's JSON dump with every amount a float, keys sorted. Written out here, apart from the
    code's own legacy mode, and pinned below to a hash that code printed."""
    import hashlib
    from decimal import Decimal

    import orjson

    from largesse.orders.schemas import CreateOrderIn

    def floats(value):
        if isinstance(value, Decimal):
            return float(value)
        if isinstance(value, dict):
            return {k: floats(v) for k, v in value.items()}
        if isinstance(value, list):
            return [floats(v) for v in value]
        return value

    dumped = floats(CreateOrderIn.model_validate(body).model_dump(mode="python", exclude_none=True))
    return hashlib.sha256(orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)).hexdigest()


def test_the_old_fingerprint_is_the_one_the_old_code_stored():
    body = {"payment": {"funding_source_id": "BALANCE"}, "external_id": "legacy-fixed",
            "reward": {"value": {"denomination": 12.34}, "products": ["PGCNWBOOKS01US"],
                       "delivery": {"method": "EMAIL"}, "recipient": {"name": "Recipient", "email": "x@example.com"}}}
    assert _hash_as_before(body) == "7442fdaeffda9d92b8e7b7669d90f0f8001164c6eaaa0c58421316609a292146"


@pytest.mark.parametrize("denomination", [12.34, 1.1, 100, 25])
def test_an_order_fingerprinted_by_floats_still_replays(org, http, engine, denomination):
    # Orders placed before amounts were fingerprinted exactly keep the floats' fingerprint: the
    # same request still replays them, and one that only a float confused is still refused.
    import json

    from sqlalchemy import update

    from largesse.orders.models import orders

    key = unique("legacy-")
    body = body_with(org.member_email, key, denomination=denomination, products=("PCHOCEANTR01US",))
    first = ok(http.post("/orders", json=body), 200)["order"]
    with engine.begin() as conn:
        conn.execute(update(orders).where(orders.c.id == first["id"]).values(request_hash=_hash_as_before(body)))
    assert ok(http.post("/orders", json=body), 201)["order"]["id"] == first["id"]
    tail = "0000000000000000001" if isinstance(denomination, float) else ".0000000000000000001"
    text = json.dumps(body).replace(f'"denomination": {json.dumps(denomination)}',
                                    f'"denomination": {json.dumps(denomination)}{tail}')
    assert text != json.dumps(body)
    error(http.post("/orders", content=text, headers={"Content-Type": "application/json"}), 409)
    assert orders_count(http) == 1
