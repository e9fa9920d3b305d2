"""Dashboard test helpers: signed-in HTTP clients (one per member), forms' CSRF tokens."""

from __future__ import annotations

import html
import re
import secrets

import httpx
import pytest
from sqlalchemy import select

from largesse import db
from largesse.dashboard import signin
from largesse.orgs import service as orgs
from largesse.orgs.models import members
from tests.redemption.conftest import fake_ip

CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def csrf_of(page: str) -> str:
    match = CSRF.search(page)
    assert match, "no CSRF field on the page"
    return match.group(1)


def text_of(page: str) -> str:
    """The page's visible text, roughly: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def member_id(engine, org_id: str, email: str) -> str:
    with db.read(engine) as conn:
        return conn.execute(select(members.c.id).where(members.c.organization_id == org_id,
                                                       members.c.email == email)).scalar_one()


def add_member(engine, org_id: str, *, role: str = "MEMBER") -> tuple[str, str]:
    email = f"member-{secrets.token_hex(4)}@example.com"
    with db.write(engine) as conn:
        return orgs.add_member(conn, organization_id=org_id, email=email, name="Mia Member", role=role), email


def page_client(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=60, headers={"X-Forwarded-For": fake_ip()})


def sign_in_with_link(client: httpx.Client, link: str) -> httpx.Response:
    """Open a sign-in link as a person does: the confirmation page, then its button."""
    confirm = client.get(link)
    assert confirm.status_code == 200, confirm.text
    assert "You are about to sign in" in confirm.text
    token = re.search(r'name="token" value="([^"]+)"', confirm.text).group(1)
    return client.post("/dashboard/signin/link", data={"csrf_token": csrf_of(confirm.text), "token": token})


def signed_in(engine, base_url: str, org_id: str, member: str) -> httpx.Client:
    with db.write(engine) as conn:
        token = signin.issue_token(conn, member_id=member, organization_id=org_id)
    client = page_client(base_url)
    response = sign_in_with_link(client, signin.signin_link(base_url, token))
    assert response.status_code == 303, response.text
    return client


@pytest.fixture
def admin(engine, server, org) -> httpx.Client:
    """The org's owner (ADMIN), signed in."""
    client = signed_in(engine, server.url, org.id, member_id(engine, org.id, org.member_email))
    yield client
    client.close()


@pytest.fixture
def member_client(engine, server, org) -> httpx.Client:
    """A MEMBER of the org, signed in."""
    mid, _ = add_member(engine, org.id, role="MEMBER")
    client = signed_in(engine, server.url, org.id, mid)
    yield client
    client.close()


LINK = re.compile(r"(http://\S+/dashboard/signin/link\?token=[A-Za-z0-9_\-]+)")


def deliver_mail(engine, settings) -> None:
    """Run the delivery worker once, as `largesse worker --once` does."""
    from largesse.delivery.worker import Worker

    Worker(engine, settings).drain()


def signin_links(settings, address: str, kinds=("dashboard-signin", "dashboard-invitation")) -> list[str]:
    """Sign-in links mailed to address (sign-in emails and invitations), oldest first (read
    from the Maildir)."""
    import mailbox

    found = []
    box = mailbox.Maildir(settings.mail_dir, create=False)
    for message in sorted(box, key=lambda m: m.get_date()):
        if message["X-Largesse-Kind"] in kinds and address.lower() in message["To"].lower():
            body = message.get_payload(decode=True).decode()
            found += LINK.findall(body)
    return found
