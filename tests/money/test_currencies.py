"""Every currency: balances in USD, EUR and GBP, exchange rates, and orders that convert."""

from __future__ import annotations

import json
import secrets
from decimal import ROUND_HALF_UP, Decimal

import pytest
from sqlalchemy import select, update

from largesse import db
from largesse.delivery import service as delivery
from largesse.orders.models import rewards
from tests.conftest import failing
from tests.factories import TRAVEL_MULTI, available_cents, client_order, error, ok, order_body
from tests.money.conftest import cli_json, ledger_problems

DEFAULT_EUR_PER_USD = Decimal("0.9215")  # src/largesse/forex/default_rates.csv


def _rate(from_units_per_usd: Decimal, to_units_per_usd: Decimal) -> Decimal:
    """The documented cross rate: fixed to 10 decimals, half up."""
    return (to_units_per_usd / from_units_per_usd).quantize(Decimal("1e-10"), rounding=ROUND_HALF_UP)


def _charge(cents: int, rate: Decimal) -> int:
    return int((Decimal(cents) * rate).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _eur_body(email: str, denomination=30, **extra) -> dict:
    body = order_body(email, products=[TRAVEL_MULTI], **extra)
    body["reward"]["value"] = {"denomination": denomination, "currency_code": "EUR"}
    return body


def _sources(http) -> dict[str, dict]:
    return {s["meta"]["currency_code"]: s for s in ok(http.get("/funding_sources"))["funding_sources"]}


def test_forex_serves_the_default_set(api, http):
    forex = api.list_forex().forex
    assert forex["USD"] == 1 and forex["EUR"] == float(DEFAULT_EUR_PER_USD)
    assert {"USD", "EUR", "GBP", "CAD", "AUD", "JPY"} <= set(forex)
    in_eur = api.list_forex(base="eur").forex
    assert in_eur["EUR"] == 1 and in_eur["USD"] == float((1 / DEFAULT_EUR_PER_USD).quantize(Decimal("1e-8")))
    errors = error(http.get("/forex", params={"base": "XXX"}), 400)
    assert "base" in errors["payload"]


def test_eur_reward_from_a_usd_balance_converts_at_the_stored_rate(org, api, http, cli):
    before = available_cents(http)
    order = client_order(api, _eur_body(org.member_email, denomination=30))
    rate = _rate(DEFAULT_EUR_PER_USD, Decimal(1))
    charged = _charge(3000, rate)
    assert order.payment.currency_code == "USD" and order.payment.total == charged / 100
    assert order.rewards[0].value.denomination == 30 and order.rewards[0].value.currency_code == "EUR"
    assert available_cents(http) == before - charged
    conversion = ok(http.get(f"/orders/{order.id}"))["order"]["payment"]["conversion"]
    assert conversion == {"currency_code": "EUR", "rate": float(rate), "rate_text": str(rate),
                          "rate_date": "2026-11-20", "subtotal": 30, "fees": 0, "total": 30}
    (entry, *_) = api.list_balance_transactions().transactions
    assert entry.action == "order" and entry.amount == -charged / 100 and "30.00 EUR converted to USD" in (
        entry.description)
    assert ledger_problems(cli, org.id) == []


def test_fees_convert_with_the_denomination_rounded_half_up(org, http, cli):
    cli("org", "fees", "--org", org.id, "--basis-points", "250", "--flat", "0.50")
    before = available_cents(http)
    order = ok(http.post("/orders", json=_eur_body(org.member_email, denomination=33.33)))["order"]
    rate = _rate(DEFAULT_EUR_PER_USD, Decimal(1))
    # The flat fee is in the organization's currency: 0.50 USD is 0.46 EUR (46.075 cents, half up).
    flat = _charge(50, _rate(Decimal(1), DEFAULT_EUR_PER_USD))
    assert flat == 46
    fee = 83 + flat  # 2.5 % of 33.33 EUR is 83.325 cents: 0.83 EUR, half up
    total, subtotal = _charge(3333 + fee, rate), _charge(3333, rate)
    assert order["payment"]["total"] == total / 100 and order["payment"]["subtotal"] == subtotal / 100
    assert round(order["payment"]["fees"] * 100) == total - subtotal
    assert order["payment"]["conversion"]["fees"] == fee / 100
    assert available_cents(http) == before - total
    assert ledger_problems(cli, org.id) == []


def test_a_yen_organizations_flat_fee_is_in_yen_whatever_the_rewards_currency(engine, server, cli):
    """`org fees --flat 10` on a JPY organization is 10 yen per reward: a USD reward pays it
    converted (0.06 USD), not 10 USD (1,546 yen, as before the fix). A USD organization's EUR
    balance pays its flat fee converted to EUR too."""
    from tests.yen_kit import yen_org

    yen = yen_org(engine, server.url)
    cli("org", "fees", "--org", yen.id, "--flat", "10")
    with yen.http() as http:
        before = available_cents(http)
        body = order_body(yen.member_email, denomination=25, products=[TRAVEL_MULTI])
        body["reward"]["value"]["currency_code"] = "USD"
        order = ok(http.post("/orders", json=body))["order"]
        jpy_per_usd = _rate(Decimal(1), Decimal(ok(http.get("/forex"))["forex"]["JPY"]).quantize(Decimal("1e-8")))
        usd_flat = _charge(1000, _rate(jpy_per_usd, Decimal(1)))  # 10 yen in US cents, half up
        assert usd_flat == 6
        assert order["payment"]["conversion"]["fees"] == usd_flat / 100
        total = _charge(2500 + usd_flat, jpy_per_usd / 100) * 100  # whole yen, half up
        assert order["payment"]["currency_code"] == "JPY" and order["payment"]["total"] == total / 100
        assert 0 < order["payment"]["fees"] <= 10
        assert available_cents(http) == before - total
    assert ledger_problems(cli, yen.id) == []


def test_a_yen_percentage_fee_is_whole_yen(engine, server, cli):
    """1.5 % of 1,001 JPY is 15 JPY (15.015 half up to the yen), not 15.02: every amount of a
    zero-decimal currency is whole units; of 1,034 JPY it is 16 (15.51, half up)."""
    from tests.yen_kit import yen_order_body, yen_org, yen_product

    yen, product = yen_org(engine, server.url), yen_product(engine)
    cli("org", "fees", "--org", yen.id, "--basis-points", "150")
    with yen.http() as http:
        before = available_cents(http)
        order = ok(http.post("/orders", json=yen_order_body(yen.member_email, product, yen=1001)))["order"]
        assert (order["payment"]["fees"], order["payment"]["total"]) == (15, 1016)
        assert available_cents(http) == before - 101600
        # 15.495 yen is 15, 15.51 yen is 16: half up to the yen, not truncated.
        # 16.5 -> 17 tells half up from half even (16) and from cutting off (16)
        for denomination, fee in ((1033, 15), (1034, 16), (1100, 17)):
            order = ok(http.post("/orders", json=yen_order_body(yen.member_email, product, yen=denomination)))["order"]
            assert (order["payment"]["fees"], order["payment"]["total"]) == (fee, denomination + fee)
    assert ledger_problems(cli, yen.id) == []


def test_a_eur_balance_pays_the_flat_fee_converted(org, http, cli):
    cli("org", "fees", "--org", org.id, "--flat", "0.50")
    cli("balance", "fund", "--org", org.id, "--amount", "100", "--memo", "EUR wire", "--currency", "EUR")
    order = ok(http.post("/orders", json=_eur_body(org.member_email, denomination=30)))["order"]
    assert order["payment"]["currency_code"] == "EUR" and "conversion" not in order["payment"]
    assert order["payment"]["fees"] == 0.46 and order["payment"]["total"] == 30.46
    assert ledger_problems(cli, org.id) == []


def test_a_cross_rate_that_rounds_to_zero_converts_nothing(org, http, cli, tmp_path, default_rates):
    """A mistyped rate (EUR 0.000000000001 per USD) made a 500 USD reward cost 0 EUR."""
    cli("balance", "fund", "--org", org.id, "--amount", "100", "--memo", "EUR wire", "--currency", "EUR")
    path = tmp_path / "rates.csv"
    path.write_text("currency_code,rate,date\nUSD,1,2026-11-20\nEUR,0.000000000001,2026-11-20\n")
    cli("forex", "import", str(path))
    eur = _sources(http)["EUR"]
    body = order_body(org.member_email, denomination=500)
    body["reward"]["value"]["currency_code"] = "USD"
    body["payment"]["funding_source_id"] = eur["id"]
    errors = error(http.post("/orders", json=body), 400)
    assert "no exchange rate" in errors["message"], errors
    assert _sources(http)["EUR"]["meta"]["available_cents"] == eur["meta"]["available_cents"]


def test_the_approval_threshold_is_converted_to_the_paying_balances_currency(org, http, cli, tmp_path,
                                                                           default_rates):
    """100.00 USD is 92.15 EUR at the default rate: a 95 EUR order from the EUR balance is above it
    (it escaped approval when the threshold was compared as 100.00 EUR)."""
    cli("org", "approvals", "--org", org.id, "--mode", "above", "--above", "100.00")
    cli("balance", "fund", "--org", org.id, "--amount", "1000", "--memo", "EUR wire", "--currency", "EUR")
    statuses = {amount: ok(http.post("/orders", json=_eur_body(org.member_email, denomination=amount)))["order"][
        "status"] for amount in (92.15, 92.16)}
    assert statuses == {92.15: "EXECUTED", 92.16: "PENDING APPROVAL"}
    in_usd = ok(http.post("/orders", json=order_body(org.member_email, denomination=95)))["order"]
    assert in_usd["payment"]["currency_code"] == "USD" and in_usd["status"] == "EXECUTED"
    # Without a rate between the two currencies, the order waits for a person.
    path = tmp_path / "rates.csv"
    path.write_text("currency_code,rate,date\nUSD,1,2026-11-20\nGBP,0.79,2026-11-20\n")
    cli("forex", "import", str(path))
    assert ok(http.post("/orders", json=_eur_body(org.member_email, denomination=30)))["order"][
        "status"] == "PENDING APPROVAL"
    assert ledger_problems(cli, org.id) == []


def test_a_flat_fee_without_a_rate_to_the_rewards_currency_is_400(org, http, cli, tmp_path, default_rates):
    cli("org", "fees", "--org", org.id, "--flat", "0.50")
    cli("balance", "fund", "--org", org.id, "--amount", "100", "--memo", "EUR wire", "--currency", "EUR")
    path = tmp_path / "rates.csv"
    path.write_text("currency_code,rate,date\nUSD,1,2026-11-20\nGBP,0.79,2026-11-20\n")
    cli("forex", "import", str(path))
    before = _sources(http)["EUR"]["meta"]["available_cents"]
    errors = error(http.post("/orders", json=_eur_body(org.member_email, denomination=30)), 400)
    assert "flat fee" in errors["message"] and "currency_code" in errors["payload"]["reward"]["value"]
    assert _sources(http)["EUR"]["meta"]["available_cents"] == before
    cli("org", "fees", "--org", org.id, "--flat", "0")  # no flat fee: nothing to convert
    order = ok(http.post("/orders", json=_eur_body(org.member_email, denomination=30)))["order"]
    assert order["payment"]["total"] == 30


def test_a_reward_worth_less_than_a_cent_once_converted_is_400(org, api, http, cli, deliver, engine, tmp_path,
                                                                default_rates):
    """At 10,000 EUR per USD, 25 EUR are a quarter of a cent: it was charged 0 (any number of
    free rewards per order), and its cancel and the expiry sweep then failed on a refund of 0."""
    path = tmp_path / "rates.csv"
    path.write_text("currency_code,rate,date\nUSD,1,2026-11-20\nEUR,10000,2026-11-20\n")
    cli("forex", "import", str(path))
    before = available_cents(http)
    body = _eur_body(failing(org.member_email), denomination=25)
    body["reward"]["value"]["denomination"] = 25
    errors = error(http.post("/orders", json=body), 400)
    assert "less than the smallest amount of USD" in errors["message"], errors
    assert "denomination" in errors["payload"]["reward"]["value"]
    assert available_cents(http) == before and ok(http.get("/orders"))["orders"] == []
    assert ok(http.post("/orders", json=_eur_body(failing(org.member_email), denomination=50)))[
        "order"]["payment"]["total"] == 0.01  # half a cent rounds up: charged

    # One charged 0 before the rule (as stored then): its cancel and its expiry refund nothing.
    order = ok(http.post("/orders", json=_eur_body(failing(org.member_email), denomination=50)))["order"]
    reward_id = order["rewards"][0]["id"]
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward_id).values(charged_cents=0))
    deliver()
    charged_zero = available_cents(http)
    api.cancel_reward(reward_id)
    assert available_cents(http) == charged_zero
    # The ledger of the whole test database must tie up again: the charge as it was, refunded.
    with db.write(engine) as conn:
        conn.execute(update(rewards).where(rewards.c.id == reward_id).values(charged_cents=1))
        row = conn.execute(select(rewards).where(rewards.c.id == reward_id)).one()
        assert delivery.refund(conn, row, memo="test: the tampered charge restored") == 1
    assert ledger_problems(cli, org.id) == []


