"""/openapi.json documents the API and its error responses; /docs serves HTML."""

from __future__ import annotations

import re

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
    assert {"200", "201", "400", "401", "402", "409"} <= set(create["responses"])
    error_ref = create["responses"]["402"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][error_ref.rsplit("/", 1)[-1]]
    assert "errors" in schema["properties"]
    assert "requestBody" in create


def test_docs_page(server):
    response = httpx.get(f"{server.url}/docs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in response.text
    # Swagger UI's files come from this server: the page works offline and tells no third party
    assert "//" not in "".join(re.findall(r'(?:src|href)="([^"]+)"', response.text))
    for asset, kind in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css")):
        served = httpx.get(f"{server.url}/docs/assets/{asset}")
        assert served.status_code == 200 and kind in served.headers["content-type"], asset


def test_docs_page_renders_the_api_in_a_browser(server, browser_page):
    """Chromium with every request outside this server refused: the page lists the operations."""
    outside = []

    def only_this_server(route):
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    browser_page.route("**/*", only_this_server)
    browser_page.goto(f"{server.url}/docs")
    browser_page.get_by_text("/api/v2/orders/{order_id}", exact=True).first.wait_for(timeout=15000)
    assert browser_page.locator(".opblock").count() > 60 and outside == []


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


def test_query_parameters_of_the_official_client_are_declared(server):
    """Every query parameter that tremendous-python 6.0 sends (read from each operation's
    serializer) is declared on that operation in /openapi.json, so generated clients and /docs
    know it; a required one (connected_organization_id) is declared required."""
    import inspect
    import re

    import tremendous.api.tremendous_api as client_api

    source = inspect.getsource(client_api)
    sent: dict[tuple[str, str], set[str]] = {}
    for body in re.split(r"\n    def _\w+_serialize\(", source)[1:]:
        method, path = re.search(r"method='([A-Z]+)',\s*resource_path='([^']+)'", body).groups()
        sent[(method, re.sub(r"\{[^}]+\}", "{}", path))] = set(re.findall(r"_query_params.append\(\('([^']+)'", body))
    assert sent[("GET", "/orders")] >= {"offset", "limit", "campaign_id", "created_at[gte]"}

    declared: dict[tuple[str, str], dict[str, dict]] = {}
    for path, item in httpx.get(f"{server.url}/openapi.json").json()["paths"].items():
        for method, operation in item.items():
            key = (method.upper(), re.sub(r"\{[^}]+\}", "{}", path.removeprefix("/api/v2")))
            declared[key] = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
    missing = sorted((key, name) for key, names in sent.items() for name in names if name not in declared[key])
    assert missing == []
    members = declared[("GET", "/connected_organization_members")]
    assert members["connected_organization_id"]["required"] is True
    assert declared[("GET", "/orders")]["limit"]["schema"] == {"type": "integer", "default": 10, "minimum": 1,
                                                               "maximum": 500}


def test_the_document_declares_bearer_auth_and_the_simulate_answers_text(server):
    """/docs had no Authorize button (every "Try it out" got 401) and generated clients sent no
    key: no security scheme was declared. simulate answers the text OK, declared as JSON."""
    document = httpx.get(f"{server.url}/openapi.json").json()
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer", "description": document["components"]["securitySchemes"]
        ["bearerAuth"]["description"]}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert (operation.get("security") == [{"bearerAuth": []}]) == path.startswith("/api/v2/"), (path, method)
    simulate = document["paths"]["/api/v2/webhooks/{webhook_id}/simulate"]["post"]["responses"]["200"]
    assert list(simulate["content"]) == ["text/plain"]


def _resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def test_each_operation_documents_the_errors_it_can_answer_as_json(server):
    """Every operation listed the same nine errors (GET /products a 402 "Insufficient funds"
    and a 409 "external_id reused"), none of 405 and 500/503, and simulate's were text/plain
    (its 200's media type was applied to them): each now has its own, all JSON error bodies."""
    document = httpx.get(f"{server.url}/openapi.json").json()
    operations = {(method.upper(), path.removeprefix("/api/v2")): operation
                  for path, item in document["paths"].items() for method, operation in item.items()}
    assert len(operations) == 69
    for (method, path), operation in operations.items():
        responses = operation["responses"]
        errors = {code for code in responses if not code.startswith("2")}
        assert {"401", "405", "429", "default"} <= errors, (method, path)
        for code in errors:
            assert list(responses[code]["content"]) == ["application/json"], (method, path, code)
            schema = _resolve(document, responses[code]["content"]["application/json"]["schema"])
            assert schema["required"] == ["errors"], (method, path, code)
        assert "Allow" in responses["405"]["headers"]
        assert ("404" in errors) == ("{" in path), (method, path)
        assert ("413" in errors) == (method in ("POST", "PUT", "PATCH")), (method, path)
        assert ("403" in errors) == (method != "GET"), (method, path)
        assert ("402" in errors) == ((method, path) == ("POST", "/orders")), (method, path)
        assert "422" not in errors or "HTTPValidationError" not in str(responses["422"]), (method, path)
    assert set(operations["GET", "/products"]["responses"]) == {"200", "400", "401", "405", "429", "default"}
    assert "external_id" in operations["POST", "/orders"]["responses"]["409"]["description"]
    assert "external_id" not in str({k: o["responses"].get("409") for k, o in operations.items() if k[1] != "/orders"})
    simulate = operations["POST", "/webhooks/{webhook_id}/simulate"]["responses"]
    assert list(simulate["200"]["content"]) == ["text/plain"] and "422" in simulate
    assert "500" in simulate["default"]["description"] and "503" in simulate["default"]["description"]
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_every_reference_of_the_document_resolves(server):
    document = httpx.get(f"{server.url}/openapi.json").json()
    refs = set(re.findall(r'"\$ref":\s*"([^"]+)"', httpx.get(f"{server.url}/openapi.json").text))
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs)
    assert {ref.rsplit("/", 1)[-1] for ref in refs} <= set(document["components"]["schemas"])


