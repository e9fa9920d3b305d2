"""The ceiling: a bare ASGI app doing what POST /orders must do, and nothing else.

No framework: uvicorn (uvloop + httptools) calls `app` directly; JSON with orjson. Per request:

1. check the key: one SELECT by its SHA-256 (joined to its organization and balance);
2. validate the JSON body (single reward, EMAIL delivery; product and denomination band from
   the catalog, read once at start; sandbox rule: the recipient is a member of the org);
3. one transaction with the overdraft guard (conditional UPDATE ... RETURNING) that inserts
   the order, the reward, the ledger entry and the outbox (delivery job) row, into the same
   Largesse schema (created by largesse's own migrations).

SQLite: sqlite3 on the event loop thread (no thread hop), WAL, synchronous=NORMAL,
BEGIN IMMEDIATE, busy_timeout. PostgreSQL: psycopg 3 async connections (what the project
already depends on), a pool of 4 per worker, autocommit; the member check, the guard and the
inserts are one statement (a data-modifying CTE), so the order costs 2 round trips.

Run: python -m bench.baseline --port 8001 --workers 1 --database-url sqlite:///x.sqlite3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import sqlite3
from datetime import UTC, datetime, timedelta

import orjson

from largesse.ids import new_id

DB_ENV = "BENCH_BASELINE_DB"
PG_POOL_SIZE = 4
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
EMAIL = re.compile(r"^[^@\s\"'<>(),;:\\]+@" + _LABEL + r"(?:\." + _LABEL + r")+$")

AUTH_SQL = (
    "SELECT k.permission, o.id, o.currency_code, o.fee_basis_points, o.fee_flat_cents, o.reward_expiry_days, f.id "
    "FROM api_keys k JOIN organizations o ON o.id = k.organization_id "
    "JOIN funding_sources f ON f.organization_id = o.id AND f.method = 'balance' "
    "WHERE k.key_hash = {p} AND k.revoked_at IS NULL"
)


class Invalid(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def utcnow() -> datetime:
    now = datetime.now(UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def to_wire(cents: int):
    return cents // 100 if cents % 100 == 0 else round(cents / 100, 2)


def email_key(email: str) -> str:
    local, _, domain = email.strip().lower().rpartition("@")
    return f"{local.split('+', 1)[0]}@{domain}"


def parse(body: bytes, bands: dict[str, tuple[int, int]], currency: str) -> dict:
    """The single-reward order a request asks for, validated; Invalid otherwise."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Invalid(400, "Malformed JSON body") from None
    if not isinstance(data, dict) or not isinstance(data.get("payment"), dict):
        raise Invalid(400, "payment is required")
    if str(data["payment"].get("funding_source_id", "")).upper() != "BALANCE":
        raise Invalid(400, "payment.funding_source_id must be balance")
    reward = data.get("reward")
    if not isinstance(reward, dict) or "rewards" in data:
        raise Invalid(400, "send exactly one reward")
    products = reward.get("products")
    if not isinstance(products, list) or not products or not all(isinstance(p, str) for p in products):
        raise Invalid(400, "reward.products is required")
    value = reward.get("value")
    denomination = value.get("denomination") if isinstance(value, dict) else None
    if isinstance(denomination, bool) or not isinstance(denomination, int | float):
        raise Invalid(400, "reward.value.denomination must be a number")
    cents = round(denomination * 100)
    if abs(cents - denomination * 100) > 1e-6 or cents <= 0:
        raise Invalid(400, "reward.value.denomination must be positive with at most 2 decimals")
    if (value.get("currency_code") or currency).upper() != currency:
        raise Invalid(400, f"reward.value.currency_code must be {currency}")
    for pid in products:
        band = bands.get(pid)
        if band is None:
            raise Invalid(404, f"product {pid} not found")
        if not band[0] <= cents <= band[1]:
            raise Invalid(400, "reward.value.denomination is out of the product's range")
    recipient = reward.get("recipient")
    if not isinstance(recipient, dict):
        raise Invalid(400, "reward.recipient is required")
    name, email = recipient.get("name"), recipient.get("email")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise Invalid(400, "reward.recipient.name can't be blank")
    if not isinstance(email, str) or len(email) > 320 or not EMAIL.match(email.strip()):
        raise Invalid(400, "reward.recipient.email is not a valid email address")
    delivery = reward.get("delivery")
    method = (delivery.get("method") or "EMAIL") if isinstance(delivery, dict) else None
    if method != "EMAIL":
        raise Invalid(400, "the baseline handles EMAIL delivery only")
    external_id = data.get("external_id")
    if external_id is not None and (not isinstance(external_id, str) or not 0 < len(external_id) <= 200):
        raise Invalid(400, "external_id must be a string of at most 200 characters")
    return {"products": list(dict.fromkeys(products)), "cents": cents, "name": name.strip(),
            "email": email.strip(), "email_key": email_key(email), "external_id": external_id,
            "request_hash": hashlib.sha256(body).hexdigest() if external_id is not None else None}


