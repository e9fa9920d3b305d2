"""Helpers shared by every domain's operator commands (largesse.cli, delivery/cli.py, ...).

Domain CLIs import this module; it imports none of them, so there is no cycle back into
largesse.cli.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import exc as sa_exc
from typer.core import TyperGroup

from largesse import db
from largesse.config import Settings

OrgOption = Annotated[str, typer.Option("--org", help="Organization ID")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
OrgFilterOption = Annotated[str | None, typer.Option("--org", help="Only this organization's")]
LIST_LIMIT_MAX = 1000
LimitOption = Annotated[int, typer.Option(help="How many (newest first)", min=1, max=LIST_LIMIT_MAX)]

# Every whole-number parameter of every command is refused outside 0..WHOLE_NUMBER_MAX before
# the command runs (LargesseGroup), whatever narrower range the option declares itself: the
# largest value of PostgreSQL's `integer`, so no option's value overflows a column it reaches.
WHOLE_NUMBER_MAX = 2**31 - 1


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        fail(str(exc))


# --- the database -----------------------------------------------------------------------------
#
# A command that reads or changes existing data refuses a SQLite database file that does not
# exist (a mistyped path, or the default ./var/largesse.sqlite3 run from another directory):
# it would otherwise create an empty database and answer "no organizations" or "ledger OK".
# The commands that may start a new database open it with open_engine(create=True): `serve`,
# `worker`, `db upgrade` and `org create` (docs/operations.md, "A new database").


def shown_url(url: str) -> str:
    """A database URL as the operator may see it: with its password masked, nothing else."""
    from sqlalchemy.engine import make_url

    from largesse.ops.logs import redact_url

    try:  # the password of the user part, and a ?password= of the query (libpq takes both)
        return redact_url(make_url(url).render_as_string(hide_password=True))
    except (sa_exc.ArgumentError, ValueError):
        return "(not a URL)"


def database_url(settings: Settings):
    """LARGESSE_DATABASE_URL as a SQLAlchemy URL: SQLite or PostgreSQL, else one line and exit 1."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(db.normalize_url(settings.database_url))
    except (sa_exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        fail("LARGESSE_DATABASE_URL is not a database URL: use sqlite:///PATH or "
             "postgresql://USER:PASSWORD@HOST:PORT/NAME")
    backend, _, driver = url.drivername.partition("+")
    if not ((backend == "sqlite" and driver in ("", "pysqlite")) or (backend == "postgresql" and driver == "psycopg")):
        fail(f"LARGESSE_DATABASE_URL must be a SQLite (sqlite:///PATH) or PostgreSQL (postgresql://...) URL, "
             f"not {shown_url(settings.database_url)}")
    if backend == "sqlite" and (url.database or ":memory:") == ":memory:":
        # sqlite:// and sqlite:/// are a database in memory: empty, gone at exit ("ledger OK")
        fail(f"LARGESSE_DATABASE_URL names no SQLite file ({shown_url(settings.database_url)}): "
             "use sqlite:///PATH, e.g. sqlite:///var/largesse.sqlite3")
    if backend == "postgresql" and not url.database and "dbname" not in url.query and not os.environ.get("PGDATABASE"):
        # libpq would pick the database named as the user and migrate it: a unit file whose
        # variables did not expand must not set up whatever database that is
        fail(f"LARGESSE_DATABASE_URL names no PostgreSQL database ({shown_url(settings.database_url)}): "
             "use postgresql://USER@HOST:PORT/NAME")
    return url


def unavailable_reason(exc: BaseException) -> str:
    """The driver's own words for a database that cannot be used, on one line, secrets masked."""
    from largesse.ops.logs import redact

    reason = str(getattr(exc, "orig", None) or exc).strip()
    reason = reason.removeprefix("connection failed: ")
    return redact(re.sub(r"\s+", " ", reason)) or type(exc).__name__


def open_engine(settings: Settings | None = None, *, prepare: bool = True, create: bool = False):
    """The database's engine, migrated first (prepare). Refuses, with one line and exit 1, a bad
    URL, a SQLite file that does not exist (unless `create`: the commands that may start a new
    database) and a database that cannot be reached."""
    from largesse.bootstrap import prepare as prepare_db
    from largesse.migrate import MigrationError

    settings = settings or load_settings()
    url = database_url(settings)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:" \
            and not create and not Path(url.database).exists():
        fail(f"no SQLite database at {Path(url.database).resolve()}: create one with `largesse db upgrade` "
             f"(or start `largesse serve`), or point LARGESSE_DATABASE_URL at an existing database")
    try:
        engine = db.make_engine(settings.database_url)
        if prepare:
            prepare_db(engine)
    except sa_exc.DBAPIError as exc:
        if not unusable(exc):
            # A migration that fails on this database (a column already there, data that breaks
            # a new constraint): its statement's error on one line, never a traceback
            # (docs/operations.md).
            fail(f"migrating the database {shown_url(settings.database_url)} failed: {unavailable_reason(exc)}")
        database_unavailable(exc, settings)
    except MigrationError as exc:  # a database at a revision this version does not know, ...
        fail(str(exc))
    except OSError as exc:  # the SQLite file's folder cannot be created
        fail(f"cannot create the database {shown_url(settings.database_url)}: {exc.strerror or exc}")
    return engine


def unusable(exc: BaseException) -> bool:
    """A database that cannot be used, as opposed to a statement's own error: unreachable,
    stopped, locked, or a file that is not a SQLite database (a wrong file restored)."""
    import sqlite3

    return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)) or (
        type(exc) is sa_exc.DatabaseError and type(getattr(exc, "orig", None)) is sqlite3.DatabaseError)


