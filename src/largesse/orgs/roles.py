"""Member roles: one table, shared by the API (GET /roles, members) and the dashboard.

A role decides what a member may do in Largesse's web pages. API keys are not members: what a
key may do is its permission (read_write / read_only, auth.py), not a role.

The dashboard asks `can(role, action)` before showing or doing anything; the IDs ADMIN and
MEMBER are stable (stored in members.role, sent by API clients).
"""

from __future__ import annotations

from dataclasses import dataclass

from largesse.errors import BadRequest

# Everything a member may be allowed to do in the dashboard.
ACTIONS = frozenset({
    "view",                  # see orders, rewards, campaigns, balance, members, reports
    "send_rewards",          # place orders, resend/cancel rewards
    "manage_campaigns",      # create and edit campaigns and custom fields
    "approve_orders",        # approve or reject orders waiting for approval
    "manage_members",        # invite, change the role of, and remove members
    "manage_api_keys",       # create and revoke API keys
    "manage_funding",        # add funds, invoices, top-ups
    "manage_webhooks",       # webhook endpoint and its deliveries
    "manage_organizations",  # sub-organizations and connected organizations
    "manage_settings",       # approvals, fraud rules and other organization settings
})


@dataclass(frozen=True)
class Role:
    id: str
    title: str
    description: str
    actions: frozenset[str]


ROLES: dict[str, Role] = {role.id: role for role in (
    Role("ADMIN", "Administrator",
         "Everything: sends rewards, manages campaigns, members, API keys, funding, webhooks and settings.",
         ACTIONS),
    Role("MEMBER", "Member",
         "Sends rewards and sees the organization's orders; cannot manage members, API keys or funding.",
         frozenset({"view", "send_rewards"})),
    Role("VIEWER", "Viewer",
         "Sees the organization's orders, rewards and balance; changes nothing.",
         frozenset({"view"})),
)}

ADMIN = "ADMIN"
DEFAULT_ROLE = "MEMBER"


def can(role: str | None, action: str) -> bool:
    """Whether a member with this role may perform action. Unknown roles may do nothing; an
    unknown action is a programming error (a typo must not silently deny or allow)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    found = ROLES.get(role or "")
    return found is not None and action in found.actions


def check_role(role: str, loc: str = "role") -> str:
    """The role ID for a client's value (case-insensitive), or 400 naming the known ones."""
    found = role.strip().upper()
    if found not in ROLES:
        raise BadRequest(f"Unknown role; the roles are {', '.join(ROLES)} (GET /roles)",
                         {loc: ["is not a role"]})
    return found


def to_wire(role: Role) -> dict:
    return {"id": role.id, "title": role.title, "description": role.description}