def order_wire(order_id: str, reward_id: str, req: dict, currency: str, now: datetime, expires) -> bytes:
    amount = to_wire(req["cents"])
    return orjson.dumps({"order": {
        "id": order_id, "external_id": req["external_id"], "campaign_id": None, "created_at": iso(now),
        "status": "EXECUTED", "channel": "API",
        "payment": {"subtotal": amount, "total": amount, "fees": 0, "discount": 0, "currency_code": currency},
        "rewards": [{
            "id": reward_id, "order_id": order_id, "created_at": iso(now),
            "value": {"denomination": amount, "currency_code": currency},
            "recipient": {"name": req["name"], "email": req["email"]},
            "delivery": {"method": "EMAIL", "status": "PENDING"}, "products": req["products"],
            "campaign_id": None, "custom_fields": [], "expires_at": iso(expires),
        }],
    }})


# --- SQLite ---------------------------------------------------------------------------------------

class SqliteStore:
    def __init__(self, path: str):
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=30000"):
            self.conn.execute(f"PRAGMA {pragma}")
        self.auth_sql = AUTH_SQL.format(p="?")

    async def bands(self) -> dict[str, tuple[int, int]]:
        return _bands(self.conn.execute("SELECT id, skus FROM products WHERE active").fetchall())

    async def authenticate(self, key_hash: str):
        return self.conn.execute(self.auth_sql, (key_hash,)).fetchone()

    async def place(self, caller, req: dict) -> tuple[int, bytes]:
        _, org, currency, fee_bp, fee_flat, expiry_days, fs_id = caller
        c = self.conn
        if c.execute("SELECT 1 FROM members WHERE organization_id = ? AND email_key = ?",
                     (org, req["email_key"])).fetchone() is None:
            return 400, _error("in the sandbox, rewards can only be sent to members of your organization")
        now = utcnow()
        stamp = now.isoformat(sep=" ", timespec="microseconds")
        expires = now + timedelta(days=expiry_days) if expiry_days else None
        order_id, reward_id = new_id(), new_id()
        cents = req["cents"]
        fee = cents * fee_bp // 10_000 + fee_flat
        total = cents + fee
        c.execute("BEGIN IMMEDIATE")
        try:
            if req["external_id"] is not None and c.execute(
                    "SELECT 1 FROM orders WHERE organization_id = ? AND external_id = ?",
                    (org, req["external_id"])).fetchone() is not None:
                c.execute("ROLLBACK")
                return 409, _error("external_id already used")
            row = c.execute(
                "UPDATE funding_sources SET available_cents = available_cents - ? "
                "WHERE id = ? AND available_cents >= ? RETURNING available_cents", (total, fs_id, total)).fetchone()
            if row is None:
                c.execute("ROLLBACK")
                return 402, _error("Insufficient funds in the balance for this order")
            c.execute(
                "INSERT INTO orders (id, organization_id, external_id, request_hash, campaign_id, status, channel, "
                "funding_source_id, currency_code, subtotal_cents, fees_cents, discount_cents, total_cents, "
                "refund_cents, created_at) VALUES (?, ?, ?, ?, NULL, 'EXECUTED', 'API', ?, ?, ?, ?, 0, ?, 0, ?)",
                (order_id, org, req["external_id"], req["request_hash"], fs_id, currency, cents, fee, total, stamp))
            c.execute(
                "INSERT INTO rewards (id, organization_id, order_id, campaign_id, products, denomination_cents, "
                "fee_cents, currency_code, recipient_name, recipient_email, delivery_method, delivery_status, "
                "status, expires_at, created_at) "
                "VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, 'EMAIL', 'PENDING', 'ACTIVE', ?, ?)",
                (reward_id, org, order_id, orjson.dumps(req["products"]).decode(), cents, fee, currency,
                 req["name"], req["email"],
                 expires.isoformat(sep=" ", timespec="microseconds") if expires else None, stamp))
            c.execute(
                "INSERT INTO ledger_entries (funding_source_id, organization_id, amount_cents, balance_after_cents, "
                "kind, order_id, created_at) VALUES (?, ?, ?, ?, 'order', ?, ?)",
                (fs_id, org, -total, row[0], order_id, stamp))
            c.execute(
                "INSERT INTO jobs (kind, organization_id, reward_id, status, attempts, max_attempts, run_after, "
                "created_at, updated_at) VALUES ('deliver_reward', ?, ?, 'queued', 0, 8, ?, ?, ?)",
                (org, reward_id, stamp, stamp, stamp))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return 200, order_wire(order_id, reward_id, req, currency, now, expires)


