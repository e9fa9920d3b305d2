"""Campaigns: list (everyone); create and edit with a live preview (administrators).

The form becomes the API's own request models (campaigns/endpoints.py CreateCampaignIn,
UpdateCampaignIn: same limits, colours and URLs), then campaigns/service.py saves it. The
previews render the real templates: the reward email (delivery/compose.py) and the
recipient's page (redemption templates), from the values typed so far (query string), so a
person sees the result before saving; dashboard.js refreshes them as they type.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from pydantic import ValidationError
from starlette.responses import HTMLResponse

from largesse import db
from largesse.campaigns import service as campaigns_service
from largesse.campaigns.endpoints import CreateCampaignIn, EmailStyle, UpdateCampaignIn, WebpageStyle
from largesse.campaigns.models import campaigns
from largesse.catalog import service as catalog
from largesse.dashboard import access, bulk, forms
from largesse.dashboard.web import route
from largesse.delivery import compose
from largesse.errors import ApiError
from largesse.fields import service as fields_service
from largesse.redemption import security
from largesse.redemption import service as redemption
from largesse.redemption.endpoints import templates as redemption_templates
from largesse.timeutil import utcnow

router = APIRouter()
PAGE_KEYS = ("headline", "message", "logo_image_url", "background_color")
EMAIL_KEYS = ("sender_name", "subject_line", "button_color", "logo_image_url")
SAMPLE_CENTS = 5000
# The editing page frames its two previews (same origin, sandboxed frames).
EDIT_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' https: http: data:; "
            "frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def _typed(source) -> dict:
    """The campaign as typed: from a POSTed form or from the preview's query string."""
    if isinstance(source, forms.Form):
        def value(name: str, limit: int) -> str:
            return source.get(name, max_length=limit)

        products = source.getlist("products", max_length=20)[:500]
    else:
        def value(name: str, limit: int) -> str:
            return (source.get(name) or "").strip()[:limit]

        products = [p[:20] for p in source.getlist("products") if p.strip()][:500]
    return {
        "name": value("name", 200), "description": value("description", 5000), "products": products,
        "webpage_style": {k: value(f"page_{k}", 5000) for k in PAGE_KEYS},
        "email_style": {k: value(f"email_{k}", 2000) for k in EMAIL_KEYS},
    }


def _body(typed: dict) -> dict:
    """The API request body: empty inputs are left out, so they keep their defaults."""
    body = {"name": typed["name"], "products": typed["products"]}
    if typed["description"]:
        body["description"] = typed["description"]
    for style in ("webpage_style", "email_style"):
        given = {k: v for k, v in typed[style].items() if v}
        if given:
            body[style] = given
    return body


def _from_row(row) -> dict:
    page, email = row.webpage_style or {}, row.email_style or {}
    return {"name": row.name, "description": row.description or "", "products": list(row.products or []),
            "webpage_style": {k: str(page.get(k) or "") for k in PAGE_KEYS},
            "email_style": {k: str(email.get(k) or "") for k in EMAIL_KEYS}}


def _preview_query(typed: dict) -> str:
    pairs = [("products", p) for p in typed["products"]]
    pairs += [(f"page_{k}", v) for k, v in typed["webpage_style"].items() if v]
    pairs += [(f"email_{k}", v) for k, v in typed["email_style"].items() if v]
    return urlencode(pairs)


# The texts whose {{ placeholders }} are filled with the reward's custom fields (delivery/compose.py).
PLACEHOLDER_TEXTS = (("webpage_style", "headline", "Page headline"), ("webpage_style", "message", "Page message"),
                     ("email_style", "subject_line", "Email subject"))


def _placeholder_warnings(typed: dict, labels: list[str]) -> list[str]:
    """Placeholders no custom field fills (compose.unknown_placeholders: the composer's own rule)."""
    out = []
    for style, key, name in PLACEHOLDER_TEXTS:
        unknown = compose.unknown_placeholders(typed[style].get(key), labels)
        if unknown:
            out.append(f"{name}: " + ", ".join("{{ " + u + " }}" for u in unknown))
    return out


