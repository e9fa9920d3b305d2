"""The operator's `largesse` command against each backend's database."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

from largesse import db
from tests.conftest import Org
from tests.factories import available_cents, error, ok, order_body


def _json(result) -> dict:
    return json.loads(result.stdout)


def test_org_create_json_gives_a_working_sandbox_org(cli, server):
    email = f"ops-{secrets.token_hex(3)}@example.com"
    created = _json(cli("org", "create", "--name", "Acme CLI", "--member-email", email, "--json"))
    assert {"organization_id", "api_key", "funding_source_id"} <= set(created)
    assert created["available_cents"] == 500000
    org = Org(created["organization_id"], created["api_key"], created["funding_source_id"], email, server.url)
    with org.http() as http:
        (source,) = ok(http.get("/funding_sources"))["funding_sources"]
        assert source["id"] == created["funding_source_id"] and source["meta"]["available_cents"] == 500000
        assert source["meta"]["currency_code"] == "USD"
        ok(http.post("/orders", json=order_body(email)))
    listed = _json(cli("org", "list", "--json"))["organizations"]
    assert created["organization_id"] in [o["id"] for o in listed]
    line = next(li for li in cli("org", "list").stdout.splitlines() if li.startswith(created["organization_id"]))
    assert line.split() == [created["organization_id"], "sandbox", "USD", "Acme", "CLI"]  # the environment shown


@pytest.mark.parametrize("email", ["not-an-email", "admin@localhost", "l" * 65 + "@example.com"])
def test_org_create_refuses_a_bad_email(cli, email):
    """The one rule of addresses (email_address.py): the first administrator must be able to
    sign in, which a 65-character local part or a host without a domain cannot."""
    result = cli("org", "create", "--name", "X", "--member-email", email, check=False)
    assert result.returncode == 1 and "is not a valid email address" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_added_member_becomes_an_allowed_recipient(org, http, cli):
    email = f"new-{secrets.token_hex(3)}@example.com"
    error(http.post("/orders", json=order_body(email)), 400)
    added = _json(cli("members", "add", "--org", org.id, "--email", email, "--name", "New", "--json"))
    assert added["email"] == email
    ok(http.post("/orders", json=order_body(email)))
    members = _json(cli("members", "list", "--org", org.id, "--json"))["members"]
    assert {m["email"] for m in members} == {org.member_email, email}
    assert {(m["email"], m["role"], m["status"]) for m in members} == {
        (org.member_email, "ADMIN", "REGISTERED"), (email, "ADMIN", "INVITED")}
    assert f"ADMIN   INVITED     {email}  New" in cli("members", "list", "--org", org.id).stdout
    again = cli("members", "add", "--org", org.id, "--email", email.upper(), check=False)
    assert again.returncode != 0 and "already" in again.stderr
    assert added["role"] == "ADMIN"
    viewer = f"viewer-{secrets.token_hex(3)}@example.com"  # a test recipient needs no dashboard rights
    assert _json(cli("members", "add", "--org", org.id, "--email", viewer, "--role", "viewer", "--json"))["role"] \
        == "VIEWER"
    ok(http.post("/orders", json=order_body(viewer)))
    refused = cli("members", "add", "--org", org.id, "--email", "x@example.com", "--role", "OWNER", check=False)
    assert refused.returncode == 1 and "Unknown role" in refused.stderr
    # The address rule of POST /members (it only checked for an "@").
    refused = cli("members", "add", "--org", org.id, "--email", "not an@address", check=False)
    assert refused.returncode == 1 and "is not a valid email address" in refused.stderr


def test_keys_create_list_revoke(org, cli):
    created = _json(cli("keys", "create", "--org", org.id, "--label", "ci", "--json"))
    key = created["api_key"]
    listed_json = cli("keys", "list", "--org", org.id, "--json").stdout
    listed_text = cli("keys", "list", "--org", org.id).stdout
    for output in (listed_json, listed_text):
        assert key not in output and org.api_key not in output
    keys = {k["id"]: k for k in json.loads(listed_json)["api_keys"]}
    assert key.startswith(keys[created["api_key_id"]]["prefix"])
    assert len(keys[created["api_key_id"]]["prefix"]) < len(key) // 2
    assert keys[created["api_key_id"]]["revoked"] is False
    with replace(org, api_key=key).http() as http:
        ok(http.get("/orders"))
        cli("keys", "revoke", created["api_key_id"])
        error(http.get("/orders"), 401)
    keys = {k["id"]: k for k in _json(cli("keys", "list", "--org", org.id, "--json"))["api_keys"]}
    assert keys[created["api_key_id"]]["revoked"] is True
    with org.http() as http:
        ok(http.get("/orders"))  # the organization's other key is untouched


def test_balance_fund_and_show(org, http, cli):
    funded = _json(cli("balance", "fund", "--org", org.id, "--amount", "250.50", "--memo", "wire 42", "--json"))
    assert funded["credited_cents"] == 25050 and funded["available_cents"] == 525050
    assert available_cents(http) == 525050
    shown = _json(cli("balance", "show", "--org", org.id, "--json"))
    assert shown["available_cents"] == 525050
    latest = shown["entries"][0]
    assert (latest["kind"], latest["amount_cents"], latest["memo"]) == ("funding", 25050, "wire 42")
    assert latest["balance_after_cents"] == 525050
    assert shown["entries"][1]["kind"] == "sandbox_credit"
    for amount in ("-5", "1.001"):
        result = cli("balance", "fund", "--org", org.id, "--amount", amount, "--memo", "x", check=False)
        assert result.returncode != 0 and "amount" in result.stderr, amount
    assert available_cents(http) == 525050
    text = cli("balance", "fund", "--org", org.id, "--amount", "99999999999.90", "--memo", "large").stdout
    assert "credited 99999999999.90 USD; balance 100000005250.40 USD" in text  # as money is written
    # The documented most, 100,000,000,000, is allowed (it was refused as too large).
    text = cli("balance", "fund", "--org", org.id, "--amount", "100000000000", "--memo", "largest").stdout
    assert "credited 100000000000.00 USD" in text


BAD_AMOUNTS = ["1e999999999", "1_000", "1,000", " 5", "5 ", "5.", ".5", "0", "0.00", "NaN", "Infinity", "-5",
               "+5", "1.001", "100000000000.01", "1000000000000", "0x10", "", "٣"]


@pytest.mark.parametrize("amount", BAD_AMOUNTS)
def test_balance_fund_accepts_plain_amounts_only(org, http, cli, amount, backend):
    if backend != "sqlite":
        pytest.skip("the amount is checked before anything is written: one backend is enough")
    before = available_cents(http)
    result = cli("balance", "fund", "--org", org.id, "--amount", amount, "--memo", "x", check=False)
    assert result.returncode != 0, result.stdout
    assert result.stderr.startswith("error: --amount") and "Traceback" not in result.stderr, result.stderr
    assert available_cents(http) == before


def test_balance_fund_reference_credits_once(org, other_org, http, cli):
    before = available_cents(http)
    args = ("balance", "fund", "--org", org.id, "--amount", "100.25", "--memo", "wire", "--reference", "W-8812")
    first = _json(cli(*args, "--json"))
    assert first["credited"] is True and first["credited_cents"] == 10025
    second = cli(*args)
    assert second.returncode == 0 and "already credited" in second.stdout, second.stdout
    assert _json(cli(*args, "--json"))["credited"] is False
    assert available_cents(http) == before + 10025
    other_amount = cli("balance", "fund", "--org", org.id, "--amount", "99", "--memo", "wire", "--reference",
                       "W-8812", check=False)
    assert other_amount.returncode != 0 and "already credited" in other_amount.stderr
    assert available_cents(http) == before + 10025
    # In another currency, refused: no EUR balance is left behind (an empty one would then
    # refuse the EUR orders that the USD balance converts).
    in_eur = cli(*args, "--currency", "EUR", check=False)
    assert in_eur.returncode != 0 and "nothing credited" in in_eur.stderr, in_eur.stderr
    currencies = [s["meta"]["currency_code"] for s in ok(http.get("/funding_sources"))["funding_sources"]]
    assert currencies == ["USD"]
    # References are per organization, and runs without one are never deduplicated.
    cli("balance", "fund", "--org", other_org.id, "--amount", "1", "--memo", "wire", "--reference", "W-8812")
    cli("balance", "fund", "--org", org.id, "--amount", "1", "--memo", "no ref")
    cli("balance", "fund", "--org", org.id, "--amount", "1", "--memo", "no ref")
    assert available_cents(http) == before + 10025 + 200
    assert cli("ledger", "verify").returncode == 0


def test_concurrent_runs_with_one_reference_credit_once(org, http, database_url, tmp_path):
    before = available_cents(http)
    env = {**os.environ, "LARGESSE_DATABASE_URL": database_url}
    command = [str(Path(sys.executable).parent / "largesse"), "balance", "fund", "--org", org.id, "--amount",
               "10", "--memo", "race", "--reference", "RACE-1", "--json"]
    runs = [subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(4)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    assert sorted(json.loads(out)["credited"] for out, _ in outputs) == [False, False, False, True]
    assert available_cents(http) == before + 1000


def test_products_list(cli, engine):
    products = _json(cli("products", "list", "--json"))["products"]
    assert "PGCNWBOOKS01US" in [p["id"] for p in products]


def _product(pid: str, **overrides) -> dict:
    return {"id": pid, "name": "Test Card", "category": "merchant_card", "subcategory": "fashion",
            "currency_codes": ["USD"], "countries": ["US"], "images": [], "description": "d", "disclosure": "",
            "skus": [{"min": 2, "max": 20, "currency_code": "USD"}], **overrides}


def test_products_import_then_orderable(org, http, api, cli, tmp_path):
    pid = "PTEST" + secrets.token_hex(4).upper()
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"products": [_product(pid)]}))
    result = cli("products", "import", str(path))
    assert "1 created" in result.stdout
    assert api.get_product(pid).product.skus[0].max == 20
    ok(http.post("/orders", json=order_body(org.member_email, denomination=20, products=[pid])))
    error(http.post("/orders", json=order_body(org.member_email, denomination=21, products=[pid])), 400)
    path.write_text(json.dumps({"products": [_product(pid, name="Renamed")]}))
    assert "1 updated" in cli("products", "import", str(path)).stdout
    assert ok(http.get(f"/products/{pid}"))["product"]["name"] == "Renamed"
    assert len(api.list_products().products) == len(ok(http.get("/products"))["products"])


BAD_CATALOGS = {
    "not json": "{products: ",
    "a list": "[]",
    "no products key": '{"items": []}',
    "bad id": json.dumps({"products": [_product("lower-case-id")]}),
    "bad category": json.dumps({"products": [_product("PBADCATEGORY01", category="gift")]}),
    "sku min > max": json.dumps({"products": [_product("PBADSKU0000001", skus=[{"min": 9, "max": 1,
                                                                              "currency_code": "USD"}])]}),
    "no skus": json.dumps({"products": [_product("PNOSKUS0000001", skus=[])]}),
    "images not a list": json.dumps({"products": [_product("PBADIMAGES0001", images="card.png")]}),
    "image without src": json.dumps({"products": [_product("PBADIMAGES0002", images=[{"type": "card"}])]}),
    "countries not a list": json.dumps({"products": [_product("PBADCOUNTRY001", countries="US")]}),
    "no countries": json.dumps({"products": [_product("PBADCOUNTRY002", countries=[])]}),
    "unknown country": json.dumps({"products": [_product("PBADCOUNTRY003", countries=["US", "ZZ"])]}),
    "unknown currency": json.dumps({"products": [_product("PBADCURRENCY01", skus=[{"min": 1, "max": 5,
                                                                                 "currency_code": "ZZZ"}])]}),
    "sku not an object": json.dumps({"products": [_product("PBADSKU0000002", skus=["5-10 USD"])]}),
    "name not a string": json.dumps({"products": [_product("PBADNAME000001", name={"en": "x"})]}),
    "usage_instructions not a string": json.dumps({"products": [_product("PBADUSAGE00001",
                                                                         usage_instructions=["a"])]}),
    "duplicate ids": json.dumps({"products": [_product("PDUPLICATE0001"), _product("PDUPLICATE0001")]}),
    "a null entry": json.dumps({"products": [None]}),
    "a missing key": json.dumps({"products": [{k: v for k, v in _product("PNOCATEGORY001").items()
                                               if k != "category"}]}),
    # An outside audit's: a band as text, fractions of a yen, a blank name, lists where a name
    # goes (they answered "unhashable type: 'list'"), and a file nested 5,000 deep (a traceback).
    "a band as text": json.dumps({"products": [_product("PBANDTEXT00001", skus=[{"min": "10", "max": 50,
                                                                               "currency_code": "USD"}])]}),
    "fractions of a yen": json.dumps({"products": [_product("PBANDYEN000001", skus=[{"min": 10.5, "max": 500,
                                                                                   "currency_code": "JPY"}])]}),
    "a blank name": json.dumps({"products": [_product("PBLANKNAME0001", name="   ")]}),
    "a list as subcategory": json.dumps({"products": [_product("PLISTSUB000001", subcategory=["food"])]}),
    "a list as fulfillment": json.dumps({"products": [_product("PLISTFULFIL01", fulfillment=["sandbox"])]}),
    "a list as category": json.dumps({"products": [_product("PLISTCATEG001", category=["charity"])]}),
    "nested 5,000 deep": '{"products": [' + "[" * 5000 + "]" * 5000 + "]}",
    # `inventory import` then refused its codes ("one fixed value"): refused here, naming it
    "inventory over a range": json.dumps({"products": [_product("PINVRANGE00001", fulfillment="inventory", skus=[
        {"min": 5, "max": 500, "currency_code": "USD"}])]}),
    "inventory in two currencies": json.dumps({"products": [_product("PINVTWOCUR0001", fulfillment="inventory", skus=[
        {"min": 25, "max": 25, "currency_code": "USD"}, {"min": 25, "max": 25, "currency_code": "EUR"}])]}),
}


@pytest.mark.parametrize(("name", "message"), [("a null entry", "products[0] must be an object, not NoneType"),
                                               ("a missing key", "products[0]: the key 'category' is missing"),
                                               ("inventory over a range", "product PINVRANGE00001 has fulfillment "
                                                "inventory but is offered at 5.00-500.00 USD: a code carries no "
                                                "value of its own, so inventory serves only a product of one fixed "
                                                "value")])
def test_products_import_names_what_is_wrong(cli, tmp_path, name, message):
    path = tmp_path / "bad.json"
    path.write_text(BAD_CATALOGS[name])
    assert message in cli("products", "import", str(path), check=False).stderr


@pytest.mark.parametrize("name", list(BAD_CATALOGS))
def test_products_import_refuses_bad_files(cli, http, tmp_path, name, backend):
    if backend != "sqlite":
        pytest.skip("a catalog file is checked before the database is opened: one backend is enough")
    path = tmp_path / "bad.json"
    path.write_text(BAD_CATALOGS[name])
    result = cli("products", "import", str(path), check=False)
    assert result.returncode != 0, result.stdout
    assert result.stderr.startswith("error:") and "Traceback" not in result.stderr, result.stderr
    for pid in re.findall(r'"id": "([A-Z0-9]{12,20})"', BAD_CATALOGS[name]):
        error(http.get(f"/products/{pid}"), 404)
    ok(http.get("/products"))


def test_products_import_missing_file(cli, tmp_path):
    result = cli("products", "import", str(tmp_path / "nope.json"), check=False)
    assert result.returncode != 0 and "nope.json" in result.stderr and "Traceback" not in result.stderr


def test_ledger_verify_detects_a_tampered_balance(org, engine, cli):
    with db.write(engine) as conn:
        conn.execute(text("UPDATE funding_sources SET available_cents = available_cents + 1 WHERE id = :id"),
                     {"id": org.funding_source_id})
    try:
        result = cli("ledger", "verify", check=False)
        assert result.returncode == 1 and org.funding_source_id in result.stdout
        report = _json(cli("ledger", "verify", "--json", check=False))
        assert report["ok"] is False and org.funding_source_id in [p["id"] for p in report["problems"]]
    finally:
        with db.write(engine) as conn:
            conn.execute(text("UPDATE funding_sources SET available_cents = available_cents - 1 WHERE id = :id"),
                         {"id": org.funding_source_id})
    # Other tests' organizations may carry deliberate inconsistencies: only this one's matter here.
    report = _json(cli("ledger", "verify", "--json", check=False))
    assert [p for p in report["problems"] if p["organization_id"] == org.id] == []