def test_canceling_a_converted_reward_refunds_what_was_charged(org, api, http, cli, deliver):
    before = available_cents(http)
    order = ok(http.post("/orders", json=_eur_body(failing(org.member_email), denomination=25.55)))["order"]
    deliver()  # its delivery fails: it can be canceled (API.md §2.5)
    api.cancel_reward(order["rewards"][0]["id"])
    assert available_cents(http) == before
    assert ledger_problems(cli, org.id) == []


def test_the_balance_in_the_rewards_currency_pays_first(org, api, http, cli):
    funded = cli_json(cli("balance", "fund", "--org", org.id, "--amount", "100", "--memo", "EUR wire",
                          "--currency", "eur", "--json"))
    assert funded["available_cents"] == 10000
    sources = _sources(http)
    eur_id = sources["EUR"]["id"]
    assert funded["funding_source_id"] == eur_id and sources["USD"]["id"] == org.funding_source_id
    usd_before = available_cents(http)
    order = client_order(api, _eur_body(org.member_email, denomination=40))
    assert order.payment.currency_code == "EUR" and order.payment.total == 40
    assert _sources(http)["EUR"]["meta"]["available_cents"] == 6000 and available_cents(http) == usd_before
    # BALANCE is still the primary balance; an explicit ID picks another one, which then converts.
    assert api.get_funding_source("BALANCE").funding_source.id == org.funding_source_id
    body = order_body(org.member_email, denomination=20)
    body["payment"]["funding_source_id"] = eur_id
    # A reward without a currency_code is in the paying balance's currency: it is named here.
    body["reward"]["value"]["currency_code"] = "USD"
    order = ok(http.post("/orders", json=body))["order"]
    charged = _charge(2000, _rate(Decimal(1), DEFAULT_EUR_PER_USD))
    assert order["payment"]["currency_code"] == "EUR" and order["payment"]["total"] == charged / 100
    assert order["payment"]["conversion"]["currency_code"] == "USD"
    assert _sources(http)["EUR"]["meta"]["available_cents"] == 6000 - charged
    # Too little in the EUR balance: 402, nothing charged.
    error(http.post("/orders", json=_eur_body(org.member_email, denomination=700)), 402)
    assert _sources(http)["EUR"]["meta"]["available_cents"] == 6000 - charged
    shown = cli_json(cli("balance", "show", "--org", org.id, "--json"))
    assert shown["funding_source_id"] == org.funding_source_id
    assert [b["currency_code"] for b in shown["balances"]] == ["USD", "EUR"]
    actions = [(t.currency_code, t.action) for t in api.list_balance_transactions(limit=3).transactions]
    assert actions == [("EUR", "order"), ("EUR", "order"), ("EUR", "funding")]
    assert ledger_problems(cli, org.id) == []


