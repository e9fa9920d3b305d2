"""The operator's command line: `largesse --help`.

Every command works on the database named by LARGESSE_DATABASE_URL (default: SQLite at
./var/largesse.sqlite3), migrating it first. Only `serve`, `worker`, `db upgrade` and `org create`
may create a new SQLite database; the others refuse a file that does not exist
(cli_common.open_engine's `create`, docs/operations.md).
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from largesse import db
from largesse.cli_common import (
    JsonFlag,
    LargesseGroup,
    OrgOption,
    bounded,
    check_mail_transport,
    database_url,
    emit,
    fail,
    load_settings,
    money_text,
    open_engine,
    require_org,
    shown,
    shown_url,
    warn_of_a_missing_key_file,
    warn_without_public_url,
)
from largesse.money import amount_in, format_amount

app = typer.Typer(help="Largesse: a self-hostable reward ordering service.", no_args_is_help=True,
                  add_completion=False, cls=LargesseGroup)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
org_app = typer.Typer(help="Organizations.", no_args_is_help=True)
members_app = typer.Typer(help="Members of an organization.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
balance_app = typer.Typer(help="Balances and funding.", no_args_is_help=True)
products_app = typer.Typer(help="The product catalog.", no_args_is_help=True)
ledger_app = typer.Typer(help="The ledger.", no_args_is_help=True)
secrets_app = typer.Typer(help="Secrets at rest (LARGESSE_SECRET_KEY).", no_args_is_help=True)
for sub, name in ((db_app, "db"), (org_app, "org"), (members_app, "members"), (keys_app, "keys"),
                  (balance_app, "balance"), (products_app, "products"), (ledger_app, "ledger"),
                  (secrets_app, "secrets")):
    app.add_typer(sub, name=name)

# --- serve / db -----------------------------------------------------------------------------

@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port", min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(help="API processes sharing one database", min=1, max=256)] = 1,
):
    """Migrate the database, then serve the API, the dashboard, the redemption pages and the docs.

    Unless LARGESSE_RUN_WORKER=0, it also delivers, in supervised child processes."""
    import os
    import signal
    import tempfile

    import uvicorn

    # Each API process takes its share of LARGESSE_DB_CONCURRENCY (Settings.db_slots).
    os.environ["LARGESSE_API_PROCESSES"] = str(workers)
    public_url_set = bool(os.environ.get("LARGESSE_PUBLIC_URL"))
    if not public_url_set:
        # Links in emails and responses point at this server (the API processes and the
        # delivery children inherit it); behind a proxy or on another name, set it.
        os.environ["LARGESSE_PUBLIC_URL"] = default_public_url(host, port)
    settings = load_settings()
    _refuse_a_busy_address(host, port)
    if settings.run_worker:
        check_mail_transport(settings)
    engine = open_engine(settings, create=True)
    # Several processes (API workers, delivery children): metrics go through files in
    # PROMETHEUS_MULTIPROC_DIR (docs/operations.md), set before prometheus_client is imported.
    multiprocess = workers > 1 or settings.run_worker
    own_metrics_dir = multiprocess and not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if own_metrics_dir:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="largesse-metrics-")
    from largesse.ops import logs, metrics

    metrics_dir = metrics.prepare_multiprocess_dir() if multiprocess else None
    typer.echo(f"Largesse ({settings.environment}) on http://{host}:{port}  "
               f"database: {shown_url(settings.database_url)}")
    logs.configure(settings.log_format, settings.log_level)  # uvicorn.run installs the same again
    if not settings.sandbox and not settings.secret_keys:
        from largesse.crypto import key_file_path

        logging.getLogger("largesse.serve").warning(
            "LARGESSE_SECRET_KEY is unset: webhook signing keys and held bank details are encrypted with a "
            "secret generated into %s and the redemption pages' CSRF key is kept in the database. Production must set "
            "LARGESSE_SECRET_KEY (the same value in every process).", key_file_path(settings.database_url))
    warn_without_public_url(settings, public_url_set, "serve")
    warn_of_a_missing_key_file(engine, settings, "serve")
    engine.dispose()
    supervisor = None
    if workers > 1:
        # The API processes die with this one, even when it is killed (SIGKILL): uvicorn's
        # own shutdown needs it alive, and orphans kept the port, refusing the next start.
        from largesse.delivery.supervisor import API_PARENT_ENV

        os.environ[API_PARENT_ENV] = str(os.getpid())
    if settings.run_worker and workers > 1:
        # One delivery supervisor for the server, in this (uvicorn's supervising) process; the
        # API processes must not start their own.
        from largesse.delivery.supervisor import DeliverySupervisor

        os.environ["LARGESSE_RUN_WORKER"] = "0"
        supervisor = DeliverySupervisor(settings).start()
    elif workers == 1:
        # uvicorn ends a lone process's SIGTERM by raising it again with the handler it found:
        # the default one killed the process there, and the `finally` below (the metrics
        # folder) never ran. This one exits through it, with 0 as the multi-process server does.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        uvicorn.run("largesse.app:create_served_app", factory=True, host=host, port=port, workers=workers,
                    log_config=logs.log_config(settings.log_format, settings.log_level),
                    log_level=settings.log_level.lower(), access_log=False, proxy_headers=True,
                    # uvloop, accepting every pending connection at each turn when the socket
                    # is this process's alone (ops/serving.py).
                    loop="largesse.ops.serving:new_event_loop",
                    # SIGTERM: stop accepting, give requests in flight up to 30 s, then the lifespan
                    # (or, with several workers, this process) stops delivery: jobs in hand finish,
                    # the rest go back to the queue.
                    timeout_graceful_shutdown=30,
                    # uvicorn kills an API process that does not answer its health ping in time
                    # and starts another; a new process answers only once it has imported the
                    # app, which on a loaded machine took over the default 5 s, and every
                    # replacement was killed in turn. 30 s still replaces a hung process.
                    timeout_worker_healthcheck=30)
    finally:
        if supervisor is not None:
            supervisor.stop()
        if own_metrics_dir and metrics_dir:
            metrics.cleanup(metrics_dir)


def _refuse_a_busy_address(host: str, port: int) -> None:
    """One line and exit 1 when the address cannot be bound (in use, not this machine's), before
    anything starts: uvicorn would start delivery and the app first, then log the bind error."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
    except socket.gaierror as exc:
        fail(f"cannot serve on {host}: {exc.strerror}")
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            fail(f"port {port} on {host} is already in use (another server?); choose another with --port")
        fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}")


