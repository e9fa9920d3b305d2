"""Signing in by emailed link, sessions, sign-out, rate limits, the CLI's login-link."""

from __future__ import annotations

import time
from dataclasses import replace

from sqlalchemy import update

from largesse import db
from largesse.dashboard import signin
from largesse.dashboard.models import signin_tokens
from largesse.orgs.models import members
from tests.dashboard.conftest import (
    add_member,
    csrf_of,
    deliver_mail,
    member_id,
    page_client,
    sign_in_with_link,
    signed_in,
    signin_links,
    text_of,
)


def ask_for_link(client, email: str, next_path: str = ""):
    form = client.get("/dashboard/signin" + (f"?next={next_path}" if next_path else ""))
    assert form.status_code == 200
    assert "Email address" in form.text and "Email me a sign-in link" in form.text
    return client.post("/dashboard/signin", data={"csrf_token": csrf_of(form.text), "email": email,
                                                  "next": next_path})


def test_emailed_link_signs_in_once(engine, server, org):
    with page_client(server.url) as client:
        response = ask_for_link(client, org.member_email.upper())  # addresses compare case-insensitively
        assert response.status_code == 200
        assert "Check your email" in text_of(response.text)
        deliver_mail(engine, server.settings)
        links = signin_links(server.settings, org.member_email)
        assert len(links) == 1 and links[0].startswith(server.url)
        # A mail scanner opening the link (GET, twice) does not spend it.
        assert client.get(links[0]).status_code == 200
        response = sign_in_with_link(client, links[0])
        assert response.status_code == 303 and response.headers["location"] == "/dashboard"
        cookie = response.headers["set-cookie"]
        assert "largesse_session=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
        assert "Path=/dashboard" in cookie and "Secure" not in cookie
        overview = client.get("/dashboard")
        assert overview.status_code == 200
        assert "Acme" in overview.text and org.member_email in overview.text
        # Single use: the same link again, even through its page, is refused.
        again = page_client(server.url)
        assert again.get(links[0]).status_code == 410
        assert "This sign-in link has expired" in text_of(again.get(links[0]).text)
        again.close()


def test_a_name_with_control_characters_still_gets_its_link(engine, server, org):
    """A CR in the member's name (any API client may set it) made the sign-in email fail to
    build, for good: that member could never sign in by email."""
    _, email = add_member(engine, org.id)
    with db.write(engine) as conn:
        conn.execute(update(members).where(members.c.email == email).values(name="Mia\rMember, <x@evil.example>"))
    with page_client(server.url) as client:
        assert ask_for_link(client, email).status_code == 200
        deliver_mail(engine, server.settings)
        (link,) = signin_links(server.settings, email)
        assert sign_in_with_link(client, link).status_code == 303


def test_unknown_address_gets_the_same_answer(engine, server, org):
    with page_client(server.url) as client:
        known = ask_for_link(client, org.member_email)
        unknown = ask_for_link(client, "nobody-here@example.com")
    assert known.status_code == unknown.status_code == 200
    assert text_of(known.text).replace(org.member_email, "X") == text_of(unknown.text).replace(
        "nobody-here@example.com", "X")


def _early_in_a_window(seconds_needed: float = 15) -> None:
    """The limits count in fixed windows (signin.LIMITS): start where the requests cannot
    straddle two windows, which would admit the request that must be refused."""
    left = signin.LIMITS.window_seconds - time.time() % signin.LIMITS.window_seconds
    if left < seconds_needed:
        time.sleep(left + 0.05)


def test_requests_are_rate_limited_per_address(server, org):
    _early_in_a_window()
    with page_client(server.url) as client:
        statuses = [ask_for_link(client, org.member_email).status_code for _ in range(signin.PER_ADDRESS + 1)]
    assert statuses[:-1] == [200] * signin.PER_ADDRESS
    assert statuses[-1] == 429


def test_requests_are_rate_limited_per_client(server):
    _early_in_a_window()
    with page_client(server.url) as client:
        statuses = [ask_for_link(client, f"someone{i}@example.com").status_code
                    for i in range(signin.PER_CLIENT + 1)]
    assert statuses[-1] == 429 and statuses[0] == 200


def test_next_is_honoured_for_local_paths_only(engine, server, org):
    mid = member_id(engine, org.id, org.member_email)
    for asked, lands in (("/dashboard/rewards?status=ACTIVE", "/dashboard/rewards?status=ACTIVE"),
                         ("https://evil.example/dashboard", "/dashboard"), ("//evil.example/x", "/dashboard"),
                         ("/api/v2/orders", "/dashboard"), ("/dashboard//evil.example", "/dashboard"),
                         ("/dashboard/../evil", "/dashboard"), ("/dashboard/%2e%2e/evil", "/dashboard"),
                         ("/dashboardevil", "/dashboard"), ("/dashboard/rewards?next=//evil.example", "/dashboard"),
                         ("/dashboard?status=ACTIVE", "/dashboard?status=ACTIVE"), ("/dashboard", "/dashboard")):
        with db.write(engine) as conn:
            token = signin.issue_token(conn, member_id=mid, organization_id=org.id, next_path=asked)
        with page_client(server.url) as client:
            response = sign_in_with_link(client, signin.signin_link(server.url, token))
            assert response.headers["location"] == lands


