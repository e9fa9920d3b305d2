"""compose.build writes the message bytes itself: they must be the bytes the email package
produced before (an EmailMessage with set_content + add_alternative, flattened as
smtplib.send_message does), header for header and part for part."""

from __future__ import annotations

import email
import email.policy
import random
import re
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime

import pytest

from largesse.delivery import compose
from largesse.delivery.transport import Outgoing

NOW = datetime(2026, 11, 24, 9, 30, 5)
MSGID = "<179548520287.11596.14710238011950933031@example.com>"


def reference(mail: compose.RewardMail, *, link: str, mail_from: str, mail_from_name: str) -> Outgoing:
    """The message as compose.build made it with the email package (before it wrote the bytes)."""
    copy = compose.render(mail, link=link, mail_from_name=mail_from_name)
    msg = EmailMessage()
    msg["Subject"] = copy.subject
    msg["From"] = Address(display_name=compose.display_name(copy.sender_name, mail_from), addr_spec=mail_from)
    msg["To"] = Address(display_name=compose.display_name(mail.recipient_name, mail.recipient_email, "To"),
                        addr_spec=mail.recipient_email)
    msg["Date"] = format_datetime(NOW.replace(tzinfo=UTC))
    msg["Message-ID"] = MSGID
    msg["X-Largesse-Reward-Id"] = mail.reward_id
    msg.set_content(copy.text)
    msg.add_alternative(copy.html, subtype="html")
    return Outgoing.from_message(msg)


def _mail(**changes) -> compose.RewardMail:
    values = dict(reward_id="RW0000000001", recipient_name="Alex Recipient", recipient_email="alex@example.com",
                  denomination_cents=2500, currency_code="USD", expires_at=None, language="en",
                  delivery_meta=None, email_style=None, webpage_style=None, field_values={"department": "R&D <Lab>"})
    values.update(changes)
    return compose.RewardMail(**values)


