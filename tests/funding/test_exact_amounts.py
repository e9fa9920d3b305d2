"""Amounts are read exactly: a denomination is charged as written, or refused (never rounded)."""

from __future__ import annotations

import json
import secrets

import pytest

from largesse import db
from largesse.orgs import service as orgs
from tests.conftest import GIFT_CARD_USD, Org
from tests.factories import available_cents, error, ok, snapshot


def _raw_body(email: str, *denominations: str, currency: str | None = None, product: str = GIFT_CARD_USD) -> bytes:
    """A body with the denominations spelled exactly as given (json.dumps would go through float)."""
    currency_part = f', "currency_code": "{currency}"' if currency else ""
    rewards = [
        f'{{"value": {{"denomination": {d}{currency_part}}}, "recipient": {{"name": "R", "email": "{email}"}},'
        f' "delivery": {{"method": "EMAIL"}}, "products": ["{product}"]}}'
        for d in denominations
    ]
    if len(rewards) == 1:
        return f'{{"payment": {{"funding_source_id": "balance"}}, "reward": {rewards[0]}}}'.encode()
    return f'{{"payment": {{"funding_source_id": "balance"}}, "rewards": [{", ".join(rewards)}]}}'.encode()


def _post(http, raw: bytes):
    return http.post("/orders", content=raw, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("written", ["10.999999999999999999", "10.00000000000000001", "10.001", "1E-400",
                                     "1e999999999", "-1e999999999", "12345678901234567890.5"])
def test_more_decimals_than_the_currency_has_is_refused(org, http, written):
    before = snapshot(http)
    errors = error(_post(http, _raw_body(org.member_email, written)), 400)
    messages = errors["payload"]["reward"]["value"]["denomination"]
    assert messages and all(isinstance(m, str) for m in messages), errors
    assert snapshot(http) == before


@pytest.mark.parametrize(("written", "cents"), [("10.99", 1099), ("10.50", 1050), ("10.500", 1050), ("1e1", 1000),
                                                ("1.05E1", 1050), ("25", 2500), ("19.990000000000000000", 1999)])
def test_amounts_are_charged_exactly_as_written(org, http, written, cents):
    before = available_cents(http)
    order = ok(_post(http, _raw_body(org.member_email, written)))["order"]
    assert round(order["payment"]["total"] * 100) == cents
    assert available_cents(http) == before - cents


def test_one_inexact_reward_of_many_is_named_in_the_payload(org, http):
    before = snapshot(http)
    errors = error(_post(http, _raw_body(org.member_email, "10", "10.999999999999999999", "7.25")), 400)
    assert set(errors["payload"]["rewards"]) == {"1"}, errors
    assert "denomination" in errors["payload"]["rewards"]["1"]["value"]
    assert snapshot(http) == before
    order = ok(_post(http, _raw_body(org.member_email, "10", "10.99", "7.25")))["order"]
    assert [r["value"]["denomination"] for r in order["rewards"]] == [10, 10.99, 7.25]
    assert available_cents(http) == before[0] - 2824


def test_numbers_in_text_do_not_change_the_amount(org, http):
    body = json.loads(_raw_body(org.member_email, "12"))
    body["reward"]["delivery"]["meta"] = {"message": "5.5 stars, 1e3 thanks: [0.1, 2E2]"}
    before = available_cents(http)
    ok(http.post("/orders", json=body))
    assert available_cents(http) == before - 1200


@pytest.mark.parametrize("written", ['"10"', "true", "null", "[10]", "NaN", "Infinity"])
def test_non_numbers_are_refused(org, http, written):
    response = _post(http, _raw_body(org.member_email, written))
    assert response.status_code == 400, response.text


def test_zero_decimal_currency_refuses_fractions(engine, server, cli, tmp_path):
    """A JPY balance: 500 yen is fine, 500.5 yen is not (no minor unit)."""
    pid = "PJPYTEST" + secrets.token_hex(3).upper()
    path = tmp_path / "jpy.json"
    path.write_text(json.dumps({"products": [{
        "id": pid, "name": "Yen Card", "category": "merchant_card", "subcategory": "fashion",
        "currency_codes": ["JPY"], "countries": ["JP"], "images": [], "description": "d", "disclosure": "",
        "skus": [{"min": 100, "max": 100000, "currency_code": "JPY"}]}]}))
    cli("products", "import", str(path))
    email = f"owner-{secrets.token_hex(4)}@example.com"
    with db.write(engine) as conn:
        created = orgs.create_org(conn, name="Yen", member_email=email, member_name="O", sandbox=True,
                                  currency_code="JPY")
    jpy = Org(created.organization_id, created.api_key, created.funding_source_id, email, server.url)
    with jpy.http() as http:
        before = available_cents(http)
        errors = error(_post(http, _raw_body(email, "500.5", currency="JPY", product=pid)), 400)
        assert "whole units" in errors["payload"]["reward"]["value"]["denomination"][0]
        assert available_cents(http) == before
        ok(_post(http, _raw_body(email, "500", currency="JPY", product=pid)))
        ok(_post(http, _raw_body(email, "500.00", currency="JPY", product=pid)))
        assert available_cents(http) == before - 2 * 50000