def _bands(rows) -> dict[str, tuple[int, int]]:
    bands = {}
    for pid, skus in rows:
        for sku in orjson.loads(skus) if isinstance(skus, str | bytes) else skus:
            if sku["currency_code"] == "USD":
                bands[pid] = (sku["min_cents"], sku["max_cents"])
    return bands


# --- PostgreSQL -----------------------------------------------------------------------------------

PG_ORDER_SQL = """
WITH debit AS (
    UPDATE funding_sources SET available_cents = available_cents - %(total)s
    WHERE id = %(fs)s AND available_cents >= %(total)s
      AND EXISTS (SELECT 1 FROM members WHERE organization_id = %(org)s AND email_key = %(email_key)s)
      AND NOT EXISTS (SELECT 1 FROM orders WHERE organization_id = %(org)s AND external_id = %(external_id)s)
    RETURNING available_cents
), o AS (
    INSERT INTO orders (id, organization_id, external_id, request_hash, status, channel,
                        funding_source_id, currency_code, subtotal_cents, fees_cents, discount_cents,
                        total_cents, refund_cents, created_at)
    SELECT %(order_id)s, %(org)s, %(external_id)s, %(request_hash)s, 'EXECUTED', 'API', %(fs)s, %(currency)s,
           %(cents)s, %(fee)s, 0, %(total)s, 0, %(now)s
    FROM debit
    RETURNING id
), r AS (
    INSERT INTO rewards (id, organization_id, order_id, products, denomination_cents, fee_cents, currency_code,
                         recipient_name, recipient_email, delivery_method, delivery_status, status, expires_at,
                         created_at)
    SELECT %(reward_id)s, %(org)s, o.id, %(products)s::json, %(cents)s, %(fee)s, %(currency)s, %(name)s,
           %(email)s, 'EMAIL', 'PENDING', 'ACTIVE', %(expires)s::timestamp, %(now)s
    FROM o
    RETURNING id
), l AS (
    INSERT INTO ledger_entries (funding_source_id, organization_id, amount_cents, balance_after_cents, kind,
                                order_id, created_at)
    SELECT %(fs)s, %(org)s, -%(total)s::bigint, debit.available_cents, 'order', %(order_id)s, %(now)s FROM debit
), j AS (
    INSERT INTO jobs (kind, organization_id, reward_id, status, attempts, max_attempts, run_after, created_at,
                      updated_at)
    SELECT 'deliver_reward', %(org)s, r.id, 'queued', 0, 8, %(now)s, %(now)s, %(now)s FROM r
)
SELECT available_cents FROM debit
"""