def test_pages_redirect_to_sign_in_and_back(engine, server, org):
    with page_client(server.url) as client:
        response = client.get("/dashboard/rewards?status=ACTIVE")
        assert response.status_code == 303
        assert response.headers["location"] == "/dashboard/signin?next=%2Fdashboard%2Frewards%3Fstatus%3DACTIVE"
        form = client.get(response.headers["location"])
        assert 'name="next" value="/dashboard/rewards?status=ACTIVE"' in form.text


def test_expired_link_is_refused(engine, server, org):
    mid = member_id(engine, org.id, org.member_email)
    with db.write(engine) as conn:
        token = signin.issue_token(conn, member_id=mid, organization_id=org.id)
        conn.execute(update(signin_tokens).where(signin_tokens.c.token_hash == signin.hash_secret(token))
                     .values(expires_at=signin_tokens.c.created_at))
    with page_client(server.url) as client:
        assert client.get(signin.signin_link(server.url, token)).status_code == 410
        page = client.get("/dashboard/signin")
        response = client.post("/dashboard/signin/link", data={"csrf_token": csrf_of(page.text), "token": token})
        assert response.status_code == 410
        assert "largesse_session" not in response.headers.get("set-cookie", "")


def test_sign_out_ends_the_session(engine, server, org):
    client = signed_in(engine, server.url, org.id, member_id(engine, org.id, org.member_email))
    session_cookie = client.cookies.get("largesse_session")
    page = client.get("/dashboard")
    response = client.post("/dashboard/signout", data={"csrf_token": csrf_of(page.text)})
    assert response.status_code == 303 and response.headers["location"] == "/dashboard/signin"
    with page_client(server.url) as stranger:  # the old cookie value no longer opens anything
        stranger.cookies.set("largesse_session", session_cookie)
        assert stranger.get("/dashboard").status_code == 303
    client.close()


def test_removed_member_loses_the_session(engine, server, org):
    mid, _ = add_member(engine, org.id, role="MEMBER")
    client = signed_in(engine, server.url, org.id, mid)
    assert client.get("/dashboard").status_code == 200
    from largesse.orgs import service as orgs

    orgs.remove_member(engine, organization_id=org.id, member_id=mid)
    assert client.get("/dashboard").status_code == 303
    client.close()


def test_cookie_is_secure_behind_https(engine, make_server, org):
    server = make_server()
    server.app.state.settings = replace(server.settings, public_url="https://rewards.example.com")
    mid = member_id(engine, org.id, org.member_email)
    with db.write(engine) as conn:
        token = signin.issue_token(conn, member_id=mid, organization_id=org.id)
    with page_client(server.url) as client:
        confirm = client.get(f"{server.url}/dashboard/signin/link?token={token}")
        csrf_cookie = confirm.headers["set-cookie"]
        assert "Secure" in csrf_cookie  # so this plain-http client does not send it back: do it by hand
        nonce = csrf_cookie.split(";")[0].split("=", 1)[1]
        response = client.post("/dashboard/signin/link", data={"csrf_token": csrf_of(confirm.text), "token": token},
                               headers={"Cookie": f"largesse_dashboard_csrf={nonce}"})
    assert response.status_code == 303
    assert "Secure" in response.headers["set-cookie"] and "HttpOnly" in response.headers["set-cookie"]


def test_cli_login_link(cli, engine, server, org):
    result = cli("members", "login-link", "--org", org.id, "--email", org.member_email,
                 env={"LARGESSE_PUBLIC_URL": server.url})
    link = result.stdout.splitlines()[0]
    assert link.startswith(f"{server.url}/dashboard/signin/link?token=")
    with page_client(server.url) as client:
        assert sign_in_with_link(client, link).status_code == 303
        assert client.get("/dashboard").status_code == 200
    refused = cli("members", "login-link", "--org", org.id, "--email", "stranger@example.com", check=False)
    assert refused.returncode == 1 and "no active member" in refused.stderr


def test_idle_and_absolute_expiry(engine, server, org):
    from datetime import timedelta

    from largesse.dashboard.models import sessions

    mid = member_id(engine, org.id, org.member_email)
    for column, age in (("last_seen_at", signin.IDLE), ("expires_at", timedelta(0))):
        client = signed_in(engine, server.url, org.id, mid)
        assert client.get("/dashboard").status_code == 200
        id_hash = signin.hash_secret(client.cookies.get("largesse_session"))
        with db.write(engine) as conn:
            row = conn.execute(sessions.select().where(sessions.c.id_hash == id_hash)).first()
            conn.execute(update(sessions).where(sessions.c.id_hash == id_hash)
                         .values(**{column: row.created_at - age - timedelta(seconds=1)}))
        assert client.get("/dashboard").status_code == 303, column
        client.close()
