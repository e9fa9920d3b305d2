from sqlalchemy import Column, Date, DateTime, String, Table

from largesse.db import metadata

# The operator's rates: units of the currency per 1 USD, as exact decimal text (never a float).
# An empty table means the dated default set shipped with the package (forex/default_rates.csv).
forex_rates = Table(
    "forex_rates", metadata,
    Column("currency_code", String(3), primary_key=True),
    Column("rate", String(40), nullable=False),
    Column("as_of", Date, nullable=False),
    Column("imported_at", DateTime, nullable=False),
)
