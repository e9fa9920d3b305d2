"""One rule of what an email address is (largesse/email_address.py), on every surface that takes
one: an address an order can reach is one a fraud rule can list, and the other way round."""

from __future__ import annotations

from tests.factories import error, make_field, ok, order_body, unique

LONGEST_LOCAL = "l" * 64
TOO_LONG_LOCAL = "l" * 65


def test_a_local_part_over_64_characters_is_refused_everywhere(org, http):
    too_long = f"{TOO_LONG_LOCAL}@example.org"
    before = ok(http.get("/members"))["members"]
    assert "email" in error(http.post("/members", json={"email": too_long, "role": "MEMBER"}), 400)["payload"]
    assert ok(http.get("/members"))["members"] == before
    errors = error(http.post("/orders", json=order_body(too_long)), 400)
    assert "email" in errors["payload"]["reward"]["recipient"], errors
    assert "config" in str(error(http.post("/fraud_rules/allow_email", json={"config": {"emails": [too_long]}}),
                                 400)["payload"])
    field = make_field(http, data_type="Email", options=None)
    body = order_body(org.member_email, custom_fields=[{"id": field["id"], "value": too_long}])
    assert "custom_fields" in str(error(http.post("/orders", json=body), 400)["payload"])
    # A domain label of 64 characters is no DNS name either.
    long_label = f"x@{'d' * 64}.com"
    assert "email" in error(http.post("/members", json={"email": long_label, "role": "MEMBER"}), 400)["payload"]


def test_the_longest_local_part_is_taken_everywhere(org, http):
    longest = f"{LONGEST_LOCAL}{unique('')}"[:64] + "@example.org"
    ok(http.post("/members", json={"email": longest, "role": "MEMBER"}))  # a sandbox recipient from now on
    assert ok(http.post("/orders", json=order_body(longest)))["order"]["rewards"][0]["recipient"]["email"] == longest
    ok(http.post("/fraud_rules/allow_email", json={"config": {"emails": [longest]}}))
    ok(http.post("/fraud_rules/review_email", json={"config": {"domains": [f"{'d' * 63}.com"]}}))