def test_balance_currencies_are_usd_eur_gbp(org, cli):
    refused = cli("balance", "fund", "--org", org.id, "--amount", "1", "--memo", "x", "--currency", "JPY",
                  check=False)
    assert refused.returncode == 1 and "--currency" in refused.stderr
    cli("balance", "fund", "--org", org.id, "--amount", "1", "--memo", "x", "--currency", "GBP")
    cli("balance", "fund", "--org", org.id, "--amount", "2", "--memo", "x", "--currency", "GBP")
    shown = cli_json(cli("balance", "show", "--org", org.id, "--json"))
    assert [(b["currency_code"], b["available_cents"]) for b in shown["balances"]] == [("USD", 500000),
                                                                                     ("GBP", 300)]


def test_a_currency_without_a_rate_is_refused_and_charges_nothing(org, http, cli, tmp_path):
    pid = "PSEK" + secrets.token_hex(4).upper()
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"products": [{
        "id": pid, "name": "Kronor Card", "category": "merchant_card", "currency_codes": ["SEK"],
        "countries": ["SE"], "images": [], "description": "d", "disclosure": "",
        "skus": [{"min": 10, "max": 1000, "currency_code": "SEK"}]}]}))
    cli("products", "import", str(path))
    before = available_cents(http)
    body = order_body(org.member_email, products=[pid])
    body["reward"]["value"] = {"denomination": 100, "currency_code": "SEK"}
    errors = error(http.post("/orders", json=body), 400)
    assert "SEK" in errors["message"] and "currency_code" in errors["payload"]["reward"]["value"]
    assert available_cents(http) == before and ok(http.get("/orders"))["total_count"] == 0


