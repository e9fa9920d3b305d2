"""Webhook events of invoices and of credited top-ups (API.md §8), through the outbox."""

from __future__ import annotations

from tremendous import CreateInvoiceRequest, CreateTopupRequest, CreateWebhookRequest

from tests.delivery.conftest import wait_for
from tests.factories import unique
from tests.webhooks.kit import settle


def test_invoice_and_topup_events(org, api, cli, receiver, engine, fast):
    settings = fast()
    settle(engine, settings)
    api.create_webhook(CreateWebhookRequest(url=receiver.url))
    paid = api.create_invoice(CreateInvoiceRequest(amount=10)).invoice
    deleted = api.create_invoice(CreateInvoiceRequest(amount=20)).invoice
    api.delete_invoices(deleted.id)
    api.delete_invoices(deleted.id)  # no change, no second event
    cli("invoices", "pay", paid.id)
    cli("invoices", "pay", paid.id)  # already paid: no second event
    topup = api.create_topup(CreateTopupRequest(funding_source_id="BALANCE", idempotency_key=unique(), amount=5))
    cli("topups", "credit", topup.topup.id)
    rejected = api.create_topup(CreateTopupRequest(funding_source_id="BALANCE", idempotency_key=unique(), amount=6))
    cli("topups", "reject", rejected.topup.id)

    wait_for(lambda: receiver.events("INVOICES.PAID") and receiver.events("FUNDING_SOURCES.FUNDED"),
             settings=settings, engine=engine)
    wait_for(lambda: len(receiver.events("INVOICES.CREATED")) == 2 and receiver.events("INVOICES.DELETED"),
             settings=settings, engine=engine)

    def resources(name):
        return [e["payload"]["resource"] for e in receiver.events(name)]

    assert resources("INVOICES.CREATED") == [{"id": paid.id, "type": "invoices"},
                                             {"id": deleted.id, "type": "invoices"}]
    assert resources("INVOICES.DELETED") == [{"id": deleted.id, "type": "invoices"}]
    assert resources("INVOICES.PAID") == [{"id": paid.id, "type": "invoices"}]
    assert resources("FUNDING_SOURCES.FUNDED") == [{"id": org.funding_source_id, "type": "funding_sources"}]