def default_public_url(host: str, port: int) -> str:
    """http://HOST:PORT of `serve`; a wildcard address (0.0.0.0, ::) is not one a browser can
    open, so links name 127.0.0.1 then."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    elif ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{port}"


@db_app.command("upgrade")
def db_upgrade():
    """Apply every pending migration; a new database (SQLite: a new file) gets the whole schema
    and the default catalog. Prints the revision before and after."""
    from largesse import migrate

    settings = load_settings()
    engine = open_engine(settings, create=True)
    with engine.connect() as conn:
        after = migrate.current_revision(conn)
    engine.dispose()
    where = shown_url(settings.database_url)
    # What this process did, read under the migration lock: of two run at once, the second
    # found the work done (it said "migrated" too, from what it had read before waiting).
    done = migrate.last_upgrade
    if done is None:
        typer.echo(f"database is up to date (revision {after}): {where}")
    elif done[0] is None:
        typer.echo(f"created the database schema at revision {after}: {where}")
    else:
        typer.echo(f"migrated the database from revision {done[0]} to {after}: {where}")


@secrets_app.command("rotate")
def secrets_rotate(as_json: JsonFlag = False):
    """Re-encrypt every secret kept at rest under the first LARGESSE_SECRET_KEY secret: webhook
    signing keys and the bank details of redemptions held for review. Run it after putting a new
    secret first (LARGESSE_SECRET_KEY=new,old); once nothing is left undecryptable, the old one can
    be dropped. Exits non-zero when something cannot be decrypted with any configured secret."""
    from largesse.fraud import service as fraud
    from largesse.webhooks import service as webhooks

    settings = load_settings()
    engine = open_engine(settings)
    counts = {"webhook signing keys": webhooks.reencrypt_all(engine, settings),
              "held bank details": fraud.reencrypt_details(engine, settings)}
    emit({what.replace(" ", "_"): {"rotated": r, "already_current": c, "undecryptable": f}
          for what, (r, c, f) in counts.items()}, as_json,
         "\n".join(f"{what}: {r} re-encrypted, {c} already current, {len(f)} undecryptable"
                   + (f": {', '.join(f)}" if f else "") for what, (r, c, f) in counts.items()))
    if any(f for _, _, f in counts.values()):
        raise typer.Exit(1)


@db_app.command("backup")
def db_backup(path: Annotated[str, typer.Argument(help="File to write (must not exist yet)")]):
    """Copy a live SQLite database to PATH with SQLite's online backup API (a consistent
    snapshot; the server keeps serving). On PostgreSQL, use pg_dump (see README)."""
    import os
    import sqlite3
    from pathlib import Path

    settings = load_settings()
    url = database_url(settings)
    if url.get_backend_name() != "sqlite":
        fail("this database is PostgreSQL: back it up with pg_dump, e.g.\n"
             "  pg_dump --format=custom --file=largesse.dump \"$LARGESSE_DATABASE_URL\"\n"
             "and restore with pg_restore --clean --if-exists --no-owner --dbname=URL largesse.dump "
             "(README, Backup and restore)")
    source_path = Path(url.database or "")
    if not url.database or url.database == ":memory:" or not source_path.is_file():
        fail(f"no SQLite database file at {url.database!r}")
    target = Path(path)
    if target.exists():
        fail(f"{target} already exists: choose a new file")
    if target.resolve() == source_path.resolve():
        fail("the backup must go to another file than the database itself")
    # No migration first: a backup taken before an upgrade must hold the old schema.
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        source = sqlite3.connect(source_path, timeout=30)
        copy = sqlite3.connect(partial)
        try:
            # One step (pages=-1): a WAL reader's snapshot, so writers go on meanwhile and the copy
            # is one consistent state of the database.
            source.backup(copy, pages=-1)
            check = copy.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            copy.close()
            source.close()
        if check != "ok":
            fail(f"the copy failed its integrity check: {check}")
        os.replace(partial, target)  # PATH appears only once it holds a complete copy
    except (sqlite3.Error, OSError) as exc:
        fail(f"backup failed: {exc}")
    finally:
        partial.unlink(missing_ok=True)
    typer.echo(f"backed up {source_path} to {target} ({target.stat().st_size} bytes)")
    if not settings.secret_keys:
        _keep_key_file_with(settings.database_url, target)


def _keep_key_file_with(database_url: str, target) -> None:
    """Without LARGESSE_SECRET_KEY, the secrets at rest (webhook signing keys, held bank details)
    are encrypted with a generated key file beside the database: a copy without it restores
    webhooks that cannot sign (409) and held bank deposits that cannot be paid. It goes
    beside the copy too, where a server pointed at the copy looks for it."""
    import os

    from largesse.crypto import KEY_FILE_NAME, key_file_path

    key = key_file_path(database_url)
    if not key.is_file():
        return
    beside = target.parent / KEY_FILE_NAME
    if beside.resolve() == key.resolve():
        typer.echo(f"the key file {key} is in the same folder: keep it with the copy")
    elif not beside.exists():
        # Created owner-only (O_EXCL, 0600) before a byte of the secret is written, as the key file itself is.
        try:
            with os.fdopen(os.open(beside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as copy:
                copy.write(key.read_bytes())
        except OSError as exc:  # e.g. a dangling link of that name, or another backup writing it now
            typer.echo(f"warning: could not copy the key file {key} beside the backup ({exc}); "
                       "keep a copy of it with the backup", err=True)
            return
        typer.echo(f"copied the key file to {beside} (LARGESSE_SECRET_KEY is unset: webhook signing keys and "
                   "held bank details are encrypted with it); restore it together with the database")
    elif beside.read_bytes() != key.read_bytes():
        typer.echo(f"warning: {beside} is another key file than {key}, which this database's secrets at rest "
                   "are encrypted with; keep a copy of that one with the backup", err=True)


# --- organizations, members, keys -------------------------------------------------------------

@org_app.command("create")
def org_create(
    name: Annotated[str, typer.Option("--name", help="Organization name (1-200 characters)")],
    member_email: Annotated[str, typer.Option("--member-email", help="Email of the first member")],
    member_name: Annotated[str | None, typer.Option("--member-name")] = None,
    currency: Annotated[str, typer.Option("--currency", help="Balance currency")] = "USD",
    as_json: JsonFlag = False,
):
    """Create an organization, its first member, its balance and an API key (shown once)."""
    from largesse.orgs import service as orgs

    bounded(member_name, "--member-name")  # the name is checked by orgs.create_org
    settings = load_settings()
    engine = open_engine(settings, create=True)
    try:
        with db.write(engine) as conn:
            created = orgs.create_org(conn, name=name, member_email=member_email, member_name=member_name,
                                      sandbox=settings.sandbox, currency_code=currency.upper())
    except orgs.OrgError as exc:
        fail(str(exc))
    name = created.name
    data = {
        "organization_id": created.organization_id, "name": name, "environment": settings.environment,
        "member_id": created.member_id, "member_email": member_email.strip(),
        "funding_source_id": created.funding_source_id, "available_cents": created.available_cents,
        "api_key_id": created.api_key_id, "api_key": created.api_key,
    }
    emit(data, as_json, "\n".join([
        f"organization   {created.organization_id}  {name} ({settings.environment})",
        f"member         {created.member_id}  {member_email.strip()}",
        f"balance        {created.funding_source_id}  {money_text(created.available_cents, currency.upper())}",
        f"api key        {created.api_key}",
        "               (shown once: it is stored only as a hash)",
    ]))


@org_app.command("list")
def org_list(as_json: JsonFlag = False):
    """List organizations; a sub-organization (created through the API) names its parent."""
    from largesse.orgs import service as orgs

    with db.read(open_engine()) as conn:
        rows = orgs.list_orgs(conn)
    data = {"organizations": [{"id": r.id, "name": r.name, "currency_code": r.currency_code,
                               "environment": r.environment, "parent_organization_id": r.parent_organization_id}
                              for r in rows]}
    emit(data, as_json, "\n".join(f"{r.id}  {r.environment:<10}  {r.currency_code}  {shown(r.name)}"
                                  + (f"  (sub-organization of {r.parent_organization_id})"
                                     if r.parent_organization_id else "")
                                  for r in rows) or "no organizations")


@org_app.command("fees")
def org_fees(org: OrgOption,
             percent_bp: Annotated[int | None, typer.Option(
                 "--basis-points", help="Fee in 1/100 % of each reward: 0-10000 (250 = 2.50 %)")] = None,
             flat: Annotated[str | None, typer.Option(
                 "--flat", help="Flat fee per reward in the organization's currency, e.g. 0.50 (0: none; at most "
                              "100000.00); a reward in another currency pays it converted")] = None,
             as_json: JsonFlag = False):
    """Show an organization's fees, or set them: each option given changes that fee, the other
    is kept (default: no fees)."""
    from largesse.money import MoneyError, decimals_for, parse_amount_text
    from largesse.orgs import service as orgs

    engine = open_engine()
    with db.write(engine) as conn:
        currency = require_org(conn, org).currency_code
        flat_cents = None
        if flat is not None:
            try:  # the same plain-text rule as --amount; 0 means no flat fee
                flat_cents = parse_amount_text(flat, decimals=decimals_for(currency),
                                               max_cents=orgs.MAX_FEE_FLAT_CENTS, zero=True)
            except MoneyError as exc:
                fail(f"--flat {exc}")
        try:
            fees = orgs.set_fees(conn, org, basis_points=percent_bp, flat_cents=flat_cents)
        except orgs.OrgError as exc:
            fail(str(exc))
    emit({"organization_id": org, "basis_points": fees.basis_points, "flat": amount_in(fees.flat_cents, currency),
          "flat_cents": fees.flat_cents, "currency_code": currency}, as_json,
         f"fees of {org}: {format_amount(fees.basis_points)}% + {money_text(fees.flat_cents, currency)} per reward")


@members_app.command("add")
def members_add(org: OrgOption, email: Annotated[str, typer.Option("--email")],
                name: Annotated[str | None, typer.Option("--name")] = None,
                role: Annotated[str, typer.Option("--role", help="ADMIN, MEMBER or VIEWER (GET /roles); a "
                                                  "sandbox test recipient needs no more than VIEWER")] = "ADMIN",
                as_json: JsonFlag = False):
    """Add a member (in the sandbox, members are the only allowed recipients)."""
    from largesse.errors import ApiError
    from largesse.orgs import service as orgs

    bounded(name, "--name")
    try:  # the rules of POST /members: a known role, a valid new address, MEMBERS.CREATED
        with db.write(open_engine()) as conn:
            require_org(conn, org)
            member_id = orgs.add_member_checked(conn, organization_id=org, email=email, name=name, role=role)
            role = orgs.get_member_or_404(conn, org, member_id).role
    except ApiError as exc:
        fail(exc.message)
    emit({"member_id": member_id, "email": email, "role": role}, as_json, f"member {member_id}  {email}  {role}")


@members_app.command("list")
def members_list(org: OrgOption, as_json: JsonFlag = False):
    """List an organization's members (ID, role, status, email, name)."""
    from largesse.orgs import service as orgs

    with db.read(open_engine()) as conn:
        require_org(conn, org)
        rows = orgs.list_members(conn, org)
    data = {"members": [{"id": r.id, "email": r.email, "name": r.name, "role": r.role, "status": r.status}
                        for r in rows]}
    emit(data, as_json, "\n".join(f"{r.id}  {r.role:<6}  {r.status:<10}  {r.email}  {shown(r.name)}" for r in rows))