class PgStore:
    def __init__(self, url: str):
        self.url = url.replace("postgresql+psycopg://", "postgresql://")
        self.pool: asyncio.Queue | None = None
        self.auth_sql = AUTH_SQL.format(p="%s")

    async def _pool(self) -> asyncio.Queue:
        if self.pool is None:
            import psycopg

            pool: asyncio.Queue = asyncio.Queue()
            for _ in range(PG_POOL_SIZE):
                pool.put_nowait(await psycopg.AsyncConnection.connect(self.url, autocommit=True))
            self.pool = pool
        return self.pool

    async def _fetchone(self, sql: str, params):
        pool = await self._pool()
        conn = await pool.get()
        try:
            cur = await conn.execute(sql, params)
            return await cur.fetchone()
        finally:
            pool.put_nowait(conn)

    async def bands(self) -> dict[str, tuple[int, int]]:
        pool = await self._pool()
        conn = await pool.get()
        try:
            cur = await conn.execute("SELECT id, skus FROM products WHERE active")
            return _bands(await cur.fetchall())
        finally:
            pool.put_nowait(conn)

    async def authenticate(self, key_hash: str):
        return await self._fetchone(self.auth_sql, (key_hash,))

    async def place(self, caller, req: dict) -> tuple[int, bytes]:
        _, org, currency, fee_bp, fee_flat, expiry_days, fs_id = caller
        now = utcnow()
        expires = now + timedelta(days=expiry_days) if expiry_days else None
        order_id, reward_id = new_id(), new_id()
        cents = req["cents"]
        fee = cents * fee_bp // 10_000 + fee_flat
        params = {"total": cents + fee, "fs": fs_id, "org": org, "email_key": req["email_key"], "order_id": order_id,
                  "currency": currency, "cents": cents, "fee": fee, "now": now, "reward_id": reward_id,
                  "products": orjson.dumps(req["products"]).decode(), "name": req["name"], "email": req["email"],
                  "expires": expires, "external_id": req["external_id"], "request_hash": req["request_hash"]}
        row = await self._fetchone(PG_ORDER_SQL, params)
        if row is None:
            member = await self._fetchone("SELECT 1 FROM members WHERE organization_id = %s AND email_key = %s",
                                          (org, req["email_key"]))
            if member is None:
                return 400, _error("in the sandbox, rewards can only be sent to members of your organization")
            if req["external_id"] is not None:
                return 409, _error("external_id already used")
            return 402, _error("Insufficient funds in the balance for this order")
        return 200, order_wire(order_id, reward_id, req, currency, now, expires)


# --- ASGI -----------------------------------------------------------------------------------------

def _error(message: str) -> bytes:
    return orjson.dumps({"errors": {"message": message, "payload": {}}})


JSON_HEADERS = [(b"content-type", b"application/json")]


async def _send(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def create_app():
    url = os.environ[DB_ENV]
    store = SqliteStore(url.split(":///", 1)[1]) if url.startswith("sqlite") else PgStore(url)
    state: dict = {}

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["bands"] = await store.bands()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/healthz":
            return await _send(send, 200, b'{"status":"ok"}')
        if path != "/api/v2/orders" or method != "POST":
            return await _send(send, 404, _error(f"No route for {method} {path}"))
        authorization = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        scheme, _, key = authorization.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return await _send(send, 401, _error("Missing Authorization header"))
        caller = await store.authenticate(hashlib.sha256(key.strip().encode()).hexdigest())
        if caller is None:
            return await _send(send, 401, _error("Invalid or revoked API key"))
        if caller[0] == "read_only":
            return await _send(send, 403, _error("This API key is read-only"))
        try:
            req = parse(await _body(receive), state["bands"], caller[2])
        except Invalid as exc:
            return await _send(send, exc.status, _error(exc.message))
        status, body = await store.place(caller, req)
        return await _send(send, status, body)

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--database-url", required=True)
    args = parser.parse_args(argv)
    os.environ[DB_ENV] = args.database_url
    uvicorn.run("bench.baseline:create_app", factory=True, host="127.0.0.1", port=args.port, workers=args.workers,
                loop="uvloop", http="httptools", log_level="warning", access_log=False, lifespan="on")


if __name__ == "__main__":
    main()
