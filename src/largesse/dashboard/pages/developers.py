"""Developers (administrators only): API keys, the webhook, its deliveries."""

from __future__ import annotations

from fastapi import APIRouter

from largesse import auth, db
from largesse.dashboard import access
from largesse.dashboard.web import route
from largesse.errors import ApiError
from largesse.orgs import service as orgs
from largesse.orgs.models import api_keys
from largesse.webhooks import actions, deliveries
from largesse.webhooks import service as webhooks
from largesse.webhooks.models import webhooks as webhooks_table

router = APIRouter()
NOTICES = {"revoked": "API key revoked.", "webhook": "Webhook saved.", "simulated": "Test event queued.",
           "resent": "Event queued to be sent again."}


def _page(ctx, status: int = 200, *, error: str | None = None, new_key: str | None = None,
          notice: str | None = None, typed_url: str | None = None):
    org = ctx.viewer.organization_id
    with db.read(ctx.engine) as conn:
        keys = orgs.list_keys(conn, org)
        hook = webhooks.for_org(conn, org)
        recent = deliveries.page(conn, hook.id, limit=20, offset=0)[0] if hook else []
    key = None
    if hook is not None:
        try:
            key = actions.signing_key(ctx.engine, ctx.settings, hook)
        except ApiError as exc:
            error = error or exc.message
    return ctx.render("developers.html", status, title="Developers", keys=keys, hook=hook, signing_key=key,
                      deliveries=recent, events=webhooks.EVENTS, error=error, new_key=new_key, typed_url=typed_url,
                      notice=notice or NOTICES.get(ctx.arg("done", max_length=20)))


@route(router, "GET", "/developers", action="admin")
def developers(ctx):
    if ctx.arg("done", max_length=20) == "created":
        new_key = ctx.take_flash("api_key")  # shown on this first view only
        if new_key:
            return _page(ctx, new_key=new_key, notice="API key created. Copy it now: it will not be shown again.")
        return _page(ctx, notice="API key created. It was shown once and cannot be shown again; "
                                 "if you did not copy it, revoke it and create another.")
    return _page(ctx)


@route(router, "POST", "/developers/keys", action="admin")
def create_key(ctx):
    permission = ctx.form.get("permission", "read_write", max_length=20)
    if permission not in auth.PERMISSIONS:
        return _page(ctx, 400, error="Choose read and write, or read only.")
    label = ctx.form.get("label", max_length=200) or None
    with db.write(ctx.engine) as conn:
        _, key = auth.issue_key(conn, organization_id=ctx.viewer.organization_id, permission=permission, label=label)
    # Only its hash is stored: the key reaches the next page once (post/redirect/get, so a
    # reload neither creates a second key nor shows this one again).
    return ctx.redirect_with_flash("/dashboard/developers?done=created", "api_key", key)


@route(router, "POST", "/developers/keys/{key_id}/revoke", action="admin")
def revoke_key(ctx, key_id: str):
    with db.write(ctx.engine) as conn:
        access.owned(conn, ctx.viewer, api_keys, key_id)
        orgs.revoke_org_key(conn, organization_id=ctx.viewer.organization_id, key_id=key_id)
    return ctx.redirect("/dashboard/developers?done=revoked")


def _act(ctx, action, done: str, *, typed_url: str | None = None):
    try:
        action()
    except ApiError as exc:  # the form shows what was typed again
        return _page(ctx, exc.status_code, error=exc.message, typed_url=typed_url)
    return ctx.redirect(f"/dashboard/developers?done={done}")


@route(router, "POST", "/developers/webhook", action="admin")
def set_webhook(ctx):
    url = ctx.form.get("url", max_length=2000)
    return _act(ctx, lambda: actions.set_url(ctx.engine, ctx.settings, ctx.viewer.organization_id, url), "webhook",
                typed_url=url)


def _hook(ctx, webhook_id: str):
    with db.read(ctx.engine) as conn:
        return access.owned(conn, ctx.viewer, webhooks_table, webhook_id)


@route(router, "POST", "/developers/webhook/{webhook_id}/simulate", action="admin")
def simulate(ctx, webhook_id: str):
    hook = _hook(ctx, webhook_id)
    event = ctx.form.get("event", max_length=100)
    return _act(ctx, lambda: actions.simulate(ctx.engine, ctx.settings, ctx.viewer.organization_id, hook.id, event),
                "simulated")


@route(router, "POST", "/developers/webhook/{webhook_id}/deliveries/{delivery_id}/resend", action="admin")
def resend(ctx, webhook_id: str, delivery_id: str):
    hook = _hook(ctx, webhook_id)
    return _act(ctx, lambda: actions.resend(ctx.engine, ctx.settings, ctx.viewer.organization_id, hook.id,
                                            delivery_id), "resent")