CASES = {
    "plain ascii": _mail(),
    "quoted display name": _mail(recipient_name='Smith, "JJ" Jr. (Ops)',
                                 delivery_meta={"sender_name": "A.C.M.E, Inc."}),
    "non-ascii names and copy": _mail(recipient_name="Zoë Ångström", delivery_meta={
        "sender_name": "Équipe RH", "subject_line": "Un cadeau pour {{ Department }} — merci !",
        "message": "Très bien joué.\n\nÀ bientôt, 日本語のテキスト"}),
    "long subject and message lines": _mail(delivery_meta={
        "subject_line": "A very long subject line " * 8, "message": "word " * 200 + "\n\n" + "x" * 300},
        expires_at=datetime(2027, 1, 31)),
    "campaign styles": _mail(email_style={"button_color": "#ff6600", "logo_image_url": "https://cdn.example.com/l.png",
                                          "subject_line": "Hi {{ department }}"},
                             webpage_style={"headline": "Thanks, {{ Department }}!", "message": ".dot first\n.\nend"}),
    "mostly non-ascii body": _mail(delivery_meta={"message": "Ωμέγα " * 120}, currency_code="EUR"),
    "no recipient name": _mail(recipient_name=None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bytes_are_the_email_packages(name, monkeypatch):
    monkeypatch.setattr(compose, "make_msgid", lambda domain=None: MSGID)
    mail = CASES[name]
    args = dict(link="https://rewards.example.com/redeem/abcDEF123_-", mail_from="rewards@example.com",
                mail_from_name="Largesse Rewards")
    random.seed(7)  # the same boundary for both
    built = compose.build(mail, now=NOW, **args)
    random.seed(7)
    expected = reference(mail, **args)
    assert built.data.decode("utf-8") == expected.data.decode("utf-8")
    assert built == expected  # envelope and SMTPUTF8 too
    message = email.message_from_bytes(built.data, policy=email.policy.default)
    assert message.get_content_type() == "multipart/alternative"
    html = compose.render(mail, link=args["link"], mail_from_name=args["mail_from_name"]).html
    assert message.get_body(("html",)).get_content().replace("\r\n", "\n") == html


def test_an_address_the_email_package_refuses_is_refused_the_same():
    mail = _mail(recipient_email="a..b@example.com")  # two dots in a row: a permanent failure
    args = dict(link="https://x.example/redeem/a", mail_from="rewards@example.com", mail_from_name="L")
    with pytest.raises(ValueError) as built:
        compose.build(mail, now=NOW, **args)
    with pytest.raises(ValueError) as expected:
        reference(mail, **args)
    assert type(built.value) is type(expected.value)


def test_a_local_part_that_is_not_ascii_goes_out_with_smtputf8():
    """email_address.valid accepts zoë@example.com (RFC 6531); the email package's addr_spec
    parser refuses its local part, which failed every such email for good after the order
    was charged. It is built from its two parts and sent raw in UTF-8, as send_message would."""
    mail = _mail(recipient_email="zoë@example.com", recipient_name="Zoë Ä")
    args = dict(link="https://x.example/redeem/a", mail_from="rewards@example.com", mail_from_name="L")
    built = compose.build(mail, now=NOW, **args)
    assert built.smtputf8 and built.recipients == ("zoë@example.com",)
    assert b"\r\nTo: Zo\xc3\xab \xc3\x84 <zo\xc3\xab@example.com>\r\n" in built.data
    message = email.message_from_string(built.data.decode("utf-8"), policy=email.policy.default)
    assert [(a.display_name, a.addr_spec) for a in message["To"].addresses] == [("Zoë Ä", "zoë@example.com")]


@pytest.mark.parametrize("forged", [
    "x" * 30 + " <ceo@bank.example>, " + "y" * 30,  # long enough to fold: the quotes were dropped
    'Short "<ceo@bank.example>", z',
    "Acme\r\nBcc: victim@example.com",
    "=?utf-8?q?x=2C_y?=",  # an encoded word the package decoded into `x, y`: two mailboxes
])
def test_a_name_never_adds_an_address(forged):
    """Names come from API clients (sender_name, a campaign's, the organization's, the
    recipient's): whatever they hold, From and To each carry exactly the one address."""
    mail = _mail(recipient_name=forged, delivery_meta={"sender_name": forged})
    built = compose.build(mail, now=NOW, link="https://x.example/redeem/a", mail_from="rewards@example.com",
                          mail_from_name="L")
    message = email.message_from_bytes(built.data, policy=email.policy.default)
    assert [a.addr_spec for a in message["From"].addresses] == ["rewards@example.com"]
    assert [a.addr_spec for a in message["To"].addresses] == ["alex@example.com"]
    assert message["Bcc"] is None and built.recipients == ("alex@example.com",)


def test_an_ordinary_name_keeps_its_punctuation():
    built = compose.build(_mail(recipient_name="Smith, John (Ops)", delivery_meta={"sender_name": "Acme, Inc."}),
                          now=NOW, link="https://x.example/redeem/a", mail_from="rewards@example.com",
                          mail_from_name="L")
    message = email.message_from_bytes(built.data, policy=email.policy.default)
    assert message["From"].addresses[0].display_name == "Acme, Inc."
    assert message["To"].addresses[0].display_name == "Smith, John (Ops)"


def test_boundary_never_in_a_part(monkeypatch):
    draws = iter([1, 1, 2])
    monkeypatch.setattr(compose.random, "randrange", lambda n: next(draws))
    first = compose._boundary((b"",))
    assert compose._boundary((b"text --" + first.encode() + b" more",)) != first


def test_plain_values_are_written_as_the_email_package_folds_them():
    """compose.header writes plain one-line values itself: the package must agree, for every
    header compose writes, on random values of that shape up to the line length limit."""
    rng = random.Random(9)

    def word() -> str:
        return "".join(rng.choice("abcXYZ019+_-") for _ in range(rng.randint(1, 12)))

    def address() -> str:
        local = ".".join(word() for _ in range(rng.randint(1, 3)))
        return local + "@" + ".".join(rng.choice(["example", "a-b", "x1", "com"]) for _ in range(rng.randint(1, 3)))

    def value() -> str:
        shape = rng.randint(0, 3)
        words = " ".join(word() for _ in range(rng.randint(1, 8)))
        return (words, f"{words} <{address()}>", f"<{address()}>", address())[shape]

    checked = 0
    for name in compose._PLAIN_HEADERS:
        for _ in range(500):
            candidate = value()
            assert compose._PLAIN.match(candidate)
            if len(name) + 2 + len(candidate) <= 78:
                assert compose.header(name, candidate) == compose._folded.__wrapped__(name, candidate, False), candidate
                checked += 1
    assert checked > 1500
    # and a value the package rewrites is left to the package
    assert not compose._PLAIN.match('"Smith, J" <j@example.com>') and not compose._PLAIN.match("a  b")


def test_a_subject_that_looks_like_an_encoded_word_reads_as_written():
    """The email package decodes "=?utf-8?q?fake?=" in the text it folds: mail clients showed
    "fake Injected" for a subject_line written "=?utf-8?q?fake?= Injected"."""
    written = "=?utf-8?q?fake?= Injected =?utf-8?b?ZmFrZQ==?= café"
    built = compose.build(_mail(delivery_meta={"subject_line": written}), now=NOW, link="https://x.example/redeem/a",
                          mail_from="rewards@example.com", mail_from_name="L")
    assert email.message_from_bytes(built.data, policy=email.policy.default)["Subject"] == written


def test_a_right_to_left_value_is_isolated_and_cannot_reorder_the_copy():
    """An unclosed U+202E (right-to-left override) in a custom field mirrored the rest of the
    sender's headline; a value with right-to-left text now sits between FSI and PDI."""
    values = {"Dept": "R&D \u202eשלום", "Team": "Sales"}
    assert compose.fill_placeholders("Hi {{ Dept }} and {{ Team }}!", values) == \
        "Hi \u2068R&D \u202eשלום\u2069 and Sales!"
    rendered = compose.render(_mail(field_values=values, webpage_style={"headline": "Thanks {{ Dept }}, well done"}),
                              link="https://x.example/redeem/a", mail_from_name="L")
    assert "Thanks \u2068R&amp;D \u202eשלום\u2069, well done" in rendered.html
    assert compose.display_name("Acme \u202eevil", "rewards@example.com") == "Acme evil"


def test_the_template_headline_is_not_tagged_with_the_rewards_language():
    """The default headline is English template text: lang="ar" made a screen reader read it
    with an Arabic voice. The sender's own headline carries the reward's language."""
    default = compose.render(_mail(language="ar"), link="https://x.example/redeem/a", mail_from_name="L").html
    assert re.search(r'<h1 [^>]*dir="auto">You(&#39;|&#x27;|\')ve received a reward</h1>', default)
    assert 'lang="ar"' not in default.split("<h1", 1)[1].split(">", 1)[0]
    own = compose.render(_mail(language="ar", webpage_style={"headline": "مرحبا"}), link="https://x.example/redeem/a",
                         mail_from_name="L").html
    assert '<h1 style="margin:0 0 16px 0;font-size:24px;" lang="ar" dir="auto">مرحبا</h1>' in own
