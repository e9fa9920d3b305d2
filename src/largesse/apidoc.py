"""What /openapi.json says beyond what FastAPI derives from the routes: the error statuses each
operation can really answer, and the constraints of API.md that the models do not enforce as
such (enums, formats, maxima), each from one table.

The error table replaced one list of nine statuses attached to every operation (GET /products
documented 402 "Insufficient funds"); the constraints are added to the document only, so that
validation on the wire, and its error messages, stay those of the models.
"""

from __future__ import annotations

from largesse.schemas import Out


class ErrorBody(Out):
    errors: dict


_WRITES = frozenset({"post", "put", "patch", "delete"})
_BODIES = frozenset({"post", "put", "patch"})  # RequestGuard's 413 reads a body on these


def _ops(*pairs: str) -> frozenset[tuple[str, str]]:
    """("POST /orders", ...) as (method, path under /api/v2) pairs."""
    return frozenset((method.lower(), path) for method, path in (pair.split(" ", 1) for pair in pairs))


def _takes_input(method: str, path: str, operation: dict) -> bool:
    return bool(operation.get("parameters")) or "requestBody" in operation


def _every(method: str, path: str, operation: dict) -> bool:
    return True


_WEBHOOK_KEY = "the webhook's signing key cannot be decrypted with the configured secret or key file"
_CONFLICTS = {  # a 409 says something different on each operation that answers it
    ("post", "/orders"): "external_id reused with other parameters",
    ("post", "/topups"): "idempotency_key reused with other values",
    ("delete", "/invoices/{id}"): "a paid invoice cannot be deleted",
    ("post", "/webhooks"): _WEBHOOK_KEY, ("get", "/webhooks"): _WEBHOOK_KEY,
    ("get", "/webhooks/{webhook_id}"): _WEBHOOK_KEY, ("post", "/webhooks/{webhook_id}/simulate"): _WEBHOOK_KEY,
    ("post", "/webhooks/{webhook_id}/deliveries/{delivery_id}/resend"):
        "the event is still (or already) queued for another attempt, or its body is no longer stored",
}
_UNPROCESSABLE = _ops(
    "POST /campaigns", "PUT /campaigns/{campaign_id}", "POST /fields", "POST /rewards/{reward_id}/resend",
    "POST /rewards/{reward_id}/cancel", "POST /rewards/{reward_id}/generate_link",
    "POST /webhooks/{webhook_id}/simulate", "POST /webhooks/{webhook_id}/deliveries/{delivery_id}/resend",
    "POST /order_approvals/{order_id}/approve", "POST /order_approvals/{order_id}/reject",
    "PATCH /members/{member_id}", "DELETE /members/{member_id}", "GET /balance_transactions",
    "PUT /fraud_reviews/{reward_id}/release", "PUT /fraud_reviews/{reward_id}/block")
# status -> (description, which operations answer it: a predicate of (method, path, operation),
# a set of (method, path) pairs, or a dict of them to the rest of the description). Every /api/v2
# operation also documents `default`: 500, or 503 with Retry-After while the database is
# unavailable (errors.ServiceUnavailable).
ERRORS = (
    (400, "Invalid request: {errors: {message, payload}}, payload mirrors the offending keys", _takes_input),
    (401, "Missing, invalid or revoked API key", _every),
    (402, "Insufficient funds: the balance cannot pay the order's total", _ops("POST /orders")),
    (403, "Not allowed: a read-only API key's write, or an action this resource does not take "
          "(e.g. generate_link of an EMAIL reward)", lambda method, path, operation: method in _WRITES),
    (404, "Not found (including other organizations' resources)", lambda method, path, operation: "{" in path),
    (405, "Method not allowed: the Allow header names the methods of the path", _every),
    (409, "Conflict: ", _CONFLICTS),
    (413, "Request body larger than 1,000,000 bytes", lambda method, path, operation: method in _BODIES),
    (422, "Unprocessable request (see docs/api.md: these operations' validation failures and "
          "business-rule refusals)", _UNPROCESSABLE),
    (429, "Rate limit exceeded (per API key or organization): see Retry-After and RateLimit-* headers",
     _every),
)
DEFAULT_ERROR = "Internal error (500), or 503 with Retry-After while the database is unavailable"


def _answers(rule, method: str, path: str, operation: dict) -> str | bool:
    """Whether the operation answers the status; a dict rule gives the operation's own words."""
    if isinstance(rule, dict):
        return rule.get((method, path), False)
    return (method, path) in rule if isinstance(rule, frozenset) else rule(method, path, operation)