def _editor(ctx, typed: dict, *, campaign=None, status: int = 200, errors: list[str] | None = None,
            previewed: bool = False):
    # "Update preview" (a GET of the typed values): the values the previews leave out, named.
    preview_problems = _checked_styles(typed)[2] if previewed else []
    with db.read(ctx.engine) as conn:
        products = catalog.list_active(conn)
        labels = [f.label for f in fields_service.list_for(conn, ctx.viewer.organization_id)]
    return ctx.render("campaign.html", status, headers={"Content-Security-Policy": EDIT_CSP},
                      title=f"Campaign {campaign.name}" if campaign else "New campaign", campaign=campaign,
                      typed=typed, products=products, errors=errors or [], preview_query=_preview_query(typed),
                      notice="Campaign saved." if ctx.arg("done", max_length=10) == "saved" else None,
                      placeholder_warnings=_placeholder_warnings(typed, labels), labels=labels,
                      preview_problems=preview_problems)


@route(router, "GET", "/campaigns")
def list_campaigns(ctx):
    with db.read(ctx.engine) as conn:
        rows = campaigns_service.list_for(conn, ctx.viewer.organization_id)
    return ctx.render("campaigns.html", title="Campaigns", rows=rows)


@route(router, "GET", "/campaigns/new", action="admin")
def new_campaign(ctx):
    return _editor(ctx, _typed(ctx.query) if ctx.query else _from_row_empty(), previewed=bool(ctx.query))


def _from_row_empty() -> dict:
    return {"name": "", "description": "", "products": [], "webpage_style": dict.fromkeys(PAGE_KEYS, ""),
            "email_style": dict.fromkeys(EMAIL_KEYS, "")}


def _problems(exc) -> list[str]:
    """The API model's or the service's problems, named by the form's labels (bulk.in_words)."""
    if isinstance(exc, ValidationError):
        return bulk.describe(bulk.pydantic_locs(exc), labels=bulk.CAMPAIGN_LABELS)
    return bulk.api_error_lines(exc, labels=bulk.CAMPAIGN_LABELS)


def _no_products(typed: dict, row=None) -> list[str]:
    """The form's own guard: a campaign without products cannot be sent with (every order of
    it would be refused, "no products"), unless its automatic product rule (set through the
    API; this form does not offer it) fills it."""
    if typed["products"] or (row is not None and row.auto_add_product_rule):
        return []
    return [f"Products: {bulk.NO_CAMPAIGN_PRODUCTS}."]


@route(router, "POST", "/campaigns/new", action="admin")
def create_campaign(ctx):
    typed = _typed(ctx.form)
    refused = _no_products(typed)
    if refused:
        return _editor(ctx, typed, status=400, errors=refused)
    try:
        body = CreateCampaignIn.model_validate(_body(typed))
        with db.write(ctx.engine) as conn:
            row = campaigns_service.create(conn, ctx.viewer.organization_id, body.model_dump(exclude_unset=True,
                                                                                            mode="json"))
    except ValidationError as exc:
        return _editor(ctx, typed, status=400, errors=_problems(exc))
    except ApiError as exc:
        return _editor(ctx, typed, status=exc.status_code, errors=_problems(exc))
    return ctx.redirect(f"/dashboard/campaigns/{row['id']}?done=saved")


@route(router, "GET", "/campaigns/{campaign_id}", action="admin")
def edit_campaign(ctx, campaign_id: str):
    with db.read(ctx.engine) as conn:
        row = access.owned(conn, ctx.viewer, campaigns, campaign_id)
    previewed = bool(ctx.arg("preview"))
    return _editor(ctx, _typed(ctx.query) if previewed else _from_row(row), campaign=row, previewed=previewed)


@route(router, "POST", "/campaigns/{campaign_id}", action="admin")
def save_campaign(ctx, campaign_id: str):
    with db.read(ctx.engine) as conn:
        row = access.owned(conn, ctx.viewer, campaigns, campaign_id)
    typed = _typed(ctx.form)
    refused = _no_products(typed, row)
    if refused:
        return _editor(ctx, typed, campaign=row, status=400, errors=refused)
    try:
        body = UpdateCampaignIn.model_validate(_body(typed))
        with db.write(ctx.engine) as conn:
            campaigns_service.update(conn, ctx.viewer.organization_id, row.id,
                                     body.model_dump(exclude_unset=True, mode="json"))
    except ValidationError as exc:
        return _editor(ctx, typed, campaign=row, status=400, errors=_problems(exc))
    except ApiError as exc:
        return _editor(ctx, typed, campaign=row, status=exc.status_code, errors=_problems(exc))
    return ctx.redirect(f"/dashboard/campaigns/{row.id}?done=saved")


