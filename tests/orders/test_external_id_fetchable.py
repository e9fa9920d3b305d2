"""Every external_id an order accepts can be fetched again with get_order (API.md §1, §7.10)."""

from __future__ import annotations

import pytest

from tests.factories import available_cents, error, ok, order_body, orders_count, unique


def body_with(email: str, external_id, **kwargs) -> dict:
    return {**order_body(email, **kwargs), "external_id": external_id}


# Each of these (control characters, U+FFFD) reaches GET /orders/{id} (percent-encoded, as the
# client quotes it) as a path the server refuses with 400 before routing: an order taking it could
# never be fetched by it, approved nor rejected. So it is refused when the order is created, as "/" is.
@pytest.mark.parametrize("character", ["\t", "\n", "\r", "\x7f", "\x85", "\ufffd"])
def test_external_id_with_a_control_character_is_refused_up_front(org, http, character):
    errors = error(http.post("/orders", json=body_with(org.member_email, f"inv{character}42")), 400)
    assert "external_id" in errors["payload"]
    assert orders_count(http) == 0 and available_cents(http) == 500000


def test_every_accepted_external_id_is_reached_by_get_order_and_approvals(org, api, http):
    # Printable text of any script, spaces, and URL-special characters all work.
    # So do format characters (a zero-width joiner in an emoji, a bidi mark, a BOM): free text in
    # the path's order_id (paths.FREE_TEXT_PARAMS), refused only in ID parameters.
    for text in ("a b", " lead", "trail ", "a+b&c=d?e#f%g", "日本-東京", "a\u2028b", "Zoë\\😀",
                 "👩\u200d💻", "a\u200eb", "\ufeffx"):
        key = text + unique("-")
        order = ok(http.post("/orders", json=body_with(org.member_email, key)))["order"]
        assert api.get_order(key).order.id == order["id"]
        # Not waiting for approval: the path reached the order (422, not 400 or 404).
        error(http.post(f"/order_approvals/{_quoted(key)}/approve"), 422)


def test_an_unknown_external_id_with_a_format_character_is_404_without_echoing_it(http):
    for path in ("/orders/", "/order_approvals/"):
        response = http.get(path + _quoted("evil\u202etxt.exe")) if path == "/orders/" else \
            http.post(path + _quoted("evil\u202etxt.exe") + "/approve")
        errors = error(response, 404)
        assert "\u202e" not in errors["message"] and errors["payload"] == {"id": ["not found"]}


def _quoted(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")
