"""Top-ups through the official client; the operator credits or rejects them with the CLI."""

from __future__ import annotations

import pytest
from tremendous import CreateTopupRequest
from tremendous.exceptions import ApiException, BadRequestException, ConflictException, NotFoundException

from tests.factories import available_cents, error, ok, unique
from tests.money.conftest import cli_json, concurrent_cli, ledger_problems


def _request(source: str, key: str, amount) -> CreateTopupRequest:
    return CreateTopupRequest(funding_source_id=source, idempotency_key=key, amount=amount)


def test_create_list_get_then_credit_once(org, api, http, cli):
    before = available_cents(http)
    topup = api.create_topup(_request(org.funding_source_id, unique("k"), 200.35)).topup
    assert topup.status == "created" and topup.amount == 200.35 and topup.currency_code == "USD"
    assert topup.funding_source_id == org.funding_source_id and topup.fully_credited_at is None
    assert available_cents(http) == before, "nothing is credited before the operator credits it"
    listed = api.list_topups()
    assert listed.total_count == 1 and [t.id for t in listed.topups] == [topup.id]
    assert api.get_topup(topup.id).topup.status == "created"

    listing = cli("topups", "list", "--org", org.id).stdout
    assert topup.id in listing and "created" in listing
    credited = cli_json(cli("topups", "credit", topup.id, "--json"))
    assert credited["credited"] is True and credited["available_cents"] == before + 20035
    again = cli("topups", "credit", topup.id)
    assert again.returncode == 0 and "already credited" in again.stdout
    assert available_cents(http) == before + 20035

    fetched = api.get_topup(topup.id).topup
    assert fetched.status == "fully_credited" and fetched.fully_credited_at is not None
    assert fetched.instant_credit_amount == 200.35
    (entry, *_) = api.list_balance_transactions().transactions
    assert (entry.action, entry.amount, entry.balance) == ("topup", 200.35, (before + 20035) / 100)
    assert ledger_problems(cli, org.id) == []
    # A credited top-up can no longer be rejected.
    refused = cli("topups", "reject", topup.id, check=False)
    assert refused.returncode == 1 and "fully_credited" in refused.stderr


def test_the_balance_keyword_and_exact_amounts(org, http):
    topup = ok(http.post("/topups", json={"funding_source_id": "balance", "idempotency_key": unique(),
                                          "amount": 0.1}))["topup"]
    assert topup["funding_source_id"] == org.funding_source_id and topup["amount"] == 0.1
    for amount in (10.001, 0, -5, "10", True, 1e300):
        errors = error(http.post("/topups", json={"funding_source_id": "BALANCE", "idempotency_key": unique(),
                                                  "amount": amount}), 400)
        assert "amount" in errors["payload"], (amount, errors)
    assert ok(http.get("/topups"))["total_count"] == 1


def test_idempotency_key_replay_and_conflict(org, api, http):
    key = unique("same-")
    first = api.create_topup(_request(org.funding_source_id, key, 50)).topup
    replay = api.create_topup(_request("BALANCE", key, 50.00)).topup
    assert replay.id == first.id and replay.created_at == first.created_at
    with pytest.raises(ConflictException) as conflict:
        api.create_topup(_request(org.funding_source_id, key, 51))
    assert "idempotency_key" in conflict.value.data.errors.payload
    assert api.list_topups().total_count == 1


def test_concurrent_requests_with_one_key_make_one_topup(org, http):
    import concurrent.futures

    key = unique("race-")

    def post(_):
        with org.http() as client:
            return client.post("/topups", json={"funding_source_id": "BALANCE", "idempotency_key": key, "amount": 7})

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(post, range(6)))
    assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses]
    assert len({r.json()["topup"]["id"] for r in responses}) == 1
    assert ok(http.get("/topups"))["total_count"] == 1


def test_unknown_or_foreign_funding_source_is_400(org, other_org, api, http):
    for source in ("NOSUCHSOURCE00", other_org.funding_source_id, "INVOICE"):
        with pytest.raises(BadRequestException) as refused:
            api.create_topup(_request(source, unique(), 10))
        assert "funding_source_id" in refused.value.data.errors.payload, source
    errors = error(http.post("/topups", content=b"", headers={"Content-Type": "application/json"}), 400)
    assert {"funding_source_id", "idempotency_key", "amount"} <= set(errors["payload"])
    assert ok(http.get("/topups"))["total_count"] == 0


