"""Organizations, their members and keys: the operator's side (CLI) of the house."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from largesse import auth
from largesse.funding import service as funding
from largesse.ids import new_id
from largesse.orgs.models import api_keys, members, organizations
from largesse.timeutil import utcnow

SANDBOX_CREDIT_CENTS = 500_000  # 5000 USD, as the interface specification gives


class OrgError(ValueError):
    pass


def email_key(email: str) -> str:
    """Lower-cased address without a +tag: alice+fail@x.org and Alice@X.org are one mailbox."""
    local, _, domain = email.strip().lower().rpartition("@")
    local = local.split("+", 1)[0]
    return f"{local}@{domain}"


@dataclass
class CreatedOrg:
    organization_id: str
    member_id: str
    funding_source_id: str
    api_key_id: str
    api_key: str
    available_cents: int


def create_org(conn: Connection, *, name: str, member_email: str, member_name: str | None, sandbox: bool,
               currency_code: str = "USD") -> CreatedOrg:
    org_id = new_id()
    conn.execute(organizations.insert().values(
        id=org_id, name=name, currency_code=currency_code, fee_basis_points=0, fee_flat_cents=0,
        environment="sandbox" if sandbox else "production", created_at=utcnow(),
    ))
    member_id = add_member(conn, organization_id=org_id, email=member_email, name=member_name)
    fs_id = funding.create_balance(conn, organization_id=org_id, currency_code=currency_code)
    available = 0
    if sandbox:
        available = funding.credit(conn, funding_source_id=fs_id, organization_id=org_id,
                                   amount_cents=SANDBOX_CREDIT_CENTS, kind="sandbox_credit",
                                   memo="Sandbox pre-loaded balance")
    key_id, key = auth.issue_key(conn, organization_id=org_id, label="created with the organization")
    return CreatedOrg(org_id, member_id, fs_id, key_id, key, available)


def add_member(conn: Connection, *, organization_id: str, email: str, name: str | None, role: str = "ADMIN") -> str:
    if "@" not in email or len(email) > 320:
        raise OrgError(f"not an email address: {email!r}")
    member_id = new_id()
    try:
        with conn.begin_nested():
            conn.execute(members.insert().values(
                id=member_id, organization_id=organization_id, email=email.strip(), email_key=email_key(email),
                name=name, role=role, status="REGISTERED", active=True, created_at=utcnow(),
            ))
    except IntegrityError:
        raise OrgError(f"{email} is already a member of this organization") from None
    return member_id


_MEMBER_KEYS = select(members.c.email_key).where(
    members.c.organization_id == bindparam("org"), members.c.email_key.in_(bindparam("keys", expanding=True)))


def member_keys(conn: Connection, organization_id: str, emails) -> set[str]:
    """The email_keys among `emails` that belong to members (the sandbox recipient rule)."""
    keys = {email_key(e) for e in emails}
    if not keys:
        return set()
    return set(conn.execute(_MEMBER_KEYS, {"org": organization_id, "keys": list(keys)}).scalars())


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


def set_member_role(conn: Connection, *, organization_id: str, member_id: str, role: str) -> bool:
    """Change a member's role (already checked against the roles); False when no such member."""
    return conn.execute(update(members).where(members.c.organization_id == organization_id,
                                              members.c.id == member_id).values(role=role)).rowcount == 1


class LastMember(OrgError):
    pass


def remove_member(conn: Connection, *, organization_id: str, member_id: str) -> bool:
    """Remove a member; False when no such member. An organization keeps at least one member."""
    count = conn.execute(
        select(func.count()).select_from(members).where(members.c.organization_id == organization_id)
    ).scalar_one()
    exists_ = conn.execute(select(members.c.id).where(members.c.organization_id == organization_id,
                                                      members.c.id == member_id)).first()
    if exists_ is None:
        return False
    if count <= 1:
        raise LastMember("An organization keeps at least one member")
    conn.execute(delete(members).where(members.c.organization_id == organization_id, members.c.id == member_id))
    return True


def revoke_org_key(conn: Connection, *, organization_id: str, key_id: str) -> bool:
    """Revoke one of the organization's keys (the dashboard); False when none is active."""
    result = conn.execute(
        api_keys.update().where(api_keys.c.organization_id == organization_id, api_keys.c.id == key_id,
                                api_keys.c.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount == 1