@keys_app.command("create")
def keys_create(org: OrgOption,
                permission: Annotated[str, typer.Option(help="read_write or read_only")] = "read_write",
                label: Annotated[str | None, typer.Option(help="A note to recognise the key")] = None,
                as_json: JsonFlag = False):
    """Issue an API key; it is printed once and stored only as a hash."""
    from largesse import auth

    if permission not in auth.PERMISSIONS:
        fail(f"--permission must be one of {', '.join(auth.PERMISSIONS)}")
    bounded(label, "--label")
    settings = load_settings()
    with db.write(open_engine(settings)) as conn:
        require_org(conn, org)
        key_id, key = auth.issue_key(conn, organization_id=org, permission=permission,
                                     label=label)
    emit({"api_key_id": key_id, "api_key": key, "permission": permission}, as_json,
           f"api key {key_id} ({permission})\n{key}\n(shown once: it is stored only as a hash)")


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's ID (from `keys list`)")]):
    """Revoke a key at once."""
    from largesse.orgs import service as orgs

    with db.write(open_engine()) as conn:
        if not orgs.revoke_key(conn, key_id):
            fail(f"no active key {key_id}")
    typer.echo(f"revoked {key_id}")


@keys_app.command("list")
def keys_list(org: OrgOption, as_json: JsonFlag = False):
    """List an organization's keys (prefix only: keys themselves are not stored)."""
    from largesse.orgs import service as orgs

    with db.read(open_engine()) as conn:
        require_org(conn, org)
        rows = orgs.list_keys(conn, org)
    data = {"api_keys": [{"id": r.id, "prefix": r.prefix, "permission": r.permission, "label": r.label,
                          "created_at": str(r.created_at), "revoked": r.revoked_at is not None} for r in rows]}
    emit(data, as_json, "\n".join(
        f"{r.id}  {r.prefix}…  {r.permission:<10}  {'revoked' if r.revoked_at else 'active '}  {r.label or ''}"
        for r in rows))