def database_unavailable(exc: BaseException, settings: Settings | None = None):
    """One line for a database that cannot be used (unreachable, missing, locked), then exit 1."""
    if settings is None:
        try:
            settings = Settings.from_env()
        except ValueError:
            settings = None
    where = f" {shown_url(settings.database_url)}" if settings is not None else ""
    fail(f"cannot use the database{where}: {unavailable_reason(exc)}")


# --- output -----------------------------------------------------------------------------------

def fail(message: str, code: int = 1):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def emit(data: dict, as_json: bool, text: str) -> None:
    """Print a command's result: the JSON form, or its text with control characters escaped
    (names come from API clients: an ESC sequence, a BEL or a CR must not reach the operator's
    terminal as such). Each row's own line breaks are the text's; shown() escapes a value's."""
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else _CONTROL.sub(_escape, text))


# C0 and C1 control characters and DEL, but the line feed: escaped as \x1b, \r, ...
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_ESCAPES = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}


def _escape(match: re.Match) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\x{ord(char):02x}"


def shown(value: str | None) -> str:
    """A value from a client (a name, a label) on one line of text output: a line feed in it too
    is escaped, so it cannot start a line that looks like another row."""
    return (value or "").replace("\n", "\\n")


def check_mail_transport(settings: Settings) -> None:
    """One line and exit 1 when delivery could not send a single email: a LARGESSE_SMTP_URL that
    is not an SMTP URL, a LARGESSE_MAIL_DIR that cannot be created. Checked before a worker
    starts (or `serve` starts its delivery), not in each of its threads, where every email and
    webhook thread died with a traceback and the worker exited 0 (no restart). Opens no
    connection: an SMTP server that is down is an outage the worker rides out."""
    from largesse.delivery.transport import open_transport

    try:
        open_transport(settings).close()
    except (ValueError, OSError) as exc:
        fail(f"cannot deliver email: {exc}")


def warn_without_public_url(settings: Settings, public_url_set: bool, process: str) -> None:
    """Production with LARGESSE_PUBLIC_URL unset: one warning line as `serve` or `worker` starts
    (after logging is configured), as for LARGESSE_SECRET_KEY. Every reward and sign-in email's
    link named http://127.0.0.1:PORT (a worker's default port 8000, whatever port serve used),
    without a word."""
    import logging

    if settings.sandbox or public_url_set:
        return
    logging.getLogger(f"largesse.{process}").warning(
        "LARGESSE_PUBLIC_URL is unset: links in reward and sign-in emails and on pages name %s. Production must "
        "set LARGESSE_PUBLIC_URL to the address recipients reach this server at (the same value in every "
        "process).", settings.public_url)


