"""Products say what the recipient must give before the payout (products.recipient_details);
a held redemption keeps those details encrypted until it is decided (fraud_reviews.encrypted_details)

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # An ACH product paid out without ever asking for a bank account: such a product now names
    # the details its page asks for ("us_bank_account"; redemption.recipient.KINDS). The
    # products already stored get the catalog's default: every "ach" product sends to a US account.
    conn = op.get_bind()
    if "recipient_details" not in {c["name"] for c in sa.inspect(conn).get_columns("products")}:
        op.add_column("products", sa.Column("recipient_details", sa.String(40), nullable=True))
    products = sa.table("products", sa.column("category", sa.String), sa.column("recipient_details", sa.String))
    conn.execute(sa.update(products).where(products.c.category == "ach", products.c.recipient_details.is_(None))
                 .values(recipient_details="us_bank_account"))
    # A bank deposit held by a fraud rule keeps the account, encrypted, until release pays it or
    # block, cancel or expiry erase it (redemption/recipient.seal). Reviews held before this have none.
    if "encrypted_details" not in {c["name"] for c in sa.inspect(conn).get_columns("fraud_reviews")}:
        op.add_column("fraud_reviews", sa.Column("encrypted_details", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fraud_reviews") as batch:
        batch.drop_column("encrypted_details")
    with op.batch_alter_table("products") as batch:
        batch.drop_column("recipient_details")