# --- balance, ledger --------------------------------------------------------------------------

@balance_app.command("fund")
def balance_fund(org: OrgOption,
                 amount: Annotated[str, typer.Option(help="Amount in currency units: plain digits, e.g. 250.00")],
                 memo: Annotated[str, typer.Option(help="Why (wire reference, invoice...)")],
                 reference: Annotated[str | None, typer.Option(
                     help="Unique reference of this funding (e.g. the wire ID): the same reference credits "
                          "the organization once, however often the command runs")] = None,
                 currency: Annotated[str | None, typer.Option(
                     help="Credit the balance in this currency (USD, EUR, GBP), created if the organization "
                          "has none yet; default: the organization's own balance")] = None,
                 as_json: JsonFlag = False):
    """Credit an organization's balance through the ledger."""
    from largesse.errors import ApiError
    from largesse.funding import service as funding
    from largesse.money import MoneyError, decimals_for, parse_amount_text

    if reference is not None and not 1 <= len(reference.strip()) <= 200:
        fail("--reference must be 1-200 characters")
    memo = memo.strip()  # a funding says why: a memo of spaces says nothing
    if not 1 <= len(memo) <= 500:
        fail("--memo must be 1-500 characters (why this funding: a wire reference, an invoice...)")
    engine = open_engine()
    with db.read(engine) as conn:
        require_org(conn, org)
        own = funding.resolve(conn, org, "BALANCE").currency_code
    if currency is not None:
        currency = currency.strip().upper()
        if currency != own and currency not in funding.BALANCE_CURRENCIES:
            fail(f"--currency must be one of {', '.join(sorted({own, *funding.BALANCE_CURRENCIES}))}")
    currency = currency or own
    try:
        cents = parse_amount_text(amount, decimals=decimals_for(currency))
    except MoneyError as exc:
        fail(f"--amount {exc}")
    try:
        done = funding.fund(engine, organization_id=org, amount_cents=cents, memo=memo,
                            reference=reference.strip() if reference is not None else None,
                            currency_code=None if currency == own else currency)
    except ApiError as exc:
        fail(f"--reference {exc.message}")
    data = {"funding_source_id": done.funding_source_id, "credited": done.credited,
            "credited_cents": cents if done.credited else 0, "available_cents": done.available_cents,
            "ledger_entry_id": done.entry_id, "reference": reference}
    balance = f"balance {money_text(done.available_cents, done.currency_code)}"
    if done.credited:
        emit(data, as_json, f"credited {money_text(cents, currency)}; {balance}")
        return
    if done.amount_cents != cents or done.currency_code != currency:
        fail(f"reference {reference!r} was already credited with {money_text(done.amount_cents, done.currency_code)} "
             f"(ledger entry {done.entry_id}), not {money_text(cents, currency)}: nothing credited")
    emit(data, as_json, f"reference {reference!r} was already credited (ledger entry {done.entry_id}): "
                        f"nothing credited; {balance}")


