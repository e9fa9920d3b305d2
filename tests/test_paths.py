"""Path parameters: every route refuses control characters, undecodable bytes, absurd lengths
and non-IDs with a 4xx error body that never echoes a control character (docs/api.md)."""

from __future__ import annotations

import json
import secrets
import unicodedata
from urllib.parse import quote

import httpx
import pytest

from largesse.paths import TEMPLATE_PARAM
from tests.factories import error, ok, order_body

# Raw path segments (already percent-encoded as a client would send them).
CONTROL = ["X%00Y", "%00", "A%01B", "%1B%5B31m", "%7F", "A%0AB", "%C2%85"]  # C0, ESC, DEL, C1
FORMAT = ["%E2%80%AE"]  # RLO: refused in ID parameters; free text in {order_id} (an external_id may hold it)
UNDECODABLE = ["%FF", "A%C3", "%80%80"]
LONG = ["A" * 5000]
NOT_AN_ID = ["abc", quote("é"), quote("💥"), quote("a b"), "X.Y", quote("A;B", safe="")]
BAD = CONTROL + FORMAT + UNDECODABLE + LONG + NOT_AN_ID


def _has_control(text: str) -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cf", "Cs") or c == "\ufffd" for c in text)


def _api_routes(app) -> list[tuple[str, str]]:
    """(method, path template) of every API operation, from the app's OpenAPI document."""
    routes = []
    for template, operations in app.openapi()["paths"].items():
        if TEMPLATE_PARAM.search(template):
            routes.extend((method.upper(), template) for method in operations)
    return routes


def _fill(template: str, value: str) -> str:
    return TEMPLATE_PARAM.sub(value, template)


def test_every_route_with_a_parameter_is_walked(server):
    routes = _api_routes(server.app)
    assert ("POST", "/api/v2/rewards/{reward_id}/cancel") in routes
    assert ("GET", "/api/v2/orders/{order_id}") in routes
    assert len(routes) >= 15


@pytest.mark.parametrize("value", BAD)
def test_bad_path_parameters_are_4xx_without_echo(server, org, value):
    with httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {org.api_key}"}) as client:
        for method, template in _api_routes(server.app):
            path = _fill(template, value)
            response = client.request(method, path, json={} if method in ("POST", "PUT", "PATCH") else None)
            assert 400 <= response.status_code < 500, (method, template, value, response.status_code)
            if template == "/api/v2/orders/{order_id}" and value in NOT_AN_ID:
                assert response.status_code == 404  # free text: looked up as an external_id, not found
            errors = error(response, response.status_code)
            assert not _has_control(json.dumps(errors, ensure_ascii=False)), (method, template, errors)
            assert "\\u00" not in response.text and "\\u2" not in response.text, response.text
            if value in FORMAT and "{order_id}" in template:
                assert response.status_code == 404, (method, template, response.text)  # not echoed (above)
            elif value in CONTROL + FORMAT + UNDECODABLE + LONG:
                assert response.status_code == 400, (method, template, response.text)
                assert " id id" not in errors["message"], (template, errors["message"])  # {id}: "Invalid id"


@pytest.mark.parametrize("method", ["cancel", "resend", "generate_link"])
def test_nul_in_a_reward_action_is_400_and_not_echoed(http, method):
    errors = error(http.post(f"/rewards/X%00Y/{method}"), 400)
    assert "X" not in errors["message"] and "\x00" not in errors["message"]
    assert errors["payload"] == {"id": ["contains invalid characters"]}


@pytest.mark.parametrize("value", NOT_AN_ID)
def test_a_value_that_is_no_id_is_404_not_found_without_echo(http, value):
    errors = error(http.get(f"/rewards/{value}"), 404)
    assert errors["payload"] == {"id": ["not found"]} and "not found" in errors["message"]
    if value not in ("abc", "X.Y"):  # plain ASCII reaches the endpoint, whose 404 names it
        assert value not in errors["message"] and "%" not in errors["message"], errors["message"]


def test_other_paths_with_control_characters_are_400(server, http):
    error(httpx.get(f"{server.url}/nowhere%00"), 400)
    error(http.get("/no_such%00thing"), 400)
    error(httpx.get(f"{server.url}/static/%00"), 400)
    errors = error(http.get("/no_such_thing_%C3%A9"), 404)  # printable: echoed as is
    assert "é" in errors["message"]


def test_ids_and_their_alternatives_still_work(org, http):
    external_id = f"commande-été-{secrets.token_hex(3)} #1"
    order = ok(http.post("/orders", json={**order_body(org.member_email), "external_id": external_id}))["order"]
    by_external = ok(http.get(f"/orders/{quote(external_id, safe='')}"))["order"]
    assert by_external["id"] == order["id"]
    assert ok(http.get(f"/orders/{order['id']}"))["order"]["id"] == order["id"]
    assert ok(http.get("/funding_sources/balance"))["funding_source"]["method"] == "balance"
    reward_id = order["rewards"][0]["id"]
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["id"] == reward_id
    error(http.get("/rewards/ABCDEFGHIJKLMN"), 404)  # a well-formed unknown ID: the endpoint's 404
