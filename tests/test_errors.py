"""The one error shape, authentication, and "nothing ever 5xx" (API.md §4, §7.8, §7.12)."""

from __future__ import annotations

import copy
import json
import random

import httpx
import pytest

from tests.factories import available_cents, error, make_field, ok, order_body, orders_count


def test_unknown_route_is_404_with_error_body(http, org):
    error(http.get("/no_such_thing"), 404)
    error(http.post("/orders/extra/segments", json={}), 404)
    error(httpx.get(f"{org.base_url}/nowhere"), 404)


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("DELETE", "/orders", "GET, HEAD, POST"), ("PATCH", "/campaigns", "GET, HEAD, POST"),
    ("OPTIONS", "/orders", "GET, HEAD, POST"), ("POST", "/funding_sources", "GET, HEAD"),
    ("DELETE", "/products/X", "GET, HEAD"), ("POST", "/campaigns/X", "GET, HEAD, PUT"),
    ("GET", "/webhooks/X/simulate", "POST"), ("HEAD", "/webhooks/X/simulate", "POST"),
])
def test_wrong_method_is_405_with_error_body(http, method, path, allow):
    response = http.request(method, path)
    if method == "HEAD":  # the GET's answer without its body
        assert response.status_code == 405 and response.content == b""
    else:
        error(response, 405)
    assert response.headers["allow"] == allow  # every method of the path (RFC 9110), not one route's


def test_head_is_get_without_its_body(http, org):
    """RFC 9110 §9.1: HEAD wherever GET is taken (it was 405), the GET's status and headers."""
    base = org.base_url
    for url, client in ((f"{base}/healthz", httpx), (f"{base}/dashboard/signin", httpx), ("/orders", http),
                        ("/orders/NOSUCHORDER00", http)):
        got, head = client.get(url), client.head(url)
        assert head.status_code == got.status_code and head.content == b"", url
        assert head.headers["content-type"] == got.headers["content-type"], url
        if "content-length" in got.headers and got.status_code != 200:  # a list's length changes with its dates
            assert head.headers["content-length"] == got.headers["content-length"], url
    assert httpx.head(f"{base}/api/v2/orders").status_code == 401  # no key: as GET


def test_a_dashboard_page_answers_another_method_with_405_and_allow(org):
    response = httpx.put(f"{org.base_url}/dashboard/signin")
    assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD, POST"
    assert response.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize("content", [b'{"payment": ', b"{'a': 1}", b"\xff\xfe", b"[" * 50000 + b"]" * 50000])
def test_malformed_json_is_400(http, content):
    errors = error(http.post("/orders", content=content, headers={"Content-Type": "application/json"}), 400)
    assert all(not key.isdigit() for key in errors["payload"]), errors["payload"]


def test_empty_and_non_object_bodies_are_400(http):
    error(http.post("/orders", content=b"", headers={"Content-Type": "application/json"}), 400)
    error(http.post("/orders"), 400)
    for body in ([], [1, 2], "order", 5, None, True):
        error(http.post("/orders", json=body), 400)
    error(http.post("/campaigns", json=[]), 422)
    error(http.post("/fields", json="x"), 422)


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_a_json_body_is_read_whatever_its_content_type(http, content_type):
    """docs/api.md: `curl -d '{...}'` (form-urlencoded) works on every operation, not only on those
    that parse their own bytes (orders); the endpoints whose body FastAPI reads refused it (422)."""
    headers = {"Content-Type": content_type} if content_type else {}
    label = f"dept_{random.randrange(10**9)}"
    body = json.dumps({"display_name": label, "data_type": "Text"}).encode()
    request = http.build_request("POST", "/fields", content=body, headers=headers)
    assert request.headers.get("Content-Type") == content_type  # httpx adds none to raw bytes
    assert ok(http.send(request))["field"]["label"] == label


@pytest.mark.parametrize("path", [("payment",), ("reward",), ("reward", "recipient"), ("reward", "delivery"),
                                  ("reward", "value"), ("reward", "value", "denomination"),
                                  ("payment", "funding_source_id")])