@balance_app.command("show")
def balance_show(org: OrgOption,
                 entries: Annotated[int, typer.Option(help="Ledger entries to show", min=0, max=1000)] = 10,
                 as_json: JsonFlag = False):
    """Show the balance and its latest ledger entries."""
    from sqlalchemy import select

    from largesse.funding import service as funding
    from largesse.funding.models import ledger_entries

    def entries_of(conn, source):
        return conn.execute(
            select(ledger_entries).where(ledger_entries.c.funding_source_id == source.id)
            .order_by(ledger_entries.c.id.desc()).limit(entries)
        ).all()

    def wire(source, rows):
        return {
            "funding_source_id": source.id, "currency_code": source.currency_code,
            "available_cents": source.available_cents, "pending_cents": source.pending_cents,
            "entries": [{"id": r.id, "created_at": str(r.created_at), "kind": r.kind, "amount_cents": r.amount_cents,
                         "balance_after_cents": r.balance_after_cents, "memo": r.memo, "order_id": r.order_id,
                         "reward_id": r.reward_id} for r in rows],
        }

    with db.read(open_engine()) as conn:
        require_org(conn, org)
        primary = funding.resolve(conn, org, "BALANCE")
        # The primary balance first (its keys stay at the top level), then one per other currency.
        balances = [(primary, entries_of(conn, primary))] + [
            (s, entries_of(conn, s)) for s in funding.list_for(conn, org) if s.id != primary.id]
    data = {**wire(*balances[0]), "balances": [wire(s, rows) for s, rows in balances]}
    lines = []
    for source, rows in balances:
        code = source.currency_code
        lines.append(f"{source.id}  available {money_text(source.available_cents, code)}"
                     f"  pending {amount_in(source.pending_cents, code)}")
        lines += [f"  {r.created_at:%Y-%m-%d %H:%M:%S}  {r.kind:<15} {amount_in(r.amount_cents, code):>12}"
                  f"  -> {amount_in(r.balance_after_cents, code)}  {r.memo or r.order_id or ''}" for r in rows]
    emit(data, as_json, "\n".join(lines))


