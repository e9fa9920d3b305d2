"""webhooks: delivery log, encrypted signing keys

Revision ID: 0006
Revises: 0005

- webhooks.private_key_encrypted: the signing key as a Fernet token (crypto.py);
  existing plaintext keys are encrypted here under LARGESSE_SECRET_KEY (or the generated key
  file beside the SQLite database when it is unset) and their plaintext column is cleared.
- webhook_deliveries: one row per delivery attempt.
"""

import os

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("private_key_encrypted", sa.Text(), nullable=True))
        batch_op.alter_column("private_key", existing_type=sa.String(length=100), nullable=True)
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("organization_id", sa.String(length=20), nullable=False),
        sa.Column("webhook_id", sa.String(length=20), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("event", sa.String(length=100), nullable=False),
        sa.Column("event_uuid", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("will_retry", sa.Boolean(), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index("ix_webhook_deliveries_webhook_started", "webhook_deliveries", ["webhook_id", "started_at"])
    _encrypt_plaintext_keys()


def _encrypt_plaintext_keys() -> None:
    bind = op.get_bind()
    table = sa.table("webhooks", sa.column("id", sa.String), sa.column("private_key", sa.String),
                     sa.column("private_key_encrypted", sa.Text))
    rows = bind.execute(sa.select(table.c.id, table.c.private_key).where(table.c.private_key.is_not(None))).all()
    if not rows:
        return
    from largesse.config import Settings
    from largesse.crypto import keybox_for

    secret_keys = Settings(secret_key=os.environ.get("LARGESSE_SECRET_KEY")).secret_keys
    box = keybox_for(secret_keys, bind.engine.url.render_as_string(hide_password=False))
    for row in rows:
        bind.execute(table.update().where(table.c.id == row.id)
                     .values(private_key_encrypted=box.encrypt(row.private_key), private_key=None))


def downgrade() -> None:
    # Keys go back to plaintext only if they can be decrypted here; refuse otherwise rather
    # than leave webhooks without a key.
    bind = op.get_bind()
    table = sa.table("webhooks", sa.column("id", sa.String), sa.column("private_key", sa.String),
                     sa.column("private_key_encrypted", sa.Text))
    rows = bind.execute(sa.select(table.c.id, table.c.private_key_encrypted)
                        .where(table.c.private_key_encrypted.is_not(None))).all()
    if rows:
        from largesse.config import Settings
        from largesse.crypto import keybox_for

        secret_keys = Settings(secret_key=os.environ.get("LARGESSE_SECRET_KEY")).secret_keys
        box = keybox_for(secret_keys, bind.engine.url.render_as_string(hide_password=False))
        for row in rows:
            bind.execute(table.update().where(table.c.id == row.id)
                         .values(private_key=box.decrypt(row.private_key_encrypted)[0]))
    op.drop_index("ix_webhook_deliveries_webhook_started", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_column("private_key_encrypted")
        batch_op.alter_column("private_key", existing_type=sa.String(length=100), nullable=False)