def test_an_order_converts_from_one_currency(org, http):
    body = {"payment": {"funding_source_id": "balance"}, "rewards": [
        _eur_body(org.member_email)["reward"], order_body(org.member_email, products=[TRAVEL_MULTI])["reward"]]}
    body["rewards"][1]["value"] = {"denomination": 30, "currency_code": "GBP"}
    errors = error(http.post("/orders", json=body), 400)
    assert "currency_code" in errors["payload"]["rewards"]["1"]["value"]
    assert ok(http.get("/orders"))["total_count"] == 0
    # A reward in the balance's own currency beside a converted one: the message names the
    # order's currency (it read "converted from USD to USD").
    usd = order_body(org.member_email, products=[TRAVEL_MULTI])["reward"]
    body["rewards"] = [usd, _eur_body(org.member_email)["reward"]]
    errors = error(http.post("/orders", json=body), 400)
    assert errors["payload"]["rewards"]["1"]["value"]["currency_code"] == [
        "must be USD, the currency of this order's other rewards: the rewards of one order share one currency"]


def test_forex_import_replaces_the_set(org, api, http, cli, tmp_path, default_rates):
    path = tmp_path / "rates.csv"
    # With a UTF-8 BOM, as Excel's "CSV UTF-8" writes it (it read as a wrong header).
    path.write_text("\ufeffcurrency_code,rate,date\nUSD,1,2026-11-22\nEUR,0.8,2026-11-22\nGBP,0.75,2026-11-22\n",
                    encoding="utf-8")
    assert "imported 3 rates" in cli("forex", "import", str(path)).stdout
    assert api.list_forex().forex == {"EUR": 0.8, "GBP": 0.75, "USD": 1}
    order = ok(http.post("/orders", json=_eur_body(org.member_email, denomination=30)))["order"]
    assert order["payment"]["total"] == 37.5 and order["payment"]["conversion"]["rate_date"] == "2026-11-22"
    for bad in ("currency_code,rate,date\nEUR,0.8,2026-11-22\n",  # no USD
                "currency_code,rate,date\nUSD,1,2026-11-22\nEUR,0.8e1,2026-11-22\n",
                "currency_code,rate,date\nUSD,1,2026-11-22\nEUR,-0.8,2026-11-22\n",
                "currency_code,rate,date\nUSD,1,2026-11-22\neur,0.8,2026-11-22\n",
                "currency_code,rate,date\nUSD,1,2026-11-22\nEUR,0.8,22/11/2026\n",
                "currency_code,rate,date\nUSD,1,2026-11-22\nEUR,0.8,2026-11-22\nEUR,0.9,2026-11-22\n",
                "code,rate\nUSD,1\n"):
        path.write_text(bad)
        refused = cli("forex", "import", str(path), check=False)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, (bad, refused.stderr)
    assert api.list_forex().forex == {"EUR": 0.8, "GBP": 0.75, "USD": 1}
    # A currency the set no longer has cannot be converted.
    body = order_body(org.member_email, products=[TRAVEL_MULTI])
    body["reward"]["value"] = {"denomination": 30, "currency_code": "CAD"}
    error(http.post("/orders", json=body), 400)
    assert ledger_problems(cli, org.id) == []