@ledger_app.command("verify")
def ledger_verify(as_json: JsonFlag = False):
    """Check that the money records agree with each other: balances and running balances against
    the ledger, each order's debit, rewards and refunds against its total, one refund per canceled
    or expired reward, one payout per redeemed reward, top-up and invoice credits (the list is in
    funding/verify.py). Exits 1 on any finding. It checks consistency, not history: a change made
    consistently everywhere (an entry and every later running balance and the balance raised
    together; a credit deleted and its balance lowered to match) looks like a valid ledger."""
    from largesse.funding import service as funding

    engine = open_engine()
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":  # one snapshot for all the queries, on a live database too
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            problems = funding.verify(conn)
    data = {"ok": not problems, "problems": [p.__dict__ for p in problems]}
    emit(data, as_json, "ledger OK: balances, running balances, order debits and totals, conversions, refunds, "
                        "payouts, top-ups and invoice payments agree"
         if not problems else "\n".join(
             f"MISMATCH {p.what} {p.id}: expected {p.expected}, found {p.actual}"
             + (f" ({p.detail})" if p.detail else "") + (f" [organization {p.organization_id}]"
                                                         if p.organization_id else "")
             for p in problems) + f"\n{len(problems)} finding(s)")
    if problems:
        raise typer.Exit(1)


