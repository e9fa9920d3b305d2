"""/openapi.json documents the API and its error responses; /docs serves HTML."""

from __future__ import annotations

import httpx


def test_openapi_document(server):
    response = httpx.get(f"{server.url}/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for path in ("/api/v2/orders", "/api/v2/orders/{order_id}", "/api/v2/rewards", "/api/v2/fields",
                 "/api/v2/funding_sources", "/api/v2/campaigns", "/api/v2/products"):
        assert path in paths, sorted(paths)
    create = paths["/api/v2/orders"]["post"]
    assert {"200", "201", "400", "401", "402", "404", "409"} <= set(create["responses"])
    error_ref = create["responses"]["402"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][error_ref.rsplit("/", 1)[-1]]
    assert "errors" in schema["properties"]
    assert "requestBody" in create


def test_docs_page(server):
    response = httpx.get(f"{server.url}/docs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in response.text