def test_missing_keys_are_400_mirroring_the_key(org, http, path):
    body = order_body(org.member_email)
    node = body
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    errors = error(http.post("/orders", json=body), 400)
    payload = errors["payload"]
    if path == ("reward",):
        assert payload  # "send exactly one of reward or rewards"
    else:
        for key in path:
            payload = payload[key]
        assert isinstance(payload, list) and payload
    assert available_cents(http) == 500000


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"},
                                     {"Authorization": "Bearer LRG_SANDBOX_not-a-real-key"},
                                     {"Authorization": "Bearer " + "x" * 5000}, {"Authorization": "Token abc"}])
def test_bad_authorization_is_401(org, headers):
    with httpx.Client(base_url=f"{org.base_url}/api/v2", headers=headers) as client:
        for response in (client.get("/orders"), client.post("/orders", json=order_body(org.member_email)),
                         client.get("/products"), client.get("/funding_sources/BALANCE")):
            error(response, 401)
            assert response.headers["WWW-Authenticate"] == "Bearer"  # the challenge HTTP requires on a 401


def test_client_sees_401_body(org):
    from tremendous import ApiClient, Configuration, TremendousApi
    from tremendous.exceptions import UnauthorizedException

    api = TremendousApi(ApiClient(Configuration(host=f"{org.base_url}/api/v2", access_token="LRG_SANDBOX_nope")))
    with pytest.raises(UnauthorizedException) as caught:
        api.list_funding_sources()
    assert caught.value.data.errors.message


def test_revoked_key_is_401(org, cli):
    created = json.loads(cli("keys", "create", "--org", org.id, "--json").stdout)
    with httpx.Client(base_url=f"{org.base_url}/api/v2",
                      headers={"Authorization": f"Bearer {created['api_key']}"}) as client:
        ok(client.get("/orders"))
        cli("keys", "revoke", created["api_key_id"])
        error(client.get("/orders"), 401)


def test_read_only_key_cannot_write(org, cli):
    created = json.loads(cli("keys", "create", "--org", org.id, "--permission", "read_only", "--json").stdout)
    with httpx.Client(base_url=f"{org.base_url}/api/v2",
                      headers={"Authorization": f"Bearer {created['api_key']}"}) as client:
        assert ok(client.get("/funding_sources"))["funding_sources"][0]["meta"]["available_cents"] == 500000
        ok(client.get("/orders"))
        error(client.post("/orders", json=order_body(org.member_email)), 403)
        error(client.post("/campaigns", json={"name": "C", "products": ["PGCNWBOOKS01US"]}), 403)
        error(client.post("/fields", json={"display_name": "D", "data_type": "Text"}), 403)
        error(client.put("/campaigns/ANYCAMPAIGN0", json={"name": "x"}), 403)
        assert ok(client.get("/orders"))["total_count"] == 0
    assert cli("keys", "create", "--org", org.id, "--permission", "admin", check=False).returncode != 0


NUL_URLS = [
    "/orders/%00", "/orders?campaign_id=%00", "/orders?external_id=a%00b", "/orders?created_at%5Blte%5D=%00",
    "/orders?offset=%00", "/rewards/%00", "/rewards?%00=x", "/rewards?dept=%00", "/rewards?limit=1%00",
    "/products/%00", "/products?id=%00", "/products?country=U%00S", "/products?currency=%00",
    "/products?subcategory=%00", "/campaigns/%00", "/funding_sources/%00", "/fields?x=%00",
    "/orders/%C0%80", "/rewards?%FF=%FE", "/products/%F0%9F%8E%81",
]


@pytest.mark.parametrize("url", NUL_URLS)
def test_nul_and_odd_bytes_in_query_and_path_never_5xx(http, url):
    response = http.get(url)
    assert response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/json")
    if response.status_code >= 400:
        error(response, response.status_code)


@pytest.mark.parametrize("url", ["/rewards?%1B%5B2J=%00", "/forex?base=%1B%5B2J"])
def test_refusals_echo_no_control_characters(http, url):
    """A query name or value quoted in an error message has its control characters as '?'."""
    errors = error(http.get(url), 400)
    assert "\x1b" not in json.dumps(errors, ensure_ascii=False) and "?[2J" in errors["message"], errors