# --- previews (framed by the editing page) -------------------------------------------------------

def _checked_style(name: str, model, given: dict) -> tuple[dict, list[tuple[tuple, str]]]:
    """The values of one typed style that the API's own model (WebpageStyle, EmailStyle, as
    CreateCampaignIn reads them) accepts, and the problems of those it refuses: a value refused
    is left out (its default shows), never the others with it."""
    problems: list[tuple[tuple, str]] = []
    while given:
        try:
            return model.model_validate(given).model_dump(exclude_none=True, mode="json"), problems
        except ValidationError as exc:
            found = [(loc, message) for loc, message in bulk.pydantic_locs(exc) if loc and loc[0] in given]
            if not found:  # not a value's own problem: nothing typed is kept
                return {}, problems + [((name, *loc), message) for loc, message in bulk.pydantic_locs(exc)]
            problems += [((name, *loc), message) for loc, message in found]
            given = {k: v for k, v in given.items() if k not in {loc[0] for loc, _ in found}}
    return {}, problems


def _checked_styles(typed: dict) -> tuple[dict, dict, list[str]]:
    """(page style, email style, problems in the form's words) of the typed campaign."""
    body = _body(typed)
    page, page_problems = _checked_style("webpage_style", WebpageStyle, body.get("webpage_style") or {})
    email, email_problems = _checked_style("email_style", EmailStyle, body.get("email_style") or {})
    return page, email, bulk.describe(page_problems + email_problems, labels=bulk.CAMPAIGN_LABELS)


def _styles(ctx) -> tuple[dict, dict, list[str]]:
    """The typed styles for the previews: each value the API would accept; a refused one is
    left out (its default shows) and named on the editor (_editor's preview_problems)."""
    typed = _typed(ctx.query)
    page, email, _ = _checked_styles(typed)
    return page, email, typed["products"]


def _framed(html: str, csp: str) -> HTMLResponse:
    headers = security.page_headers()
    headers.update({"Content-Security-Policy": csp, "X-Frame-Options": "SAMEORIGIN"})
    return HTMLResponse(html, headers=headers)


@route(router, "GET", "/campaigns/preview/page", action="admin")
def preview_page(ctx):
    page_style, email_style, products = _styles(ctx)
    with db.read(ctx.engine) as conn:
        page = redemption.preview_page(
            conn, org_name=ctx.viewer.org_name, page_style=page_style, email_style=email_style,
            reward=redemption.SampleReward(products=products, denomination_cents=SAMPLE_CENTS,
                                           currency_code=ctx.viewer.currency_code), settings=ctx.settings)
    html = redemption_templates.get_template("choose.html").render(
        theme=page.theme, page=page, error=None, selected=None, csrf_field="csrf_token", csrf_token="preview",
        any_available=any(o.available for o in page.options), sandbox=ctx.settings.sandbox)
    # The frame is sandboxed without scripts: leave out the page's one script (a copy button).
    html = html.replace('<script src="/static/redeem.js" defer></script>', "")
    csp = security.page_headers([security.style_hash(page.theme)])["Content-Security-Policy"]
    # Framed by the dashboard, and inert: the preview's form cannot be sent.
    return _framed(html, csp.replace("frame-ancestors 'none'", "frame-ancestors 'self'")
                   .replace("form-action 'self'", "form-action 'none'"))


@route(router, "GET", "/campaigns/preview/email", action="admin")
def preview_email(ctx):
    page_style, email_style, _ = _styles(ctx)
    mail = compose.RewardMail(
        reward_id="PREVIEW0000", recipient_name="Alex Recipient", recipient_email="alex@example.com",
        denomination_cents=SAMPLE_CENTS, currency_code=ctx.viewer.currency_code, expires_at=None, language="en",
        delivery_meta=None, email_style=email_style, webpage_style=page_style, field_values={},
        organization_name=ctx.viewer.org_name)
    message = compose.build(mail, link="#preview", mail_from=ctx.settings.mail_from,
                            mail_from_name=ctx.settings.mail_from_name, now=utcnow()).as_message()
    html = message.get_body(preferencelist=("html",)).get_content()
    # An email's HTML carries inline styles, as mail clients need: allowed in this sandboxed frame only.
    return _framed(html, "default-src 'none'; style-src 'unsafe-inline'; img-src https: http: data:; "
                         "frame-ancestors 'self'")
