"""/funding_sources: the sandbox balance, by ID and by the BALANCE keyword."""

from __future__ import annotations

import pytest

from tests.factories import error, ok


def test_client_lists_the_sandbox_balance(org, api):
    (source,) = api.list_funding_sources().funding_sources
    assert source.id == org.funding_source_id and source.method == "balance"
    assert source.meta.available_cents == 500000 and source.meta.pending_cents == 0


def test_wire_meta_is_integers_and_amounts(http):
    meta = ok(http.get("/funding_sources"))["funding_sources"][0]["meta"]
    assert meta["available_cents"] == 500000 and type(meta["available_cents"]) is int
    assert meta["pending_cents"] == 0 and meta["currency_code"] == "USD"
    assert meta["available_amount"] == 5000


@pytest.mark.parametrize("key", ["id", "BALANCE", "balance", "Balance"])
def test_client_gets_balance_by_id_or_keyword(org, api, key):
    source = api.get_funding_source(org.funding_source_id if key == "id" else key).funding_source
    assert source.id == org.funding_source_id and source.meta.available_cents == 500000


def test_unknown_funding_source_is_404(api, http):
    from tremendous.exceptions import NotFoundException

    error(http.get("/funding_sources/NOSUCHSOURCE00"), 404)
    with pytest.raises(NotFoundException):
        api.get_funding_source("NOSUCHSOURCE00")


def test_invoice_keyword_is_not_found(api, http):
    # No invoice funding source exists here: get_funding_source("INVOICE") is a 404, the
    # one status that operation's client decodes.
    from tremendous.exceptions import NotFoundException

    error(http.get("/funding_sources/INVOICE"), 404)
    with pytest.raises(NotFoundException):
        api.get_funding_source("invoice")
