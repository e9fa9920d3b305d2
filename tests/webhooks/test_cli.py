"""`largesse webhooks rotate-keys` and `largesse webhooks deliveries`, as processes, on a private database."""

import json

from largesse import crypto, db
from largesse.bootstrap import prepare
from largesse.webhooks import service


def test_rotate_keys_and_deliveries(cli, tmp_path):
    url = f"sqlite:///{tmp_path / 'rotate.sqlite3'}"
    created = json.loads(cli("org", "create", "--name", "Rotor", "--member-email", "r@example.com", "--json",
                             env={"LARGESSE_DATABASE_URL": url, "LARGESSE_SECRET_KEY": "old"}).stdout)
    org_id = created.get("organization_id") or created.get("id")
    engine = db.make_engine(url)
    prepare(engine)
    with db.write(engine) as conn:
        hook = service.upsert(conn, org_id, "https://example.com/hooks", crypto.KeyBox(["old"]))
    key = crypto.KeyBox(["old"]).decrypt(hook.private_key_encrypted)[0]

    def run(secret: str, *args: str, check: bool = True):
        return cli("webhooks", *args, check=check, env={"LARGESSE_DATABASE_URL": url, "LARGESSE_SECRET_KEY": secret})

    assert json.loads(run("new,old", "rotate-keys", "--json").stdout) == {
        "rotated": 1, "already_current": 0, "undecryptable": []}
    assert json.loads(run("new", "rotate-keys", "--json").stdout)["already_current"] == 1
    with db.read(engine) as conn:
        assert crypto.KeyBox(["new"]).decrypt(service.for_org(conn, org_id).private_key_encrypted) == (key, False)
    refused = run("unrelated", "rotate-keys", check=False)
    assert refused.returncode == 1 and hook.id in refused.stdout

    listed = json.loads(run("new", "deliveries", "--org", org_id, "--json").stdout)
    assert listed == {"webhook_id": hook.id, "total_count": 0, "deliveries": []}
    engine.dispose()