def document_errors(schema: dict, prefix: str) -> None:
    """Give each operation under prefix the error statuses of ERRORS that apply to it, all with
    the JSON error body (whatever the success's media type: simulate's 200 is text/plain),
    and drop FastAPI's own 422 (its validation errors answer 400 with that body here)."""
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorBody"] = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for full_path, operations in schema.get("paths", {}).items():
        if not full_path.startswith(prefix + "/"):
            continue
        path = full_path.removeprefix(prefix)
        for method, operation in operations.items():
            responses = {code: answer for code, answer in operation.get("responses", {}).items()
                         if code.startswith("2")}
            for status, description, rule in ERRORS:
                answers = _answers(rule, method, path, operation)
                if answers:
                    words = description + answers if isinstance(answers, str) else description
                    responses[str(status)] = {"description": words, "content": content}
            if "405" in responses:
                responses["405"]["headers"] = {"Allow": {"schema": {"type": "string"},
                                                         "description": "the methods the path takes"}}
            responses["default"] = {"description": DEFAULT_ERROR, "content": content}
            operation["responses"] = responses
    if "/HTTPValidationError'" not in repr(schema["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _constraints() -> dict[str, dict[str, dict]]:
    """Component -> property -> what API.md (§3, §5) says of it beyond its type, from the
    constants the code checks with where there is one. Response timestamps are ISO 8601
    date-times except a reward's created_at, which some clients get in the specification's form
    (docs/api.md, LARGESSE_REWARD_LIST_TIMESTAMPS). Emails are idn-email, a superset of email."""
    from largesse import auth
    from largesse.campaigns.service import FEE_CHARGED_TO
    from largesse.fields.service import DATA_TYPES
    from largesse.invoices import service as invoices
    from largesse.orders.browse import DELIVERY_STATUSES
    from largesse.orders.schemas import DELIVERY_METHODS
    from largesse.orgs.roles import ROLES
    from largesse.orgs.service import INVITED, REGISTERED
    from largesse.reports import service as reports
    from largesse.webhooks.service import SIMULATED_EVENTS

    # API.md §5's whole enums, of which the code writes a subset (no constant holds them all).
    order_statuses = ["CANCELED", "OPEN", "EXECUTED", "FAILED", "PENDING APPROVAL",
                      "PENDING INTERNAL PAYMENT APPROVAL", "PENDING SETTLEMENT"]
    channels = ["UI", "API", "EMBED", "DECIPHER", "QUALTRICS", "TYPEFORM", "SURVEY MONKEY", "YOTPO"]
    when = {"format": "date-time"}
    email = {"format": "idn-email"}  # email_address.valid takes non-ASCII addresses (SMTPUTF8)
    role = {"enum": list(ROLES)}
    return {
        "OrderOut": {"status": {"enum": order_statuses}, "channel": {"enum": channels}, "created_at": when},
        "RewardOut": {
            "expires_at": when, "deliver_at": {"format": "date"},
            "value": {"type": "object", "required": ["denomination"], "properties": {
                "denomination": {"type": "number"}, "currency_code": {"type": "string"}}},
            "recipient": {"type": "object", "properties": {
                "name": _nullable({"type": "string"}), "email": {"type": "string", **email},
                "phone": {"type": "string"}}},
            "delivery": {"type": "object", "required": ["method", "status"], "properties": {
                "method": {"type": "string", "enum": list(DELIVERY_METHODS)},
                "status": {"type": "string", "enum": list(DELIVERY_STATUSES)},
                "link": {"type": "string", "description": "a LINK reward's link (create_order's answer)"}}}},
        "DeliveryIn": {"method": {"enum": list(DELIVERY_METHODS)}},
        "RecipientIn": {"email": email},
        "ResendIn": {"updated_email": email},
        "CreateFieldIn": {"data_type": {"enum": list(DATA_TYPES)}},
        "FieldOut": {"data_type": {"enum": list(DATA_TYPES)}},
        "CreateMemberIn": {"role": role, "email": email},
        "UpdateMemberIn": {"role": role},
        "MemberOut": {"status": {"enum": [REGISTERED, INVITED]}, "email": email},
        "CreateCampaignIn": {"fee_charged_to": {"enum": list(FEE_CHARGED_TO)}},
        "UpdateCampaignIn": {"fee_charged_to": {"enum": list(FEE_CHARGED_TO)}},
        "CreateApiKeyIn": {"permission": {"enum": list(auth.PERMISSIONS)}},
        "SimulateIn": {"event": {"enum": list(SIMULATED_EVENTS)}},
        "InvoiceOut": {"status": {"enum": [invoices.DELETED, invoices.PAID, invoices.OPEN]}, "created_at": when,
                       "paid_at": when},
        "OrganizationOut": {"status": {"enum": ["PENDING", "APPROVED", "REJECTED"]},
                            "created_at": {"format": "date"}},  # a date (API.md §3 Organization)
        "ReportOut": {"status": {"enum": [reports.CREATED, reports.PROCESSING, reports.READY, reports.FAILED]},
                      "created_at": when, "expected_completion_at": when},
        "TopupOut": {"status": {"enum": ["created", "partially_credited", "fully_credited", "reversed",
                                         "rejected"]}},
    }


def document_constraints(schema: dict) -> None:
    """Add _constraints() to the components: a property given a whole object schema (a bare
    `object` of the model, e.g. RewardOut.value) takes it in place; otherwise the keywords go
    on its non-null branch (a `str | None` is an anyOf with null)."""
    schemas = schema.get("components", {}).get("schemas", {})
    for component, properties in _constraints().items():
        for name, extra in properties.items():
            prop = schemas[component]["properties"][name]
            if "type" in extra:
                title = prop.get("title")
                prop.clear()
                prop.update(extra, **({"title": title} if title else {}))
                continue
            branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
            for branch in branches:
                branch.update(extra)
