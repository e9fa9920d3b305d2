"""The code lists requests are checked against: countries (ISO 3166-1 alpha-2), currencies (the
111 ISO 4217 codes of API.md §5, CurrencyCodes) and languages (ISO 639-1)."""

from __future__ import annotations

import re

COUNTRIES = frozenset((
    "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY "
    "BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK "
    "FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE IL IM IN IO IQ IR "
    "IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY MA MC MD ME MF MG MH MK "
    "ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM "
    "PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ TC TD TF "
    "TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE VG VI VN VU WF WS YE YT ZA ZM ZW XK"
).split())

# API.md §5: "Emit only listed values"; the official client's enum (6.0).
CURRENCIES = frozenset((
    "USD CAD EUR AED AFN ALL AMD ARS AUD AZN BAM BDT BHD BIF BND BOB BRL BWP BYN BZD CDF CHF CLP CNY COP CRC "
    "CVE CZK DJF DKK DOP DZD EGP ERN ETB GBP GEL GHS GNF GTQ HKD HNL HRK HUF IDR ILS INR IQD IRR ISK JMD JOD "
    "JPY KES KHR KRW KWD KZT LBP LKR MAD MDL MGA MKD MMK MOP MUR MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB "
    "PEN PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SDG SEK SGD SOS SYP THB TND TOP TRY TTD TWD TZS UAH UGX UYU "
    "UZS VEF VND XAF XOF YER ZAR"
).split())

LANGUAGES = frozenset((
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el "
    "en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu "
    "ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na "
    "nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so "
    "sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu"
).split())
_LANGUAGE_TAG = re.compile(r"([A-Za-z]{2})((?:-[A-Za-z0-9]{2,8})*)")


def country(value: str) -> str | None:
    """The ISO 3166-1 alpha-2 code, upper case; None when it is not one."""
    code = value.strip().upper()
    return code if code in COUNTRIES else None


def currency(value: str) -> str | None:
    """One of API.md's CurrencyCodes, upper case; None when it is not one."""
    code = value.strip().upper()
    return code if code in CURRENCIES else None


def language(value: str) -> str | None:
    """An ISO 639-1 code (`en`), optionally with subtags as in BCP 47 (`pt-BR`, `zh-Hant`): the
    code lower case, the rest as given; None when the code is not an ISO 639-1 language."""
    match = _LANGUAGE_TAG.fullmatch(value.strip())
    if match is None or match.group(1).lower() not in LANGUAGES:
        return None
    return match.group(1).lower() + match.group(2)
