"""`largesse forex show|import`: the operator's exchange rates. Registered by largesse.cli."""

from __future__ import annotations

from typing import Annotated

import typer

from largesse import db
from largesse.cli_common import JsonFlag, emit, fail, open_engine

forex_app = typer.Typer(help="Exchange rates (units per 1 USD) used to convert orders.", no_args_is_help=True)


@forex_app.command("show")
def forex_show(as_json: JsonFlag = False):
    """The rates in force (the imported set, or the shipped default set)."""
    from largesse.forex import service

    with db.read(open_engine()) as conn:
        rates = service.current(conn)
    data = {"rates": [{"currency_code": r.currency_code, "rate": str(r.rate), "date": r.as_of.isoformat()}
                      for r in sorted(rates.values(), key=lambda r: r.currency_code)]}
    emit(data, as_json, "\n".join(f"{d['currency_code']}  {d['rate']:>16}  {d['date']}" for d in data["rates"]))


@forex_app.command("import")
def forex_import(path: Annotated[str, typer.Argument(help="CSV file: currency_code,rate,date (units per 1 USD)")],
                 as_json: JsonFlag = False):
    """Replace every rate with the file's, in one transaction; a file with any problem changes nothing."""
    from largesse.forex import service

    try:
        with open(path, encoding="utf-8-sig") as handle:  # a BOM (Excel's "CSV UTF-8") is no error
            text = handle.read(1_000_000)
        rates = service.parse_csv(text)
    except (OSError, UnicodeDecodeError, service.RatesError) as exc:
        fail(f"{path}: {exc}")
    count = service.replace_all(open_engine(), rates)
    emit({"imported": count}, as_json, f"imported {count} rates from {path}")


def register(app: typer.Typer) -> None:
    app.add_typer(forex_app, name="forex")
