"""`largesse webhooks ...`: re-encrypt signing keys after a secret rotation; read the delivery log.
Registered by largesse.cli (register(app))."""

from __future__ import annotations

from typing import Annotated

import typer

from largesse import db
from largesse.cli_common import JsonFlag, OrgOption, emit, fail, load_settings, open_engine, require_org

webhooks_app = typer.Typer(help="Webhooks: signing keys and the delivery log.", no_args_is_help=True)


@webhooks_app.command("rotate-keys")
def rotate_keys(as_json: JsonFlag = False):
    """Re-encrypt every webhook signing key under the first LARGESSE_SECRET_KEY secret. `largesse
    secrets rotate` does this and re-encrypts the other secrets at rest (held bank details) too:
    run that one before dropping an old secret. Exits non-zero when some key cannot be decrypted
    with any configured secret."""
    from largesse.webhooks import service

    settings = load_settings()
    rotated, current, failed = service.reencrypt_all(open_engine(settings), settings)
    emit({"rotated": rotated, "already_current": current, "undecryptable": failed}, as_json,
         f"{rotated} keys re-encrypted, {current} already current, {len(failed)} undecryptable"
         + (f": {', '.join(failed)}" if failed else ""))
    if failed:
        raise typer.Exit(1)


@webhooks_app.command("deliveries")
def deliveries_list(org: OrgOption,
                    limit: Annotated[int, typer.Option(help="Attempts to show", min=1, max=500)] = 20,
                    failed_only: Annotated[bool, typer.Option("--failed", help="Failed attempts only")] = False,
                    as_json: JsonFlag = False):
    """The latest delivery attempts of the organization's webhook (newest first)."""
    from largesse.paging import COUNT_HORIZON
    from largesse.webhooks import deliveries, service

    with db.read(open_engine()) as conn:
        require_org(conn, org)
        hook = service.for_org(conn, org)
        if hook is None:
            fail(f"organization {org} has no webhook")
        rows, total = deliveries.page(conn, hook.id, limit=limit, offset=0,
                                      status=deliveries.FAILED if failed_only else None)
    wire = [deliveries.to_wire(r) for r in rows]
    lines = [f"{d['started_at']}  {d['status']:<9} {d['event']:<28} attempt {d['attempt']:<2} "
             f"{d['response_status'] or '-':>3} {d['duration_ms']:>6} ms  {d['id']}  {d['error'] or ''}" for d in wire]
    # total is exact up to paging.COUNT_HORIZON past the page, a lower bound beyond (as the API's).
    counted = f"more than {total - 1:,}" if total > COUNT_HORIZON else f"{total}"
    emit({"webhook_id": hook.id, "total_count": total, "deliveries": wire}, as_json,
         "\n".join([f"webhook {hook.id} {hook.url}: {counted} attempts", *lines]))


def register(app: typer.Typer) -> None:
    app.add_typer(webhooks_app, name="webhooks")
