"""Send rewards: to one recipient, or to every row of a CSV file as one order.

Both end in orders.service.place_order_as_member, the service behind POST /orders (same
validation, transaction, ledger entry, webhooks). Both first show what will happen without
placing anything (preview_order_as_member: the same checks and fee rule): one reward's
summary (amount, fee, total, balance after, approval), or the CSV's preview with each
problem on its row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import APIRouter

from largesse import db
from largesse.campaigns import service as campaigns_service
from largesse.catalog import service as catalog
from largesse.dashboard import access, bulk, forms
from largesse.dashboard.models import uploads
from largesse.dashboard.web import campaign_labels, route
from largesse.errors import ApiError
from largesse.fields import service as fields_service
from largesse.ids import new_id
from largesse.orders import repository
from largesse.orders import service as orders_service
from largesse.timeutil import utcnow

router = APIRouter()
METHODS = (("EMAIL", "Email"), ("LINK", "Link (you share it)"))


def _choices(ctx, conn):
    org = ctx.viewer.organization_id
    products = catalog.list_active(conn)
    query, category = ctx.arg("q", max_length=100).lower(), ctx.arg("category", max_length=40)
    categories = sorted({p.category for p in products})
    shown = [p for p in products if (not category or p.category == category)
             and (not query or query in p.name.lower() or query in (p.description or "").lower())]
    campaigns = campaigns_service.list_for(conn, org)
    return {"products": shown, "categories": categories, "q": ctx.arg("q", max_length=100), "category": category,
            "campaigns": campaigns, "campaign_labels": campaign_labels(campaigns),
            "fields": fields_service.list_for(conn, org), "currencies": _currencies(ctx, products)}


def _currencies(ctx, products) -> list[str]:
    """The reward currencies to offer: the balance's first, then those the active products are
    offered in. A reward in another currency than the balance's is converted by the order's
    rules (forex/conversion.py), as through the API; the summary shows both amounts."""
    own = ctx.viewer.currency_code
    return [own] + sorted({c for p in products for c in (p.currency_codes or [])} - {own})


def _currency(ctx) -> str:
    return ctx.form.get("currency", max_length=3).upper() or ctx.viewer.currency_code


def _form_page(ctx, status: int = 200, errors: list[str] | None = None, **values):
    with db.read(ctx.engine) as conn:
        choices = _choices(ctx, conn)
    form = {"name": "", "email": "", "amount": "", "currency": ctx.viewer.currency_code, "campaign": "",
            "products": [], "method": "EMAIL", "message": "", "fields": {}, **values}
    return ctx.render("send.html", status, title="Send rewards", form=form, errors=errors or [], methods=METHODS,
                      **choices)


@route(router, "GET", "/send", action="send")
def send_form(ctx):
    return _form_page(ctx)


def _entered(ctx, fields=None) -> dict:
    """What was typed on the form (or carried by the summary's hidden fields), as typed; `fields`:
    the organization's custom fields, when the caller has read them already."""
    form = ctx.form
    if fields is None:
        with db.read(ctx.engine) as conn:
            fields = fields_service.list_for(conn, ctx.viewer.organization_id)
    return {"name": form.get("name", max_length=200), "email": form.get("email", max_length=320),
            "amount": form.get("amount", max_length=20), "currency": _currency(ctx),
            "campaign": form.get("campaign", max_length=20),
            "products": form.getlist("products", max_length=20)[:100],
            "method": form.get("method", "EMAIL", max_length=10).upper(),
            "message": form.get("message", max_length=5000),
            "fields": {f.id: form.get(f"field_{f.id}") for f in fields}}


def _custom(entered: dict, fields) -> tuple[list[dict], list[str]]:
    """The custom fields given, as the API's custom_fields, and their labels in the same order
    (a problem of custom_fields.1 is named by the second one's label)."""
    given = [(fid, v) for fid, v in entered["fields"].items() if v]
    labels = {f.id: f.label for f in fields}
    return [{"id": fid, "value": v} for fid, v in given], [labels.get(fid, "Custom field") for fid, _ in given]


def _order(entered: dict, fields, external_id: str | None = None):
    """(the API's CreateOrderIn, []) or (None, problems): the translation only (bulk.reward_in)."""
    custom, labels = _custom(entered, fields)
    reward, problems = bulk.reward_in(
        name=entered["name"], email=entered["email"], amount_text=entered["amount"], currency=entered["currency"],
        products=entered["products"],
        campaign_id=entered["campaign"] or None, method=entered["method"], message=entered["message"] or None,
        custom_fields=custom, field_labels=labels)
    if reward is None:
        return None, problems
    return bulk.order_in([reward], external_id=external_id, single=True), []


def _quote(ctx, entered: dict, fields):
    """(body, preview, problems): the service's own preview (preview_order_as_member: the _plan
    that place_order_as_member runs, without writing) of the order the form describes."""
    body, problems = _order(entered, fields)
    if body is None:
        return None, None, problems
    preview = orders_service.preview_order_as_member(ctx.engine, settings=ctx.settings,
                                                     organization_id=ctx.viewer.organization_id, body=body)
    return body, preview, bulk.describe(preview.problems, field_labels=_custom(entered, fields)[1])


# The summary's idempotency token, drawn when the summary is shown and sent back by its "Send":
# it is the order's external_id, so a double click or a repeated POST is the API's replay of
# the same order (one order, one debit), never a second one.
_TOKEN = re.compile(r"dashboard-send-[0-9A-Z]{10,40}")


def _new_token() -> str:
    return f"dashboard-send-{new_id()}"


def _summary(ctx, entered: dict, fields, preview, token: str, *, notice: str | None = None):
    org = ctx.viewer.organization_id
    with db.read(ctx.engine) as conn:
        products = catalog.get_many_cached(conn, set(entered["products"]))
        campaign = campaigns_service.get(conn, org, entered["campaign"]) if entered["campaign"] else None
    hidden = [(k, entered[k]) for k in ("name", "email", "amount", "currency", "campaign", "method", "message")]
    hidden += [("products", p) for p in entered["products"]]
    hidden += [(f"field_{fid}", v) for fid, v in entered["fields"].items() if v]
    hidden += [("token", token), ("quoted_total", str(preview.total_cents))]
    return ctx.render("send_confirm.html", title="Check and send", form=entered, preview=preview,
                      products=[products[p] for p in entered["products"] if p in products], campaign=campaign,
                      field_values=[(f.label, entered["fields"][f.id]) for f in fields if entered["fields"].get(f.id)],
                      method_text=dict(METHODS).get(entered["method"], entered["method"]), hidden=hidden,
                      reward_value=forms.read_amount(entered["amount"]),
                      notice=notice)


def _checked(ctx):
    """(entered, fields, preview, None) for a form the service would take, else (.., the form
    page again with the problems): the first step of both the summary and its Send."""
    with db.read(ctx.engine) as conn:
        fields = fields_service.list_for(conn, ctx.viewer.organization_id)
    entered = _entered(ctx, fields)
    _, preview, problems = _quote(ctx, entered, fields)
    refused = _form_page(ctx, 400, problems, **entered) if problems else None
    return entered, fields, preview, refused


@route(router, "POST", "/send", action="send")
def send_check(ctx):
    """The form's submit: nothing is placed; the summary (fee, total, balance after, approval)."""
    entered, fields, preview, refused = _checked(ctx)
    return refused or _summary(ctx, entered, fields, preview, _new_token())


@route(router, "POST", "/send/edit", action="send")
def send_edit(ctx):
    """The summary's "Edit": the form again, with everything as typed."""
    return _form_page(ctx, **_entered(ctx))


@route(router, "POST", "/send/confirm", action="send")
def send_one(ctx):
    """The summary's "Send": places the order the summary showed, once."""
    entered, fields, preview, refused = _checked(ctx)
    if refused:
        return refused
    token = ctx.form.get("token", max_length=60)
    if not _TOKEN.fullmatch(token):
        return _summary(ctx, entered, fields, preview, _new_token(), notice="Check the order again, then send it.")
    if ctx.form.get("quoted_total", max_length=20) != str(preview.total_cents):
        return _summary(ctx, entered, fields, preview, token, notice="The total changed since this page was shown "
                        "(the fees or the amounts changed). Check the new total, then send again.")
    body, _ = _order(entered, fields, external_id=token)
    try:
        placed = orders_service.place_order_as_member(
            ctx.engine, settings=ctx.settings, organization_id=ctx.viewer.organization_id, body=body)
    except ApiError as exc:
        return _form_page(ctx, exc.status_code, bulk.api_error_lines(exc, field_labels=_custom(entered, fields)[1]),
                          **entered)
    target = f"/dashboard/orders/{placed.order['id']}"
    # A LINK reward: its link, which only this response holds, on the order's page once. A replay
    # (the same Send posted again) hands over a fresh link, the API's rule, as the browser shows
    # only the last response.
    links = [{"reward": r["id"], "link": r["delivery"]["link"]} for r in placed.order["rewards"]
             if (r.get("delivery") or {}).get("link")]
    if links:
        return ctx.redirect_with_flash(target, "links", links)
    return ctx.redirect(target)


# --- CSV ----------------------------------------------------------------------------------------

@route(router, "GET", "/send/bulk", action="send")
def bulk_form(ctx):
    with db.read(ctx.engine) as conn:
        choices = _choices(ctx, conn)
    return ctx.render("bulk.html", title="Send rewards from a CSV file", errors=[], methods=METHODS, **choices)


@route(router, "POST", "/send/bulk", action="send", upload=True)
def bulk_upload(ctx):
    filename, content = ctx.form.files.get("file", ("", b""))
    options = {"products": ctx.form.getlist("products", max_length=20)[:100],
               "campaign": ctx.form.get("campaign", max_length=20), "message": ctx.form.get("message", max_length=5000),
               "method": ctx.form.get("method", "EMAIL", max_length=10).upper(), "currency": _currency(ctx)}
    problem = _file_problem(content)
    if not problem:
        with db.read(ctx.engine) as conn:
            fields = fields_service.list_for(conn, ctx.viewer.organization_id)
        problem = _values_problem(bulk.read_csv(content, fields))
    if problem:
        with db.read(ctx.engine) as conn:
            choices = _choices(ctx, conn)
        return ctx.render("bulk.html", 400, title="Send rewards from a CSV file", methods=METHODS,
                          errors=[problem], **choices)
    upload_id = new_id()
    now = utcnow()
    with db.write(ctx.engine) as conn:
        bulk.prune_uploads(conn, now=now, organization_id=ctx.viewer.organization_id)
        conn.execute(uploads.insert().values(
            id=upload_id, organization_id=ctx.viewer.organization_id, member_id=ctx.viewer.member_id,
            filename=(filename or "upload.csv")[:200], sha256=bulk.digest(content),
            content=content.decode("utf-8-sig"), rows=content.count(b"\n"), options=options,
            created_at=now))
    return ctx.redirect(f"/dashboard/send/bulk/{upload_id}")


def _file_problem(content: bytes) -> str | None:
    if not content:
        return "Choose a CSV file to upload."
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError:
        return "The file is not UTF-8 text. Save it as CSV (UTF-8) and upload it again."
    if "\x00" in text:
        return "The file is not a CSV text file."
    return None


# Checking a file costs about 10 µs for each custom-field value it holds, on top of each row's
# own check (a 5,000-row file without custom fields: 0.3 s): each value is validated on its
# own by the API's model (bulk.build_rewards) and by the order's plan (orders.service). 4,000
# rows x 100 custom fields took 4.5 s for each view of the preview, so a file holds at most
# MAX_FIELD_VALUES of them (5,000 rows with 5 custom fields: about 0.6 s).
MAX_FIELD_VALUES = 25_000


def _values_problem(sheet: bulk.Sheet) -> str | None:
    """Why the file holds more custom-field values than one upload may check, else None."""
    count = sum(len(row.values) for row in sheet.rows)
    if count <= MAX_FIELD_VALUES:
        return None
    widest = max(len(row.values) for row in sheet.rows)
    return (f"The file has {count:,} custom-field values ({len(sheet.rows):,} rows); one file can have at most "
            f"{MAX_FIELD_VALUES:,} (for example 5,000 rows with 5 custom fields). Split it into files of at "
            f"most {MAX_FIELD_VALUES // widest:,} rows and upload each one.")


@dataclass
class Placed:
    """The orders an upload's file was sent as: `first`, the file with these choices (any upload
    of it), and `again`, this upload sent again as a new order on the sender's word."""
    first: object | None
    again: object | None
    legacy: bool = False  # `first` was placed before the choices counted: its own may have differed


def _placed(conn, org: str, upload) -> Placed:
    """The orders of this upload's file (Placed). An upload is sent again only after its file was
    first sent, so without a first order there is no second to look for."""
    first = repository.get_order(conn, org, bulk.external_id_for(upload.sha256, upload.options))
    legacy = False
    if first is None:
        first = repository.get_order(conn, org, bulk.legacy_external_id(upload.sha256))
        legacy = first is not None
    if first is None:
        return Placed(None, None)
    again = repository.get_order(conn, org, bulk.external_id_for(upload.sha256, upload.options, again=upload.id))
    return Placed(first, again, legacy)


def _read(ctx, upload_id: str):
    """The upload, its rows (each with its RewardIn or its problems), the orders it was placed
    as (Placed), and its campaign. The rows are checked one by one here; the order as a
    whole by _preview (the GET) or by placing it (the POST), never both."""
    org = ctx.viewer.organization_id
    with db.read(ctx.engine) as conn:
        upload = access.owned(conn, ctx.viewer, uploads, upload_id)
        if upload.created_at < bulk.upload_cutoff(utcnow()):  # kept UPLOAD_DAYS (bulk.py)
            raise access.NotFoundPage()
        fields = fields_service.list_for(conn, org)
        placed = _placed(conn, org, upload)
        campaign = campaigns_service.get(conn, org, upload.options.get("campaign")) if (
            upload.options or {}).get("campaign") else None
    options = upload.options or {}
    sheet = bulk.read_csv(upload.content.encode("utf-8"), fields)
    too_many = _values_problem(sheet)  # an upload stored before the limit, or fields added since
    if too_many:
        return upload, bulk.Sheet([], [too_many], sheet.ignored_columns), placed, campaign
    bulk.build_rewards(sheet, fields, products=options.get("products") or [], campaign_id=options.get("campaign"),
                       message=options.get("message") or None, method=options.get("method") or "EMAIL",
                       currency=options.get("currency") or ctx.viewer.currency_code)
    return upload, sheet, placed, campaign


def _preview(ctx, sheet: bulk.Sheet):
    """The service's preview of the one order (preview_order_as_member), its problems put
    back on the rows; None while a row or the file has a problem of its own."""
    good = [r for r in sheet.rows if r.reward is not None]
    if not good or sheet.problems:
        return None
    preview = orders_service.preview_order_as_member(
        ctx.engine, settings=ctx.settings, organization_id=ctx.viewer.organization_id,
        body=bulk.order_in([r.reward for r in good]))
    by_row, general = bulk.problems_by_row(preview.problems, lambda index: list(good[index].values))
    for index, row in enumerate(good):
        row.problems.extend(by_row.get(index, []))
    sheet.problems.extend(general)
    return preview


@route(router, "GET", "/send/bulk/{upload_id}", action="send")
def bulk_preview(ctx, upload_id: str):
    upload, sheet, placed, campaign = _read(ctx, upload_id)
    preview = _preview(ctx, sheet)
    bad = [r for r in sheet.rows if r.problems]
    ready = preview is not None and not bad and not sheet.problems
    enough = ready and preview.affordable
    return ctx.render("bulk_preview.html", title="Check your file", upload=upload, sheet=sheet, preview=preview,
                      bad=bad, ready=ready, enough=enough, placed=placed, campaign=campaign, error=None)


@route(router, "POST", "/send/bulk/{upload_id}", action="send")
def bulk_place(ctx, upload_id: str):
    """The preview's "Place order": placing runs the order's own checks (the preview's), so
    they are not run twice; a refusal is explained with the preview, computed then."""
    upload, sheet, placed, campaign = _read(ctx, upload_id)
    if sheet.problems or any(r.problems for r in sheet.rows) or not sheet.rows:
        return ctx.redirect(f"/dashboard/send/bulk/{upload_id}")
    # "Send it again" (the preview offers it once the file went out with these choices): a new
    # order, still one however often that button is pressed. Without it, a file already sent is
    # that order (whichever way its external_id was made), never a second one.
    again = upload.id if placed.first is not None and ctx.form.get("again", max_length=1) == "1" else None
    if placed.first is not None and again is None:
        return ctx.redirect(f"/dashboard/orders/{placed.first.id}")
    body = bulk.order_in([r.reward for r in sheet.rows],
                         external_id=bulk.external_id_for(upload.sha256, upload.options, again=again))
    try:
        order = orders_service.place_order_as_member(ctx.engine, settings=ctx.settings,
                                                     organization_id=ctx.viewer.organization_id, body=body)
    except ApiError as exc:
        preview = _preview(ctx, sheet)
        if sheet.problems or any(r.problems for r in sheet.rows):
            return ctx.redirect(f"/dashboard/send/bulk/{upload_id}")  # the preview lists them by line
        return ctx.render("bulk_preview.html", exc.status_code, title="Check your file", upload=upload, sheet=sheet,
                          preview=preview, bad=[], ready=False, enough=False, placed=placed, campaign=campaign,
                          error=_placement_error(exc, sheet))
    return ctx.redirect(f"/dashboard/orders/{order.order['id']}")


def _placement_error(exc: ApiError, sheet) -> str:
    """The service's refusal of the order, in words, each row's problem named by its line."""
    pairs = [(tuple(int(p) if str(p).isdigit() else p for p in loc), message)
             for loc, message in bulk.payload_locs(exc.payload)]
    known = len(sheet.rows)
    by_row, general = bulk.problems_by_row(pairs, lambda i: list(sheet.rows[i].values) if i < known else ())
    lines = general + [f"Line {sheet.rows[i].line}: {m}" if i < known else m
                       for i, messages in by_row.items() for m in messages]
    return "; ".join(lines) or exc.message
