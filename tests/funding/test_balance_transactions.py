"""The ledger as GET /balance_transactions shows it."""

from tests.conftest import order_body


def test_transactions_follow_the_ledger(org, api, http):
    order = http.post("/orders", json=order_body(org.member_email, denomination=12.5)).json()["order"]
    transactions = api.list_balance_transactions().transactions
    assert [t.action for t in transactions] == ["order", "sandbox_credit"]
    debit, credit = transactions
    assert credit.amount == 5000 and credit.balance == 5000
    assert debit.amount == -12.5 and debit.balance == 4987.5
    assert debit.order.id == order["id"] and debit.order.payment.total == 12.5
    assert len(api.list_balance_transactions(limit=1).transactions) == 1
    future = http.get("/balance_transactions", params={"created_at[gte]": "2999-01-01T00:00:00Z"})
    assert future.status_code == 200 and future.json()["transactions"] == []
    assert http.get("/balance_transactions", params={"created_at[gte]": "yesterday"}).status_code == 422


def test_other_organizations_entries_are_invisible(org, other_org, http):
    http.post("/orders", json=order_body(org.member_email))
    with other_org.http() as other:
        actions = [t["action"] for t in other.get("/balance_transactions").json()["transactions"]]
    assert actions == ["sandbox_credit"]


def test_a_refund_shows_the_orders_refund(org, http, deliver):
    """A reward refund's entry carries its order's payment as GET /orders/{id} shows it, refund included."""
    from tests.conftest import failing

    order = http.post("/orders", json=order_body(failing(org.member_email), denomination=12.5)).json()["order"]
    deliver()  # the delivery fails, so that the reward can be canceled
    assert http.post(f"/rewards/{order['rewards'][0]['id']}/cancel").status_code == 200
    refund, debit = http.get("/balance_transactions", params={"limit": 2}).json()["transactions"]
    assert (refund["action"], refund["amount"], debit["action"]) == ("reward_refund", 12.5, "order")
    shown = http.get(f"/orders/{order['id']}").json()["order"]["payment"]
    assert shown["refund"] == {"total": 12.5, "currency_code": "USD"}
    assert refund["order"]["payment"] == shown == debit["order"]["payment"]
