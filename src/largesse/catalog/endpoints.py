"""/products: the catalog as clients see it."""

from __future__ import annotations

from fastapi import APIRouter, Request

from largesse.auth import CallerDep
from largesse.catalog import service
from largesse.errors import NotFound
from largesse.schemas import Out
from largesse.web import EngineDep, SettingsDep, clean_text, json_response, q_str, query_doc, read_db

router = APIRouter(tags=["products"])


class ProductOut(Out):
    id: str
    name: str
    description: str
    category: str
    disclosure: str
    currency_codes: list[str]
    countries: list[dict]
    images: list[dict]
    skus: list[dict]


class ProductList(Out):
    products: list[ProductOut]


class ProductEnvelope(Out):
    product: ProductOut


def _comma_list(request: Request, name: str) -> set[str] | None:
    raw = request.query_params.get(name)
    if raw is None or raw.strip() == "":
        return None
    clean_text(raw, name, max_length=5000)
    return {part.strip().upper() for part in raw.split(",") if part.strip()}


@router.get("/products", response_model=ProductList, openapi_extra=query_doc(
    q_str("id", "comma list of product IDs, or ALL_FEE_FREE"), q_str("country", "comma list of ISO 3166-1 alpha-2"),
    q_str("currency", "comma list of currency codes"), q_str("subcategory", "comma list")))
async def list_products(request: Request, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    """Products, filtered by `id` (comma list, or ALL_FEE_FREE), `country`, `currency` and
    `subcategory` (comma lists; a product matches when it has any of the listed values)."""
    ids = _comma_list(request, "id")
    countries = _comma_list(request, "country")
    currencies = _comma_list(request, "currency")
    subcategories = {s.lower() for s in (_comma_list(request, "subcategory") or [])} or None
    rows = await read_db(engine, service.list_active)
    selected = []
    for row in rows:
        if ids is not None:
            fee_free_match = "ALL_FEE_FREE" in ids and row.fee_free
            if row.id not in ids and not fee_free_match:
                continue
        if countries is not None and not countries.intersection(row.countries):
            continue
        if currencies is not None and not currencies.intersection(row.currency_codes):
            continue
        if subcategories is not None and (row.subcategory or "") not in subcategories:
            continue
        selected.append(service.to_wire_product(row, settings.public_url))
    return json_response({"products": selected})


@router.get("/products/{product_id}", response_model=ProductEnvelope)
async def get_product(product_id: str, caller: CallerDep, engine: EngineDep, settings: SettingsDep):
    clean_text(product_id, "id", max_length=200)
    row = await read_db(engine, service.get, product_id)
    if row is None:
        raise NotFound(f"Product {product_id} not found", {"id": ["not found"]})
    return json_response({"product": service.to_wire_product(row, settings.public_url)})