def test_extreme_imported_rates_are_exact_and_an_unpayable_conversion_is_400(org, api, http, cli, tmp_path,
                                                                              default_rates):
    # The widest rates an import takes (12 digits each side of the point): their ratios needed more
    # than the default decimal context's 28 digits (InvalidOperation: GET /forex and orders 500).
    path = tmp_path / "rates.csv"
    path.write_text("currency_code,rate,date\nUSD,1,2026-11-22\nEUR,0.000000000001,2026-11-22\n"
                    "GBP,999999999999.999999999999,2026-11-22\n")
    cli("forex", "import", str(path))
    assert api.list_forex(base="EUR").forex["GBP"] == float(Decimal("999999999999.999999999999") * 10**12)
    assert api.list_forex(base="GBP").forex["EUR"] == 0
    before = available_cents(http)
    body = order_body(org.member_email, products=[TRAVEL_MULTI])
    body["reward"]["value"] = {"denomination": 30, "currency_code": "EUR"}  # 30 EUR: 3e13 USD
    errors = error(http.post("/orders", json=body), 400)
    assert "denomination" in errors["payload"]["reward"]["value"]
    assert available_cents(http) == before and ok(http.get("/orders"))["total_count"] == 0


@pytest.mark.parametrize("query", ["created_at%5Bgte%5D=yesterday", "created_at%5Blte%5D=2024-13-01",
                                   "created_at%5Bgte%5D=0001-01-01T00:00:00%2B23:59", "offset=x", "limit=-1"])
