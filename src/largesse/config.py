"""Settings, read once from LARGESSE_* environment variables.

Kept as a plain frozen dataclass: every setting is documented in the README, and a
test can build its own Settings without touching the process environment.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ENVIRONMENTS = ("sandbox", "production")
TIMESTAMP_FORMATS = ("auto", "spec", "iso8601")


def _default_database_url() -> str:
    path = Path("var") / "largesse.sqlite3"
    return f"sqlite:///{path}"


@dataclass(frozen=True)
class Settings:
    database_url: str = field(default_factory=_default_database_url)
    environment: str = "sandbox"
    public_url: str = "http://127.0.0.1:8000"
    # "spec": GET /rewards shows created_at as "YYYY-MM-DD HH:MM:SS UTC" (the interface
    # specification); "iso8601": as everywhere else (what the tremendous-python client parses).
    reward_list_timestamps: str = "auto"
    smtp_url: str | None = None
    mail_dir: str = "var/mail"
    mail_from: str = "rewards@largesse.localhost"
    mail_from_name: str = "Largesse Rewards"
    sms_url: str | None = None
    run_worker: bool = True
    # POST /rewards/{id}/cancel: only rewards whose delivery failed (API.md §2.5), or, with this
    # set, any unredeemed, unexpired reward (docs/delivery.md, "Cancel").
    cancel_any_unredeemed: bool = False
    # Delivery worker processes that `largesse serve` supervises (delivery/supervisor.py), and
    # their niceness: background work that yields the CPU to the API when both want it (0: none).
    delivery_processes: int = 1
    delivery_nice: int = 10
    # How long supervised delivery may defer to a burst of requests before it catches up
    # (delivery/yielding.py; 0: never defer).
    delivery_yield_seconds: float = 10.0
    # Delivery worker (docs/delivery.md): threads per process, polling, leases, retries.
    worker_concurrency: int = 2
    worker_poll_seconds: float = 1.0
    # Threads of the webhook lane per worker (email threads never wait on webhook receivers).
    webhook_concurrency: int = 8
    # A lease is renewed by the worker's heartbeat every lease/4 while the job runs; a dead
    # worker's jobs run again about one lease after it died.
    job_lease_seconds: float = 10.0
    # Longest wait between a worker's attempts to reach a database that is down.
    worker_backoff_max_seconds: float = 30.0
    job_retry_base_seconds: float = 30.0
    job_retry_max_seconds: float = 3600.0
    expire_interval_seconds: float = 60.0
    # Days a finished (done or dead) job is kept after its last run; the expiry sweep deletes
    # older ones (delivery/jobs.prune_finished). 0 keeps every job.
    job_retention_days: int = 30
    smtp_timeout_seconds: float = 30.0
    # PEM file of extra CA certificates to trust for the SMTP server's certificate (a private
    # CA); verification is never turned off. SSL_CERT_FILE replaces the system bundle instead.
    smtp_ca_file: str | None = None
    reward_expiry_days: int | None = None
    secret_key: str | None = None
    # Outgoing webhooks (docs/webhooks.md): overall deadline of one POST; private targets.
    webhook_timeout_seconds: float = 10.0
    webhook_allow_private: bool = False
    # API requests per minute per key and per organization, shared by all processes (0: off).
    # ratelimit.py: counted in memory, synced with the database every api_rate_limit_sync_seconds.
    api_rate_limit_per_key: int = 60_000
    api_rate_limit_per_org: int = 120_000
    api_rate_limit_sync_seconds: float = 1.0
    # The redemption pages' limits (redemption/ratelimit.py, docs/redemption.md): requests per
    # window per client address and per link, redemption attempts per link, the window.
    redeem_limit_per_ip: int = 60
    redeem_limit_per_token: int = 30
    redeem_posts_per_token: int = 10
    redeem_window_seconds: int = 60
    # Operations (docs/operations.md): log lines as "text" or "json"; how long an API request
    # waits for the database (connect, locks, SQLite busy) before answering 503; one statement's cap.
    log_format: str = "text"
    log_level: str = "INFO"
    db_timeout_seconds: float = 1.5
    db_statement_timeout_seconds: float = 10.0
    # FastAPI's own OpenTelemetry instrumentation, for a process with an OpenTelemetry SDK
    # configured (app._fastapi_telemetry); off, it costs nothing per request.
    opentelemetry: bool = False
    # Requests that may use the database at once, shared by the API processes of one `largesse
    # serve` (api_processes, which serve sets): see db_slots. Default: 8 per CPU core.
    db_concurrency: int = field(default_factory=lambda: _default_db_concurrency())
    api_processes: int = 1

    @property
    def db_slots(self) -> int:
        """Requests of one API process that may use the database at once: its share of
        db_concurrency, 2 to 8. Each slot is a PostgreSQL connection in use, and PostgreSQL's
        CPU per order grows with the connections that take turns (docs/benchmarks.md, issue 9
        seventh pass: 2 cores, 4 processes of 8 slots spent 0.69-0.72 ms of PostgreSQL CPU per
        order, of 4 slots 0.62-0.64, 2 processes of 8 0.57-0.61); one process gains nothing
        above 8 (1,297 orders/s with 16 against 1,306 with 8); below 2, requests wait on each
        other's round trips."""
        return max(2, min(8, self.db_concurrency // max(1, self.api_processes)))

    @property
    def sandbox(self) -> bool:
        return self.environment == "sandbox"

    @property
    def secret_keys(self) -> list[str]:
        """LARGESSE_SECRET_KEY as a list: comma-separated keys, the first one current (rotation)."""
        return [k.strip() for k in (self.secret_key or "").split(",") if k.strip()]

    def to_env(self) -> dict[str, str]:
        """These settings as LARGESSE_* variables (from_env(to_env()) gives them back): how a
        server hands its settings to the delivery processes it starts."""
        env = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is None:
                continue
            env[f"LARGESSE_{name.upper()}"] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return env

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def get(name: str, default=None):
            value = env.get(f"LARGESSE_{name}")
            return default if value in (None, "") else value

        def seconds(name: str, default: str, *, zero: bool = False) -> float:
            return _seconds(get(name, default), name, zero=zero)

        def count(name: str, default: str, minimum: int, maximum: int | None = None) -> int:
            return _count(get(name, default), name, minimum, maximum)

        environment = get("ENVIRONMENT", "sandbox").lower()
        if environment not in ENVIRONMENTS:
            raise ValueError(f"LARGESSE_ENVIRONMENT must be one of {ENVIRONMENTS}, not {environment!r}")
        timestamps = get("REWARD_LIST_TIMESTAMPS", "auto").lower()
        if timestamps not in TIMESTAMP_FORMATS:
            raise ValueError(f"LARGESSE_REWARD_LIST_TIMESTAMPS must be one of {TIMESTAMP_FORMATS}")
        return cls(
            database_url=get("DATABASE_URL") or _default_database_url(),
            environment=environment,
            public_url=_public_url(get("PUBLIC_URL", "http://127.0.0.1:8000")),
            reward_list_timestamps=timestamps,
            smtp_url=get("SMTP_URL"),
            mail_dir=get("MAIL_DIR", "var/mail"),
            mail_from=_mail_from(get("MAIL_FROM", "rewards@largesse.localhost")),
            mail_from_name=get("MAIL_FROM_NAME", "Largesse Rewards"),
            sms_url=get("SMS_URL"),
            run_worker=_flag(get("RUN_WORKER", "1"), "RUN_WORKER"),
            cancel_any_unredeemed=_flag(get("CANCEL_ANY_UNREDEEMED", "0"), "CANCEL_ANY_UNREDEEMED"),
            delivery_processes=count("DELIVERY_PROCESSES", "1", 1, MAX_THREADS_OR_PROCESSES),
            delivery_nice=_niceness(get("DELIVERY_NICE", "10")),
            delivery_yield_seconds=seconds("DELIVERY_YIELD_SECONDS", "10", zero=True),
            worker_concurrency=count("WORKER_CONCURRENCY", "2", 1, MAX_THREADS_OR_PROCESSES),
            worker_poll_seconds=seconds("WORKER_POLL_SECONDS", "1"),
            webhook_concurrency=count("WEBHOOK_CONCURRENCY", "8", 0, MAX_THREADS_OR_PROCESSES),
            job_lease_seconds=seconds("JOB_LEASE_SECONDS", "10"),
            worker_backoff_max_seconds=seconds("WORKER_BACKOFF_MAX_SECONDS", "30"),
            job_retry_base_seconds=seconds("JOB_RETRY_BASE_SECONDS", "30"),
            job_retry_max_seconds=seconds("JOB_RETRY_MAX_SECONDS", "3600"),
            expire_interval_seconds=seconds("EXPIRE_INTERVAL_SECONDS", "60"),
            job_retention_days=_days(get("JOB_RETENTION_DAYS", "30"), "JOB_RETENTION_DAYS"),
            smtp_timeout_seconds=seconds("SMTP_TIMEOUT_SECONDS", "30"),
            smtp_ca_file=get("SMTP_CA_FILE"),
            reward_expiry_days=_expiry_days(get("REWARD_EXPIRY_DAYS", "0")) or None,
            secret_key=get("SECRET_KEY"),
            webhook_timeout_seconds=seconds("WEBHOOK_TIMEOUT_SECONDS", "10"),
            webhook_allow_private=_flag(get("WEBHOOK_ALLOW_PRIVATE", "0"), "WEBHOOK_ALLOW_PRIVATE"),
            api_rate_limit_per_key=count("API_RATE_LIMIT_PER_KEY", "60000", 0),
            api_rate_limit_per_org=count("API_RATE_LIMIT_PER_ORG", "120000", 0),
            redeem_limit_per_ip=count("REDEEM_LIMIT_PER_IP", "60", 1),
            redeem_limit_per_token=count("REDEEM_LIMIT_PER_TOKEN", "30", 1),
            redeem_posts_per_token=count("REDEEM_POSTS_PER_TOKEN", "10", 1),
            redeem_window_seconds=count("REDEEM_WINDOW_SECONDS", "60", 1),
            api_rate_limit_sync_seconds=seconds("API_RATE_LIMIT_SYNC_SECONDS", "1", zero=True),
            log_format=_choice(get("LOG_FORMAT", "text").lower(), "LOG_FORMAT", ("text", "json")),
            log_level=_choice(get("LOG_LEVEL", "INFO").upper(), "LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR")),
            db_timeout_seconds=seconds("DB_TIMEOUT_SECONDS", "1.5", zero=True),
            db_statement_timeout_seconds=seconds("DB_STATEMENT_TIMEOUT_SECONDS", "10", zero=True),
            opentelemetry=_flag(get("OPENTELEMETRY", "0"), "OPENTELEMETRY"),
            db_concurrency=count("DB_CONCURRENCY", str(_default_db_concurrency()), 1),
            api_processes=count("API_PROCESSES", "1", 1, MAX_THREADS_OR_PROCESSES),
        )


def _digits(raw: str) -> bool:
    """ASCII digits only: str.isdigit takes "²" and "١", which int() refuses or reads."""
    return raw.isascii() and raw.isdigit()


def _niceness(raw: str) -> int:
    if not _digits(raw) or int(raw) > 19:
        raise ValueError(f"LARGESSE_DELIVERY_NICE must be a niceness from 0 to 19, not {raw!r}")
    return int(raw)


def _default_db_concurrency() -> int:
    return 8 * (os.cpu_count() or 1)


def _days(raw: str, name: str) -> int:
    if not _digits(raw):
        raise ValueError(f"LARGESSE_{name} must be a whole number of days (0: never), not {raw!r}")
    return int(raw)


MAX_THREADS_OR_PROCESSES = 256  # as `serve --workers`: more on one host only starves it


def _count(raw: str, name: str, minimum: int, maximum: int | None = None) -> int:
    if not _digits(raw) or int(raw) < minimum or (maximum is not None and int(raw) > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
        raise ValueError(f"LARGESSE_{name} must be a whole number {bounds}, not {raw!r}")
    return int(raw)


def _public_url(raw: str) -> str:
    """The base of every link in emails and pages: http(s)://host[:port][/path], nothing after."""
    parts = urlsplit(raw)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment or not port_ok \
            or any(c.isspace() for c in raw):
        raise ValueError(f"LARGESSE_PUBLIC_URL must be an http:// or https:// URL with a host, without query or "
                         f"fragment (the base of every link in emails and pages), not {raw!r}")
    return raw.rstrip("/")


def _mail_from(raw: str) -> str:
    """The sender address of every email, by the rule every address follows (email_address.py):
    a bad one was taken at start, then every reward email failed for good on its first attempt
    ("cannot build the message") and every reward went FAILED. The name is
    LARGESSE_MAIL_FROM_NAME's, not a "Name <address>" here."""
    from largesse import email_address

    if not email_address.valid(raw):
        hint = " (the sender's name goes in LARGESSE_MAIL_FROM_NAME)" if "<" in raw else ""
        raise ValueError(f"LARGESSE_MAIL_FROM must be an email address such as rewards@example.com{hint}, "
                         f"not {raw!r}")
    return raw


def _seconds(raw: str, name: str, *, zero: bool = False) -> float:
    """A duration in seconds: a finite number above 0 (or 0 too, with zero): a lease or a
    timeout of 0 or less turned every claim into a lost lease, and emails went out twice."""
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
        raise ValueError(f"LARGESSE_{name} must be a number of seconds {'of at least 0' if zero else 'above 0'}, "
                         f"not {raw!r}")
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def on_off(raw: str) -> bool | None:
    """The one reading of an on/off value, in any capitals: True, False, or None for anything
    else (which the caller refuses rather than guesses)."""
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    return None


ON_OFF_WORDS = f"one of {'/'.join(_TRUE)} (on) or {'/'.join(_FALSE)} (off)"


def _flag(raw: str, name: str) -> bool:
    """An on/off setting; anything else is refused rather than guessed (a `False` read as on
    turned LARGESSE_CANCEL_ANY_UNREDEEMED on)."""
    value = on_off(raw)
    if value is None:
        raise ValueError(f"LARGESSE_{name} must be {ON_OFF_WORDS}, not {raw!r}")
    return value


MAX_EXPIRY_DAYS = 3650


def _expiry_days(raw: str) -> int:
    """Days from 1 to MAX_EXPIRY_DAYS, or 0: never (as unset)."""
    if not _digits(raw) or not 0 <= int(raw) <= MAX_EXPIRY_DAYS:
        raise ValueError(f"LARGESSE_REWARD_EXPIRY_DAYS must be a number of days from 1 to {MAX_EXPIRY_DAYS} "
                         f"(unset or 0: rewards never expire), not {raw!r}")
    return int(raw)


def _choice(value: str, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"LARGESSE_{name} must be one of {allowed}, not {value!r}")
    return value
