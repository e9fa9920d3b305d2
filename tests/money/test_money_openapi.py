"""The money side's operations are routed and documented in /openapi.json."""

import httpx


def test_operations_are_in_the_openapi_document(server):
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    expected = {
        "/api/v2/topups": {"get", "post"}, "/api/v2/topups/{id}": {"get"},
        "/api/v2/invoices": {"get", "post"}, "/api/v2/invoices/{id}": {"get", "delete"},
        "/api/v2/invoices/{id}/csv": {"get"}, "/api/v2/invoices/{id}/pdf": {"get"},
        "/api/v2/balance_transactions": {"get"}, "/api/v2/forex": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths.get(path, {})), path
    assert "text/csv" in paths["/api/v2/invoices/{id}/csv"]["get"]["responses"]["200"]["content"]
    assert "application/pdf" in paths["/api/v2/invoices/{id}/pdf"]["get"]["responses"]["200"]["content"]
    body = paths["/api/v2/topups"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/CreateTopupIn")
