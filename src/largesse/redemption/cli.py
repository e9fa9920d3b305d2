"""`largesse inventory ...`: load gift-card codes and watch stock levels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

inventory_app = typer.Typer(help="Codes for products fulfilled from inventory.", no_args_is_help=True)


@inventory_app.command("import")
def inventory_import(
    product_id: Annotated[str, typer.Argument(help="Product ID the codes belong to")],
    path: Annotated[Path, typer.Argument(help="CSV file: code[,pin] per line, optional header")],
):
    """Load codes; codes already loaded for the product (or repeated) are skipped and counted."""
    from largesse import db
    from largesse.cli_common import fail, open_engine
    from largesse.redemption import inventory

    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{path}: {exc}")
    try:
        with db.write(open_engine()) as conn:
            imported, skipped, fulfillment = inventory.import_codes(conn, product_id, text)
    except inventory.InventoryError as exc:
        fail(f"{path}: {exc}")
    typer.echo(f"imported {imported} codes for {product_id}, skipped {skipped} duplicates")
    if fulfillment != "inventory":
        typer.echo(f"note: {product_id} is fulfilled by {fulfillment or 'nothing'}, not inventory; set "
                   '"fulfillment": "inventory" in the catalog (largesse products import) to issue these codes',
                   err=True)


@inventory_app.command("status")
def inventory_status(as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False):
    """Codes loaded, issued and available per product."""
    from largesse import db
    from largesse.cli_common import open_engine
    from largesse.redemption import inventory

    with db.read(open_engine()) as conn:
        rows = inventory.stock(conn)
    if as_json:
        typer.echo(json.dumps({"products": rows}, indent=2))
        return
    if not rows:
        typer.echo("no inventory codes loaded")
        return
    typer.echo(f"{'product':<16} {'provider':<10} {'total':>7} {'issued':>7} {'available':>9}  name")
    for r in rows:
        typer.echo(f"{r['product_id']:<16} {r['fulfillment'] or '-':<10} {r['total']:>7} {r['issued']:>7} "
                   f"{r['available']:>9}  {r['name']}")


def register(app: typer.Typer) -> None:
    app.add_typer(inventory_app, name="inventory")
