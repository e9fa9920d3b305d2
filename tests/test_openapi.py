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


def test_every_operation_of_the_official_client_is_routed(server):
    """The 66 operations of tremendous-python 6.0 (read from the client's own source: each one's
    HTTP method and path) are all in /openapi.json, path parameters named as we like."""
    import inspect
    import re

    import tremendous.api.tremendous_api as client_api

    source = inspect.getsource(client_api)
    operations = set(re.findall(r"method='([A-Z]+)',\s*resource_path='([^']+)'", source))
    assert len(operations) == 66

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]+\}", "{}", path)

    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    routed = {(method.upper(), shape(path.removeprefix("/api/v2"))) for path, item in paths.items() for method in item}
    missing = sorted((method, path) for method, path in operations if (method, shape(path)) not in routed)
    assert missing == []