def warn_of_a_missing_key_file(engine, settings: Settings, process: str) -> None:
    """LARGESSE_SECRET_KEY unset, no key file where this process looks for one, yet the database
    holds secrets encrypted at rest: one warning as `serve` or `worker` starts, naming the file.
    The first use would generate a new key silently (a database restored without its key file, a
    PostgreSQL server started in another directory: var/ is relative), every webhook then
    answered 409 and its events failed, and anything encrypted next was under the stray key."""
    import logging

    from largesse.crypto import key_file_path
    from largesse.fraud import service as fraud
    from largesse.webhooks import service as webhooks

    path = key_file_path(settings.database_url).resolve()
    if settings.secret_keys or path.exists():
        return
    with db.read(engine) as conn:
        keys, held = webhooks.count_encrypted_keys(conn), fraud.count_held_details(conn)
    if keys or held:
        logging.getLogger(f"largesse.{process}").warning(
            "LARGESSE_SECRET_KEY is unset and the key file %s does not exist, but the database holds %d webhook "
            "signing key(s) and %d held bank detail(s) encrypted with a secret: a new key file would not open them. "
            "Restore the key file kept with the database's backup (or start from the directory that holds var/), "
            "or set LARGESSE_SECRET_KEY to the secret they were encrypted with.", path, keys, held)


def bounded(value: str | None, option: str, max_length: int = 200) -> str | None:
    """A free-text option within the length its column (and the API) takes, else one line."""
    if value is not None and len(value) > max_length:
        fail(f"{option} must be at most {max_length} characters")
    return value


def money_text(cents: int, currency_code: str) -> str:
    """An amount and its currency as every command prints it: "210.10 USD", "5000 JPY"."""
    from largesse.money import amount_in

    return f"{amount_in(cents, currency_code)} {currency_code}"


def operator_list(org: str | None, limit: int, list_all) -> list:
    """The rows of an operator's `list` command (invoices, top-ups): list_all(conn, org, limit=)
    for one organization, which must exist, or for all; limit is LimitOption's (1..1000)."""
    with db.read(open_engine()) as conn:
        if org is not None:
            require_org(conn, org)
        return list_all(conn, org, limit=limit)


def require_org(conn, org_id: str):
    from largesse.orgs import service as orgs

    row = orgs.get_org(conn, org_id)
    if row is None:
        fail(f"no organization {org_id}")
    return row


# --- the root command group -------------------------------------------------------------------

class LargesseGroup(TyperGroup):
    """`largesse` itself (typer.Typer(cls=LargesseGroup)). For every command below it, the
    domains' included:

    - a whole-number parameter outside 0..WHOLE_NUMBER_MAX is a usage error, before the command
      runs (an option's own min/max narrows it further);
    - a database that cannot be used while a command runs (unreachable, stopped, locked) is one
      line on stderr and exit 1, never a traceback;
    - help shows types as TEXT / INTEGER and nothing for flags, not typer's `<str>` / `<bool>`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for command in _all_commands(self):
            for param in command.params:
                param.callback = _within_whole_number_range(param.callback)
                _plain_type(param)
            _plain_help_option(command)
        _plain_help_option(self)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except sa_exc.DBAPIError as exc:
            if unusable(exc):
                database_unavailable(exc)
            if isinstance(exc, sa_exc.DataError):  # a value the column cannot hold: too long, out of range
                fail(f"the database refused a value: {unavailable_reason(exc).splitlines()[0]}")
            raise


def _all_commands(group):
    for command in getattr(group, "commands", {}).values():
        yield command
        yield from _all_commands(command)


def _within_whole_number_range(callback):
    def check(ctx, param, value):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, int) and not isinstance(item, bool) and not 0 <= item <= WHOLE_NUMBER_MAX:
                raise typer.BadParameter(f"{item} is not a whole number from 0 to {WHOLE_NUMBER_MAX}")
        return callback(ctx, param, value) if callback is not None else value

    return check


_PLAIN_TYPES = {"str": "TEXT", "int": "INTEGER", "int range": "INTEGER", "float": "FLOAT", "Path": "PATH"}


def _plain_type(param) -> None:
    """Help's type column: TEXT, INTEGER..., nothing for a flag (typer 0.29 shows `<str>`, `<bool>`)."""
    shown = getattr(param, "display_type_rich", None)
    if shown is None or getattr(param, "_largesse_plain", False):
        return

    def plain(ctx):
        text = shown(ctx)
        if not isinstance(text, str) or not (text.startswith("<") and text.endswith(">")):
            return text
        label = text[1:-1]
        if label == "bool" or getattr(param, "is_flag", False):
            return None
        return _PLAIN_TYPES.get(label, label.upper())

    param.display_type_rich = plain
    param._largesse_plain = True


def _plain_help_option(command) -> None:
    original = getattr(command, "get_help_option", None)
    if original is None:
        return

    def get_help_option(ctx):
        option = original(ctx)
        if option is not None:
            _plain_type(option)
        return option

    command.get_help_option = get_help_option
