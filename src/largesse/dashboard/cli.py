"""`largesse members login-link`: a dashboard sign-in link for an operator without mail."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import select

from largesse import db
from largesse.cli_common import JsonFlag, OrgOption, emit, fail, load_settings, open_engine, require_org


def register(members_app: typer.Typer) -> None:
    @members_app.command("login-link")
    def login_link(org: OrgOption, email: Annotated[str, typer.Option("--email", help="The member's email")],
                   as_json: JsonFlag = False):
        """Print a one-time dashboard sign-in link for a member (valid 15 minutes)."""
        from largesse.dashboard import signin
        from largesse.orgs.models import members
        from largesse.orgs.service import email_key

        settings = load_settings()
        with db.write(open_engine(settings)) as conn:
            require_org(conn, org)
            member = conn.execute(select(members.c.id, members.c.active).where(
                members.c.organization_id == org, members.c.email_key == email_key(email))).first()
            if member is None or not member.active:
                fail(f"no active member {email} in organization {org} (add one with `largesse members add`)")
            token = signin.issue_token(conn, member_id=member.id, organization_id=org)
        link = signin.signin_link(settings.public_url, token)
        import os

        if not os.environ.get("LARGESSE_PUBLIC_URL"):
            typer.echo(f"note: LARGESSE_PUBLIC_URL is unset, so the link names {settings.public_url}; if the "
                       "server listens elsewhere (make run PORT=..., serve --port), set LARGESSE_PUBLIC_URL to "
                       "its address and ask again", err=True)
        emit({"link": link, "expires_in_minutes": signin.SIGNIN_MINUTES}, as_json,
             f"{link}\n(works once, for {signin.SIGNIN_MINUTES} minutes)")