def test_topups_are_private_to_their_organization(org, other_org, api):
    topup = api.create_topup(_request("BALANCE", unique(), 10)).topup
    with pytest.raises(NotFoundException):
        other_org.api().get_topup(topup.id)
    assert other_org.api().list_topups().total_count == 0


def test_read_only_key_cannot_create(org, cli, server):
    from tests.conftest import Org

    key = cli_json(cli("keys", "create", "--org", org.id, "--permission", "read_only", "--json"))["api_key"]
    reader = Org(org.id, key, org.funding_source_id, org.member_email, server.url).api()
    with pytest.raises(ApiException) as refused:
        reader.create_topup(_request("BALANCE", unique(), 10))
    assert refused.value.status == 403
    assert reader.list_topups().total_count == 0


def test_reject_credits_nothing(org, api, http, cli):
    before = available_cents(http)
    topup = api.create_topup(_request("BALANCE", unique(), 99)).topup
    cli("topups", "reject", topup.id, "--reason", "card declined")
    fetched = api.get_topup(topup.id).topup
    assert fetched.status == "rejected" and fetched.rejected_at is not None
    refused = cli("topups", "credit", topup.id, check=False)
    assert refused.returncode == 1 and "rejected" in refused.stderr
    assert available_cents(http) == before
    assert cli("topups", "credit", "NOSUCHTOPUP000", check=False).returncode == 1


def test_concurrent_credits_credit_once(org, api, http, database_url, tmp_path, cli):
    before = available_cents(http)
    topup = api.create_topup(_request("BALANCE", unique(), 12.34)).topup
    results = concurrent_cli(database_url, tmp_path, "topups", "credit", topup.id, "--json")
    assert all(code == 0 for code, _, _ in results), results
    assert sorted(cli_json_text(out)["credited"] for _, out, _ in results) == [False, False, False, True]
    assert available_cents(http) == before + 1234
    actions = [t.action for t in api.list_balance_transactions().transactions]
    assert actions.count("topup") == 1
    assert ledger_problems(cli, org.id) == []


def test_credit_racing_reject_has_one_winner(org, api, http, database_url, tmp_path, cli):
    before = available_cents(http)
    topup = api.create_topup(_request("BALANCE", unique(), 5)).topup
    results = concurrent_cli(database_url, tmp_path, commands=[
        ("topups", "credit", topup.id), ("topups", "reject", topup.id), ("topups", "credit", topup.id),
        ("topups", "reject", topup.id)])
    status = api.get_topup(topup.id).topup.status
    credits_ok = [code == 0 for code, _, _ in results[0::2]]
    rejects_ok = [code == 0 for code, _, _ in results[1::2]]
    if status == "fully_credited":  # the credits succeed (one credits, one finds it done), both rejects fail
        assert credits_ok == [True, True] and rejects_ok == [False, False], results
        assert available_cents(http) == before + 500
    else:  # one reject won: the credits fail, the other reject fails too
        assert status == "rejected" and credits_ok == [False, False] and sorted(rejects_ok) == [False, True]
        assert available_cents(http) == before
    assert ledger_problems(cli, org.id) == []


def cli_json_text(text: str) -> dict:
    import json

    return json.loads(text)


def test_topup_of_a_eur_balance_is_in_euros(org, api, http, cli):
    cli("balance", "fund", "--org", org.id, "--amount", "1", "--memo", "open EUR", "--currency", "EUR")
    eur = next(s for s in api.list_funding_sources().funding_sources if s.meta.currency_code == "EUR")
    topup = api.create_topup(_request(eur.id, unique(), 20.5)).topup
    assert topup.currency_code == "EUR" and topup.funding_source_id == eur.id
    cli("topups", "credit", topup.id)
    assert api.get_funding_source(eur.id).funding_source.meta.available_cents == 2150
    assert available_cents(http) == 500000
    assert ledger_problems(cli, org.id) == []
