"""Checkbox custom field values are stored in lower case

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A Checkbox field took True and TRUE as well as true, and stored them as sent: a search for
    # true missed them. Values are now stored in lower case (fields.service.stored_value); the
    # values stored before are brought to it. Only true and false in other capitals can differ.
    values = sa.table("reward_field_values", sa.column("field_id", sa.String), sa.column("value", sa.String))
    fields = sa.table("fields", sa.column("id", sa.String), sa.column("data_type", sa.String))
    op.get_bind().execute(
        sa.update(values)
        .where(values.c.field_id.in_(sa.select(fields.c.id).where(fields.c.data_type == "Checkbox")),
               values.c.value != sa.func.lower(values.c.value))
        .values(value=sa.func.lower(values.c.value)))


def downgrade() -> None:
    pass  # the capitals as sent are not kept; lower case is a valid value of the older code too