def test_nul_in_put_path_never_5xx(http):
    error(http.put("/campaigns/%00", json={"name": "x"}), 400)


def test_every_response_is_json(org, http):
    responses = [http.get(p) for p in ("/orders", "/rewards", "/fields", "/funding_sources", "/campaigns",
                                       "/products", "/products/PGCNWBOOKS01US", "/funding_sources/BALANCE")]
    responses.append(http.post("/orders", json=order_body(org.member_email)))
    for response in responses:
        assert response.status_code == 200
        assert response.headers["content-type"].split(";")[0] == "application/json"


# --- fuzz ------------------------------------------------------------------------------------

JUNK_COMMON = [None, True, False, 0, -1, 1e308, -1e308, 10**30, float("nan"), float("inf"), [], [[[{}]]],
               {"$ne": 1}, "\u0000", "\ud800", "x" * 100_000, [None], ["\u0000"]]
JUNK_FOR_STRING = [v for v in JUNK_COMMON if not isinstance(v, str) or len(v) > 1000 or "\u0000" in v
                   or "\ud800" in v]
JUNK_FOR_NUMBER = [v for v in JUNK_COMMON if not (isinstance(v, int | float) and not isinstance(v, bool))] + [
    "10", "1e3", 0, -0.0, -25, 10.001, 1e-9, 10**30, 1e308, 99999999, float("nan")]
JUNK_FOR_OBJECT = [v for v in JUNK_COMMON if not isinstance(v, dict)] + ["{}", 1.5]
JUNK_FOR_LIST = [v for v in JUNK_COMMON if not (isinstance(v, list) and v == [])] + [[1], [{}], [[]], ["x" * 2000],
                                                                                      {"0": "x"}, []]


def _paths(node, prefix=()):
    """Every (path, value) of a JSON document, containers included."""
    yield prefix, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


def _junk_for(value, rng: random.Random):
    if isinstance(value, str):
        return rng.choice(JUNK_FOR_STRING)
    if isinstance(value, bool) or not isinstance(value, int | float | dict | list):
        return rng.choice(JUNK_COMMON)
    if isinstance(value, int | float):
        return rng.choice(JUNK_FOR_NUMBER)
    if isinstance(value, dict):
        return rng.choice(JUNK_FOR_OBJECT)
    return rng.choice(JUNK_FOR_LIST)


def _set(document, path, value):
    if not path:
        return value
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return document


def _valid_base(email: str, field_id: str) -> dict:
    body = order_body(email, custom_fields=[{"id": field_id, "value": "Sales"}], language="en")
    body["reward"]["value"]["currency_code"] = "USD"
    return body


def test_fuzz_malformed_orders_never_5xx_and_never_charge(org, http):
    field = make_field(http, required=True)
    base = _valid_base(org.member_email, field["id"])
    ok(http.post("/orders", json=base))  # the base itself is valid
    balance, count = available_cents(http), orders_count(http)
    paths = [p for p, _ in _paths(base)]
    rng = random.Random(20240601)
    seen_statuses = set()
    for round_ in range(160):
        body = copy.deepcopy(base)
        for path in rng.sample(paths, k=rng.randint(1, 3)):
            current = body
            for key in path:
                if not isinstance(current, dict | list) or isinstance(current, list) != isinstance(key, int):
                    break  # an ancestor was already replaced by junk
                try:
                    current = current[key]
                except (KeyError, IndexError):
                    break
            else:
                body = _set(body, path, _junk_for(current, rng))
        content = json.dumps(body).encode()  # NaN/Infinity/lone surrogates go out as Python writes them
        response = http.post("/orders", content=content, headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500, (round_, body if len(content) < 2000 else path,
                                                   response.status_code, response.text[:500])
        error(response, response.status_code)
        seen_statuses.add(response.status_code)
    assert available_cents(http) == balance and orders_count(http) == count
    assert seen_statuses <= {400, 404}


@pytest.mark.parametrize("name", ["Zoë 🎁 Ünïcödé", "مرحبا بالعالم", "a\u0301\u0302", "\u200b\u200dx", "𝔘𝔫𝔦",
                                  "名" * 200])
def test_unicode_round_trips(org, http, name):
    body = order_body(org.member_email)
    body["reward"]["recipient"]["name"] = name
    body["external_id"] = f"ключ-{name[:20]}"
    order = ok(http.post("/orders", content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}))
    reward_id = order["order"]["rewards"][0]["id"]
    assert ok(http.get(f"/rewards/{reward_id}"))["reward"]["recipient"]["name"] == name
    listed = ok(http.get("/orders", params={"external_id": body["external_id"]}))
    assert listed["total_count"] == 1 and listed["orders"][0]["external_id"] == body["external_id"]


