"""Organizations, their members and keys.

The operator's side (CLI) uses the connection-level functions inside its own transaction; the
API and the dashboard call the engine-level member functions (create_member, update_member_role,
remove_member), each one transaction that holds the rules: role IDs (orgs/roles.py), unique
addresses, and an organization never loses its last administrator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, delete, exists, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from largesse import auth, codes, db, email_address
from largesse.errors import BadRequest, Forbidden, NotFound, Unprocessable
from largesse.funding import service as funding
from largesse.ids import new_id
from largesse.money import format_amount
from largesse.orgs import roles
from largesse.orgs.models import api_keys, members, organizations
from largesse.timeutil import iso, utcnow

SANDBOX_CREDIT_CENTS = 500_000  # 5000 USD, as the interface specification gives
NAME_MAX = 200
# Fees an operator may set (`largesse org fees`): a share of each reward of at most 100 %, and
# a flat fee of at most 100,000.00 per reward (fee_flat_cents is an `integer` column).
MAX_FEE_BASIS_POINTS = 10_000
MAX_FEE_FLAT_CENTS = 100_000_00


class OrgError(ValueError):
    pass


def clean_name(name: str) -> str:
    """An organization's name as stored: without surrounding spaces, 1-200 characters. The one
    rule of `largesse org create` and of POST /organizations (a sub-organization)."""
    cleaned = name.strip()
    if not cleaned:
        raise OrgError("name must not be blank")
    if len(cleaned) > NAME_MAX:
        raise OrgError(f"name must be at most {NAME_MAX} characters")
    return cleaned


def email_key(email: str) -> str:
    """The mailbox an address names, for comparing addresses (members' uniqueness, the sandbox's
    recipient rule, sign-in): alice+fail@x.org and Alice@X.org are one mailbox. The local part
    folds ASCII letters only: a non-ASCII letter whose lower case is ASCII (KELVIN SIGN "\u212a")
    names another mailbox, which must not pass for a member's. Domains fold whole (IDNA maps
    case). Migration 0023 re-keyed the stored members."""
    local, _, domain = email.strip().rpartition("@")
    local = email_address.folded(local).split("+", 1)[0]
    return f"{local}@{domain.lower()}"


@dataclass
class CreatedOrg:
    organization_id: str
    member_id: str
    funding_source_id: str
    api_key_id: str
    api_key: str
    available_cents: int
    name: str = ""


def create_org(conn: Connection, *, name: str, member_email: str, member_name: str | None, sandbox: bool,
               currency_code: str = "USD") -> CreatedOrg:
    name = clean_name(name)
    currency = codes.currency(currency_code)
    if currency is None:
        raise OrgError(f"{currency_code!r} is not an ISO 4217 currency code Largesse supports")
    currency_code = currency
    member_email = member_email.strip()
    if not email_address.valid(member_email):  # the one rule (email_address.py): sign-in takes no other
        raise OrgError(f"{member_email!r} is not a valid email address")
    org_id = new_id()
    conn.execute(organizations.insert().values(
        id=org_id, name=name, currency_code=currency_code, fee_basis_points=0, fee_flat_cents=0,
        environment="sandbox" if sandbox else "production", root_organization_id=org_id, created_at=utcnow(),
    ))
    member_id = add_member(conn, organization_id=org_id, email=member_email, name=member_name, status=REGISTERED)
    fs_id = funding.create_balance(conn, organization_id=org_id, currency_code=currency_code)
    available = 0
    if sandbox:
        available = funding.credit(conn, funding_source_id=fs_id, organization_id=org_id,
                                   amount_cents=SANDBOX_CREDIT_CENTS, kind="sandbox_credit",
                                   memo="Sandbox pre-loaded balance")
    key_id, key = auth.issue_key(conn, organization_id=org_id, label="created with the organization")
    return CreatedOrg(org_id, member_id, fs_id, key_id, key, available, name)


# Member.status (API.md §5 MemberStatus): the member who opens the organization is REGISTERED;
# one added later (API, dashboard, CLI, a sub-organization's copy) is INVITED until their first
# dashboard sign-in (dashboard.signin), which records last_login_at too.
REGISTERED, INVITED = "REGISTERED", "INVITED"


def add_member(conn: Connection, *, organization_id: str, email: str, name: str | None, role: str = "ADMIN",
               status: str = INVITED) -> str:
    if "@" not in email or len(email) > 320:
        raise OrgError(f"not an email address: {email!r}")
    member_id = new_id()
    try:
        with conn.begin_nested():
            conn.execute(members.insert().values(
                id=member_id, organization_id=organization_id, email=email.strip(), email_key=email_key(email),
                name=name, role=role, status=status, active=True, created_at=utcnow(),
            ))
    except IntegrityError:
        raise OrgError(f"{email} is already a member of this organization") from None
    return member_id


def member_id_for(conn: Connection, organization_id: str, member: str) -> str | None:
    """The ID of the organization's member named by `member`, its ID or its address (compared
    as email_key compares addresses), or None."""
    return conn.execute(select(members.c.id).where(
        members.c.organization_id == organization_id,
        or_(members.c.id == member, members.c.email_key == email_key(member)))).scalar()


_MEMBER_KEYS = select(members.c.email_key).where(
    members.c.organization_id == bindparam("org"), members.c.email_key.in_(bindparam("keys", expanding=True)))


def member_keys(conn: Connection, organization_id: str, emails) -> set[str]:
    """The email_keys among `emails` that belong to members (the sandbox recipient rule)."""
    keys = {email_key(e) for e in emails}
    if not keys:
        return set()
    return set(conn.execute(_MEMBER_KEYS, {"org": organization_id, "keys": list(keys)}).scalars())


def member_key_found(organization_id, key):
    """SQL: is the email_key `key` a member of the organization? For a statement that folds the
    sandbox recipient check into its own (POST /orders' context: one round trip fewer)."""
    return exists().where(members.c.organization_id == organization_id, members.c.email_key == key)


@dataclass
class Fees:
    basis_points: int
    flat_cents: int


def set_fees(conn: Connection, organization_id: str, *, basis_points: int | None = None,
             flat_cents: int | None = None) -> Fees:
    """Change an organization's fees (each one given; the other is kept) and return them all;
    OrgError, changing nothing, for a share outside 0-10000 basis points or a flat fee outside
    0-100,000.00. With neither given, only reads them."""
    if basis_points is not None and not 0 <= basis_points <= MAX_FEE_BASIS_POINTS:
        raise OrgError(f"the fee must be 0 to {MAX_FEE_BASIS_POINTS} basis points (100 %), not {basis_points}")
    if flat_cents is not None and not 0 <= flat_cents <= MAX_FEE_FLAT_CENTS:
        raise OrgError(f"the flat fee must be 0 to {format_amount(MAX_FEE_FLAT_CENTS)}")
    values = {key: value for key, value in (("fee_basis_points", basis_points), ("fee_flat_cents", flat_cents))
              if value is not None}
    if values:
        conn.execute(update(organizations).where(organizations.c.id == organization_id).values(**values))
    row = conn.execute(select(organizations.c.fee_basis_points, organizations.c.fee_flat_cents)
                       .where(organizations.c.id == organization_id)).one()
    return Fees(row.fee_basis_points, row.fee_flat_cents)


def get_org(conn: Connection, organization_id: str):
    return conn.execute(select(organizations).where(organizations.c.id == organization_id)).first()


def list_orgs(conn: Connection):
    return conn.execute(select(organizations).order_by(organizations.c.created_at)).all()


def list_members(conn: Connection, organization_id: str):
    return conn.execute(
        select(members).where(members.c.organization_id == organization_id).order_by(members.c.created_at)
    ).all()


def list_keys(conn: Connection, organization_id: str):
    return conn.execute(
        select(api_keys).where(api_keys.c.organization_id == organization_id).order_by(api_keys.c.created_at)
    ).all()


def revoke_key(conn: Connection, key_id: str) -> bool:
    result = conn.execute(
        api_keys.update().where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount == 1


# --- members, as the API and the dashboard manage them (one transaction each) ----------------

def get_member_or_404(conn: Connection, organization_id: str, member_id: str):
    return db.owned_or_404(conn, members, organization_id, member_id, "Member")


def check_email(email: str, loc: str = "email") -> str:
    email = email.strip()
    if not email_address.valid(email):
        raise BadRequest(f"{loc} is not a valid email address", {loc: ["is not a valid email address"]})
    return email


def add_member_checked(conn: Connection, *, organization_id: str, email: str, name: str | None, role: str,
                       loc: str = "email") -> str:
    """add_member in the caller's transaction with the client-facing rules: a known role (400),
    a valid, new address (400 "has already been taken"), and a MEMBERS.CREATED event."""
    from largesse.webhooks import service as webhooks

    role = roles.check_role(role)
    email = check_email(email, loc)
    try:
        member_id = add_member(conn, organization_id=organization_id, email=email, name=name, role=role)
    except OrgError as exc:
        raise BadRequest(str(exc), {loc: ["has already been taken"]}) from None
    webhooks.emit(conn, organization_id, [("MEMBERS.CREATED", member_id)])
    return member_id


def _refuse_approver_by_key(conn: Connection, organization_id: str, role: str, doing: str) -> None:
    """While an organization's API keys may not decide on approvals (`org approvals
    --no-api-approval`), a key may not give anyone a role that decides either: otherwise the key's
    holder adds themselves as an administrator and approves in the dashboard (docs/approvals.md)."""
    if not roles.can(role, "approve_orders"):
        return
    allowed = conn.execute(select(organizations.c.approval_api_allowed)
                           .where(organizations.c.id == organization_id)).scalar()
    if allowed is False:
        raise Forbidden(f"API keys of this organization may not {doing} a member whose role approves orders "
                        "(API approval is off); an administrator does it in the dashboard",
                        {"role": ["may not be given through the API while API approval is off"]})


def create_member(engine: Engine, *, organization_id: str, email: str, name: str | None, role: str,
                  via_api: bool = False):
    """Add a member with a role; returns its row. via_api: asked by an API key, which may not add
    a member who approves orders while the organization's API approval is off."""
    with db.write(engine) as conn:
        if via_api:
            _refuse_approver_by_key(conn, organization_id, roles.check_role(role), "add")
        member_id = add_member_checked(conn, organization_id=organization_id, email=email, name=name, role=role)
        return get_member_or_404(conn, organization_id, member_id)


def _lock_org(conn: Connection, organization_id: str) -> None:
    """Serialize membership changes of one organization (PostgreSQL row lock; SQLite's write
    transactions are serialized already), so two concurrent demotions cannot both see another
    administrator and leave none."""
    conn.execute(select(organizations.c.id).where(organizations.c.id == organization_id).with_for_update())


def _refuse_last_admin(conn: Connection, organization_id: str, member, loc: str, doing: str) -> None:
    if member.role != roles.ADMIN:
        return
    others = conn.execute(select(func.count()).select_from(members).where(
        members.c.organization_id == organization_id, members.c.role == roles.ADMIN, members.c.id != member.id,
    )).scalar_one()
    if others == 0:
        raise Unprocessable(f"Cannot {doing} the last administrator of the organization; make another member "
                            "an administrator first", {loc: ["is the last administrator"]})


def update_member_role(engine: Engine, *, organization_id: str, member_id: str, role: str,
                       via_api: bool = False):
    """Change a member's role; 400 for an unknown role, 404 for another organization's member,
    422 when it would demote the last administrator, 403 when an API key (via_api) would promote
    a member to a role that approves orders while API approval is off. Returns the updated row."""
    role = roles.check_role(role)
    with db.write(engine) as conn:
        _lock_org(conn, organization_id)
        member = get_member_or_404(conn, organization_id, member_id)
        if via_api and member.role != role:
            _refuse_approver_by_key(conn, organization_id, role, "promote")
        if role != roles.ADMIN:
            _refuse_last_admin(conn, organization_id, member, "role", "demote")
        conn.execute(update(members).where(members.c.id == member_id).values(role=role))
        return get_member_or_404(conn, organization_id, member_id)


def remove_member_in(conn: Connection, organization_id: str, member_id: str, *,
                     keep_last_admin: bool = True) -> None:
    """remove_member inside the caller's transaction. keep_last_admin=False is for a platform
    removing a connected organization's member: the platform administers that membership."""
    from largesse.webhooks import service as webhooks

    _lock_org(conn, organization_id)
    member = get_member_or_404(conn, organization_id, member_id)
    if keep_last_admin:
        _refuse_last_admin(conn, organization_id, member, "id", "delete")
    conn.execute(delete(members).where(members.c.id == member_id))
    webhooks.emit(conn, organization_id, [("MEMBERS.DELETED", member_id)])


def remove_member(engine: Engine, *, organization_id: str, member_id: str) -> None:
    """Delete a member; 404 for another organization's, 422 for the last administrator."""
    with db.write(engine) as conn:
        remove_member_in(conn, organization_id, member_id)


# --- organizations as API callers see them ----------------------------------------------------

# A website as an organization gives it: http(s) URL or a bare host name, optionally a path
# (POST /organizations' `website`, a connected organization's `kyb_prefill.website_url`).
_WEBSITE = re.compile(r"^(https?://)?[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*(:[0-9]{1,5})?"
                      r"(/[^\s<>\"'\\]*)?\Z")


def valid_website(website: str) -> bool:
    match = _WEBSITE.match(website)
    return match is not None and (match.group(2) is None or 0 < int(match.group(2)[1:]) <= 65535)


def visible_orgs(conn: Connection, organization_id: str, *, sub_organizations: bool = False):
    """The caller's organization; with sub_organizations, then those it created (oldest first)."""
    own = get_org(conn, organization_id)
    if not sub_organizations:
        return [own]
    children = conn.execute(
        select(organizations).where(organizations.c.parent_organization_id == organization_id)
        .order_by(organizations.c.created_at, organizations.c.id)
    ).all()
    return [own, *children]


def of_environment(environment: str):
    """SQL: the IDs of the organizations of one environment. A server serves its own environment's
    links only (sign-in, /connect, report downloads), as it redeems only its own rewards."""
    return select(organizations.c.id).where(organizations.c.environment == environment)


def descendants(conn: Connection, organization_id: str) -> list[str]:
    """The sub-organizations an organization created, theirs, and so on (breadth first)."""
    found: list[str] = []
    level = [organization_id]
    while level:
        level = conn.execute(select(organizations.c.id).where(organizations.c.parent_organization_id.in_(level))
                             .order_by(organizations.c.id)).scalars().all()
        level = [org for org in level if org not in found and org != organization_id]
        found.extend(level)
    return found


def visible_org_or_404(conn: Connection, caller_org: str, organization_id: str):
    row = get_org(conn, organization_id)
    if row is None or (row.id != caller_org and row.parent_organization_id != caller_org):
        raise NotFound(f"Organization {organization_id} not found", {"id": ["not found"]})
    return row


# --- wire forms (API.md §3), shared by the organizations and connected organizations APIs ----

def member_to_wire(row, *, events: bool = False) -> dict:
    out = {"id": row.id, "email": row.email, "name": row.name, "active": bool(row.active), "role": row.role,
           "status": row.status}
    last_login = getattr(row, "last_login_at", None)
    if events:
        out["events"] = [{"type": "created", "date_utc": iso(row.created_at)}]
        if last_login is not None:
            out["events"].append({"type": "last_login", "date_utc": iso(last_login)})
    else:
        out["created_at"] = iso(row.created_at)
        if last_login is not None:
            out["last_login_at"] = iso(last_login)
    return out


def organization_to_wire(row) -> dict:
    """API.md §3 Organization: created_at is a date; Largesse approves organizations at creation."""
    return {"id": row.id, "name": row.name, "website": row.website or "", "currency_code": row.currency_code,
            "status": "APPROVED", "created_at": row.created_at.date().isoformat()}


def revoke_org_key(conn: Connection, *, organization_id: str, key_id: str) -> bool:
    """Revoke one of the organization's keys (the dashboard); False when none is active."""
    result = conn.execute(
        api_keys.update().where(api_keys.c.organization_id == organization_id, api_keys.c.id == key_id,
                                api_keys.c.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount == 1
