from tests.conftest import order_body


def test_order_debits_balance_and_lists(org, http):
    response = http.post("/orders", json=order_body(org.member_email, denomination=12.34))
    assert response.status_code == 200, response.text
    order = response.json()["order"]
    assert order["status"] == "EXECUTED"
    assert order["payment"] == {"subtotal": 12.34, "total": 12.34, "fees": 0, "discount": 0, "currency_code": "USD"}
    assert order["rewards"][0]["delivery"] == {"method": "EMAIL", "status": "PENDING"}
    sources = http.get("/funding_sources").json()["funding_sources"]
    assert sources[0]["meta"]["available_cents"] == 500000 - 1234


def test_official_client_sees_order(org, api):
    from tremendous import CreateOrderRequest, SingleRewardOrder

    body = order_body(org.member_email)
    order = api.create_order(CreateOrderRequest(SingleRewardOrder.from_dict(body))).order
    assert order.rewards[0].delivery.status == "PENDING"
    assert api.get_order(order.id).order.payment.total == 25