def test_fuzz_query_strings_never_5xx(http):
    rng = random.Random(7)
    pieces = ["%00", "%FF", "%5B", "%5D", "[gte]", "=", "&", "%2C", ",", "limit", "offset", "created_at",
              "campaign_id", "external_id", "id", "country", "currency", "subcategory", "ALL_FEE_FREE", "🎁",
              "x" * 300, "-1", "1e9", "null", "%20", "%", "%%", "+"]
    for _ in range(80):
        path = rng.choice(["/orders", "/rewards", "/products", "/campaigns", "/fields", "/funding_sources"])
        query = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        response = http.get(f"{path}?{query}")
        assert response.status_code < 500, (path, query, response.text)
        assert response.headers["content-type"].startswith("application/json")


def test_an_oversized_write_answers_the_keys_refusal_first(org, http, server):
    """docs/organizations.md: a write's 401/403 wins over its other 4xx, 413 included (an unknown
    or read-only key learned the size limit, by Content-Length and by a chunked body)."""
    read_only = ok(http.post("/organizations/create_api_key", json={"permission": "read_only"}))["api_key"]
    big = b'{"padding": "' + b"x" * 1_100_000 + b'"}'

    def chunks():
        yield from (big[i:i + 100_000] for i in range(0, len(big), 100_000))

    for key, status in ((read_only, 403), ("LRG_SANDBOX_unknown", 401), (org.api_key, 413)):
        with httpx.Client(base_url=f"{server.url}/api/v2", timeout=30,
                          headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}) as client:
            for path in ("/orders", "/campaigns", "/members"):
                for content in (big, chunks()):
                    assert client.post(path, content=content).status_code == status, (key[:12], path)
    assert available_cents(http) == 500000 and orders_count(http) == 0


def test_oversized_body_is_413_with_error_body(org, http):
    body = order_body(org.member_email)
    body["padding"] = "x" * 1_100_000
    error(http.post("/orders", json=body), 413)

    def chunks():  # no Content-Length: the limit applies while streaming
        yield b'{"padding": "'
        for _ in range(12):
            yield b"x" * 100_000
        yield b'"}'

    for path in ("/orders", "/campaigns", "/reports"):  # each reads its body its own way
        response = http.post(path, content=chunks(), headers={"Content-Type": "application/json"})
        assert error(response, 413)["message"] == "Request body larger than 1000000 bytes", path
    assert available_cents(http) == 500000

    def order_in_pieces():  # a chunked body under the limit is read as any other
        encoded = json.dumps(order_body(org.member_email, denomination=7)).encode()
        yield from (encoded[i:i + 10] for i in range(0, len(encoded), 10))

    assert ok(http.post("/orders", content=order_in_pieces()))["order"]["payment"]["total"] == 7
    assert available_cents(http) == 500000 - 700