def test_invalid_transaction_filters_are_422(api, http, query):
    from tremendous.exceptions import UnprocessableEntityException

    response = http.get("/balance_transactions?" + query)
    error(response, 422)
    if query.startswith("created_at%5Bgte"):
        with pytest.raises(UnprocessableEntityException) as refused:
            api.list_balance_transactions(created_at_gte="yesterday")
        assert refused.value.data.errors.payload


def test_transaction_date_filters(org, api, http):
    http.post("/orders", json=order_body(org.member_email))
    everything = api.list_balance_transactions()
    created = everything.transactions[0].created_at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert len(api.list_balance_transactions(created_at_gte=created).transactions) >= 1
    assert api.list_balance_transactions(created_at_gte="2999-01-01T00:00:00Z").transactions == []
    assert len(api.list_balance_transactions(created_at_lte="2999-01-01T00:00:00Z").transactions) == 2


def test_a_reference_credits_one_balance(org, cli, http):
    args = ("balance", "fund", "--org", org.id, "--amount", "10", "--memo", "wire", "--reference", "W-CUR-1")
    cli(*args, "--currency", "EUR")
    other = cli(*args, check=False)  # the same reference for the USD balance: already used
    assert other.returncode == 1 and "10.00 EUR" in other.stderr, other.stderr
    assert _sources(http)["EUR"]["meta"]["available_cents"] == 1000 and available_cents(http) == 500000
    reserved = cli("balance", "fund", "--org", org.id, "--amount", "1", "--memo", "x", "--reference", "topup:X",
                   check=False)
    assert reserved.returncode == 1 and "reserved" in reserved.stderr


def test_concurrent_orders_never_overdraw_a_eur_balance(org, http, cli):
    import concurrent.futures

    cli("balance", "fund", "--org", org.id, "--amount", "100", "--memo", "EUR wire", "--currency", "EUR")

    def place(_):
        with org.http() as client:
            return client.post("/orders", json=_eur_body(org.member_email, denomination=30)).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(place, range(8)))
    assert statuses == [200] * 3 + [402] * 5, statuses
    assert _sources(http)["EUR"]["meta"]["available_cents"] == 1000 and available_cents(http) == 500000
    assert ledger_problems(cli, org.id) == []