def test_the_document_carries_the_enums_formats_and_maxima_of_api_md(server):
    """API.md §5's enumerations, its date-time and email formats, the lists' maximum limits and
    a reward's value/recipient/delivery objects (§3) were bare strings, integers and objects."""
    from largesse.fields.service import DATA_TYPES
    from largesse.webhooks.service import SIMULATED_EVENTS

    document = httpx.get(f"{server.url}/openapi.json").json()
    schemas = document["components"]["schemas"]

    def prop(component: str, name: str) -> dict:
        found = schemas[component]["properties"][name]
        return next((b for b in found.get("anyOf", []) if b.get("type") != "null"), found)

    assert "PENDING APPROVAL" in prop("OrderOut", "status")["enum"] and prop("OrderOut", "channel")["enum"][1] == "API"
    assert prop("OrderOut", "created_at")["format"] == "date-time"
    assert prop("OrganizationOut", "created_at")["format"] == "date"  # API.md §3: a date
    assert prop("DeliveryIn", "method")["enum"] == ["EMAIL", "LINK", "PHONE"]
    api_md_data_types = ["Checkbox", "Currency", "Date", "Dropdown", "Email", "List", "Number", "Phone", "Text",
                         "TextArea"]  # API.md §5 FieldDataType, as written there
    assert prop("CreateFieldIn", "data_type")["enum"] == prop("FieldOut", "data_type")["enum"] == api_md_data_types
    assert list(DATA_TYPES) == api_md_data_types
    assert {"ORDERS.CREATED", "REWARDS.DELIVERY.FAILED", "CAMPAIGNS.CREATED", "PRODUCTS.ADDED"} <= set(
        prop("SimulateIn", "event")["enum"]) == set(SIMULATED_EVENTS)
    assert prop("InvoiceOut", "status")["enum"] == ["DELETED", "PAID", "OPEN"]
    assert prop("MemberOut", "status")["enum"] == ["REGISTERED", "INVITED"]
    assert prop("ReportOut", "status")["enum"] == ["CREATED", "PROCESSING", "READY_FOR_DOWNLOAD", "FAILED"]
    assert "ADMIN" in prop("CreateMemberIn", "role")["enum"]
    assert prop("CreateMemberIn", "email")["format"] == "idn-email"
    assert prop("RecipientIn", "email")["format"] == schemas["RewardOut"]["properties"]["recipient"][
        "properties"]["email"]["format"] == "idn-email"  # email_address.valid takes non-ASCII addresses
    reward = schemas["RewardOut"]["properties"]
    assert set(reward["value"]["properties"]) == {"denomination", "currency_code"}
    assert reward["value"]["properties"]["denomination"]["type"] == "number"
    assert set(reward["recipient"]["properties"]) == {"name", "email", "phone"}
    delivery = reward["delivery"]["properties"]
    assert set(delivery) == {"method", "status", "link"} and delivery["status"]["enum"] == [
        "PENDING", "SCHEDULED", "SUCCEEDED", "FAILED"]
    paths = document["paths"]
    for path, maximum in (("/rewards", 500), ("/orders", 500), ("/fraud_reviews", 100),
                          ("/connected_organizations", 100), ("/invoices", 10)):
        limit = next(p for p in paths["/api/v2" + path]["get"]["parameters"] if p["name"] == "limit")
        assert limit["schema"]["maximum"] == maximum, path
    reviews = {p["name"]: p for p in paths["/api/v2/fraud_reviews"]["get"]["parameters"]}
    assert reviews["status"]["schema"]["enum"] == ["flagged", "blocked", "released"]
    report = paths["/api/v2/reports"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert report["properties"]["report_type"]["enum"] == ["digital_rewards"]


def test_an_enum_of_the_document_does_not_change_what_the_wire_answers(http):
    """The enums are in the document only: the validation messages are the models' as before."""
    response = http.post("/fields", json={"display_name": "Team", "data_type": "Colour"})
    assert response.status_code == 422
    assert response.json()["errors"]["message"].startswith("data_type must be one of Checkbox")