@pytest.mark.parametrize(("method", "path", "base"), [
    ("POST", "/campaigns", {"name": "C", "description": "d", "products": ["PGCNWBOOKS01US"],
                            "webpage_style": {"headline": "h", "logo_image_height_px": 40},
                            "email_style": {"button_color": "#FFFFFF"}, "fee_charged_to": "SENDER"}),
    ("PUT", "/campaigns/{id}", {"name": "C", "products": ["PGCNWBOOKS01US"], "webpage_style": {"headline": "h"}}),
    ("POST", "/fields", {"display_name": "Dept", "data_type": "Dropdown", "data": {"options": ["a", "b"]},
                         "required": False}),
])
def test_fuzz_campaign_and_field_bodies_never_5xx(http, method, path, base):
    campaign_id = ok(http.post("/campaigns", json={"name": "Base", "products": ["PGCNWBOOKS01US"]}))["campaign"]["id"]
    url = path.format(id=campaign_id)
    paths = [p for p, _ in _paths(base)]
    rng = random.Random(hash(path) & 0xFFFF)
    for _ in range(40):
        body = copy.deepcopy(base)
        target = rng.choice(paths)
        current = body
        for key in target:
            current = current[key]
        body = _set(body, target, _junk_for(current, rng))
        response = http.request(method, url, content=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json"})
        assert response.status_code < 500, (body if len(str(body)) < 2000 else target, response.text[:300])
        if response.status_code >= 400:
            error(response, response.status_code)


def test_trailing_slash_is_an_error_not_a_redirect(http):
    for path in ("/orders/", "/rewards/", "/campaigns/"):
        response = http.get(path, follow_redirects=False)
        error(response, 404)


def test_anonymous_request_is_401_before_any_parsing(org):
    with httpx.Client(base_url=f"{org.base_url}/api/v2") as anonymous:
        error(anonymous.post("/orders", content=b"{not json", headers={"Content-Type": "application/json"}), 401)
        error(anonymous.get("/no_such_route"), 401)
        error(anonymous.get("/orders", headers={"Authorization": "Basic dXNlcjpwYXNz"}), 401)
        error(anonymous.get("/orders", headers={"Authorization": "Bearer"}), 401)


@pytest.mark.parametrize("limit", ["1_0", " 5", "٣", "+5", "5.0"])
def test_integer_parameters_are_plain_digits(http, limit):
    error(http.get("/orders", params={"limit": limit}), 400)


HUGE_EXPONENT = "1e1000000000000000000"  # beyond even Decimal's range: no float, no Decimal


@pytest.mark.parametrize(("path", "body"), [
    ("/orders", None),
    ("/invoices", '{"amount": %s}'),
    ("/topups", '{"amount": %s, "funding_source_id": "x"}'),
    ("/reports", '{"report_type": "digital_rewards", "format": "csv", "filters": {"digital_rewards": '
                 '{"amount": {"gte": %s}}}}'),
    ("/fraud_rules/review_redeemed_rewards_amount", '{"config": {"amount": %s, "period": "30"}}'),
    ("/campaigns", '{"name": "C", "products": ["PGCNWBOOKS01US"], "webpage_style": {"logo_image_height_px": %s}}'),
])
def test_numbers_beyond_any_range_are_4xx_and_charge_nothing(org, http, path, body):
    if body is None:
        body = json.dumps(order_body(org.member_email)).replace('"denomination": 25', '"denomination": %s')
        assert "%s" in body
    for number in (HUGE_EXPONENT, "-" + HUGE_EXPONENT, HUGE_EXPONENT.replace("e", "E+")):
        response = http.post(path, content=(body % number).encode(), headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500, (path, number, response.status_code, response.text[:300])
        error(response, response.status_code)
    assert available_cents(http) == 500000 and orders_count(http) == 0


@pytest.mark.parametrize(("method", "path"), [("POST", "/campaigns"), ("PUT", "/campaigns/{campaign}"),
                                              ("POST", "/fields"), ("POST", "/webhooks/{webhook}/simulate")])
def test_too_deep_a_body_is_the_routes_malformed_body_status(http, method, path):
    # These operations' client decodes 422, not 400 (API.md §1): nesting beyond what the JSON
    # reader takes is a malformed body like any other, answered 422 there.
    campaign = ok(http.post("/campaigns", json={"name": "Base", "products": ["PGCNWBOOKS01US"]}))["campaign"]["id"]
    url = path.format(campaign=campaign, webhook="NOWEBHOOK00000")
    for content in (b'{"name": ' + b"[" * 5000 + b"]" * 5000 + b"}", b'{"name": '):
        errors = error(http.request(method, url, content=content, headers={"Content-Type": "application/json"}), 422)
        assert errors["message"].startswith(("Malformed JSON body", "Invalid request: Malformed JSON body")), errors