# --- products ---------------------------------------------------------------------------------

@products_app.command("list")
def products_list(as_json: JsonFlag = False):
    """List the active catalog."""
    from largesse.catalog import service as catalog

    settings = load_settings()
    with db.read(open_engine(settings)) as conn:
        rows = catalog.list_active(conn)
    data = {"products": [catalog.to_wire_product(r, settings.public_url) | {"fulfillment": r.fulfillment,
                                                                             "recipient_details": r.recipient_details}
                         for r in rows]}
    emit(data, as_json, "\n".join(
        f"{r.id}  {r.category:<14} {','.join(r.currency_codes):<12} {r.fulfillment or '-':<9}  {r.name}"
        for r in rows))


@products_app.command("import")
def products_import(path: Annotated[str, typer.Argument(help='JSON file {"products": [...]}')]):
    """Add or update products from a catalog file (same format as the shipped catalog)."""
    from largesse.catalog import service as catalog

    try:
        rows = catalog.load_file(path)
    except (OSError, ValueError) as exc:
        fail(f"{path}: {exc}")
    with db.write(open_engine()) as conn:
        result = catalog.import_catalog(conn, rows)
    added = (f"; {result.auto_added} added to {result.campaigns} campaigns by their auto_add_product_rule"
             if result.auto_added else "")
    typer.echo(f"imported {path}: {result.created} created, {result.updated} updated{added}")


def _register_domain_commands() -> None:
    """worker/jobs (delivery), inventory (redemption), members login-link (dashboard) live with their domains."""
    from largesse.dashboard import cli as dashboard_cli
    from largesse.delivery import cli as delivery_cli
    from largesse.forex import cli as forex_cli
    from largesse.invoices import cli as invoices_cli
    from largesse.orders import cli as orders_cli
    from largesse.redemption import cli as redemption_cli
    from largesse.topups import cli as topups_cli
    from largesse.webhooks import cli as webhooks_cli

    delivery_cli.register(app)
    redemption_cli.register(app)
    webhooks_cli.register(app)
    orders_cli.register(app, org_app)  # org approvals; orders pending|approve|reject
    topups_cli.register(app)
    invoices_cli.register(app)
    forex_cli.register(app)
    dashboard_cli.register(members_app)


_register_domain_commands()


def main() -> None:
    app(prog_name="largesse")


if __name__ == "__main__":
    sys.exit(main())
