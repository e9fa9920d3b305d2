from sqlalchemy import JSON, BigInteger, Column, DateTime, ForeignKey, Index, Integer, String, Table, Text

from largesse.db import metadata

# status: CREATED -> PROCESSING -> READY_FOR_DOWNLOAD | FAILED (API.md §5 ReportStatus).
reports = Table(
    "reports", metadata,
    Column("id", String(20), primary_key=True),
    Column("organization_id", String(20), ForeignKey("organizations.id"), nullable=False),
    Column("status", String(20), nullable=False),
    Column("report_type", String(40), nullable=False),
    Column("format", String(10), nullable=False),
    Column("filters", JSON, nullable=False),
    Column("requested_by", String(20), nullable=True),  # API key id
    Column("created_at", DateTime, nullable=False),
    Column("started_at", DateTime, nullable=True),
    Column("completed_at", DateTime, nullable=True),
    # Which run of the job wrote the chunks that count (a run whose lease was taken over
    # keeps writing its own generation, which is then discarded).
    Column("generation", String(60), nullable=True),
    Column("row_count", BigInteger, nullable=True),
    Column("byte_size", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    # The download link's token is HMAC(key, id:salt); only its SHA-256 is stored.
    Column("download_salt", String(64), nullable=True),
    Column("download_hash", String(64), nullable=True, unique=True),
    Column("url_expires_at", DateTime, nullable=True),
    Index("ix_reports_org_status", "organization_id", "status"),
)

# The CSV itself, in order, in chunks of about 256 KiB: every API process and worker, on any
# host, reads the same bytes from the database (no file only one host sees).
report_chunks = Table(
    "report_chunks", metadata,
    Column("report_id", String(20), ForeignKey("reports.id"), primary_key=True),
    Column("generation", String(60), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", Text, nullable=False),
)
