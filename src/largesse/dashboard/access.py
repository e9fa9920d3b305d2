"""Who is asking, and what they may do: every dashboard handler goes through here.

viewer() turns the session cookie into the signed-in member and their organization, or
raises SignInRequired; a role that may not act raises Denied (403). owned() fetches one
object of the viewer's organization, and raises NotFoundPage (404) for an object of any
other organization exactly as for one that does not exist, so no URL reveals another
organization's data.

The roles are the organization's (GET /roles, orgs/roles.py): may() asks that module's rule
for the page kind's action, so the API and the dashboard share one definition of a role.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select

from largesse.dashboard import signin
from largesse.orgs import roles

ADMIN, MEMBER = roles.ADMIN, "MEMBER"
# The dashboard's three kinds of page, each mapped to the organization's role rule (orgs/roles.py):
# view: every page that shows data; send: place orders and act on rewards (resend, cancel,
# generate a link); admin: team, API keys, webhooks, funding, campaigns. approve: the approval
# queue; funding: invoices and top-ups; settings: organization settings (the approval policy).
PAGE_ACTIONS = {"view": "view", "send": "send_rewards", "admin": "manage_members", "approve": "approve_orders",
                "funding": "manage_funding", "settings": "manage_settings"}


class SignInRequired(Exception):
    pass


class Denied(Exception):
    pass


class NotFoundPage(Exception):
    pass


def may(role: str, action: str) -> bool:
    return roles.can((role or "").upper(), PAGE_ACTIONS[action])


@dataclass(frozen=True)
class Viewer:
    member_id: str
    email: str
    name: str | None
    role: str
    organization_id: str
    org_name: str
    currency_code: str
    session_hash: str

    def may(self, action: str) -> bool:
        return may(self.role, action)


def viewer(engine, cookie: str | None, *, action: str = "view", environment: str | None = None) -> Viewer:
    row = signin.load_session(engine, cookie)
    if row is None or (environment is not None and row.environment != environment):
        raise SignInRequired()
    found = Viewer(member_id=row.member_id, email=row.email, name=row.name, role=row.role,
                   organization_id=row.organization_id, org_name=row.org_name, currency_code=row.currency_code,
                   session_hash=row.id_hash)
    if not found.may(action):
        raise Denied()
    return found


def owned(conn: Connection, who: Viewer, table, row_id: str, *, id_column: str = "id"):
    """The row of `table` with this id in the viewer's organization, else NotFoundPage."""
    if not row_id or len(row_id) > 64:
        raise NotFoundPage()
    row = conn.execute(select(table).where(table.c.organization_id == who.organization_id,
                                           table.c[id_column] == row_id)).first()
    if row is None:
        raise NotFoundPage()
    return row
