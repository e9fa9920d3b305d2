"""Presentation helpers for the redemption page: money text (largesse.money.format_money) and
campaign colours.

Campaign colours are chosen by the sender, so the text drawn on them is chosen here: for
each background we pick near-black or white, whichever has the higher WCAG contrast ratio
(at least 4.5:1, AA for body text, for any colour: see text_color_for).
"""

from __future__ import annotations

import re

# The redemption and connected-organization pages import format_money from here; it is
# largesse.money's, the same text the reward email shows.
from largesse.money import format_money as format_money

HEX_COLOR = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})\Z")
DARK_TEXT = "#14171f"
LIGHT_TEXT = "#ffffff"

DEFAULTS = {
    "background_color": "#eef1f6",
    "logo_background_color": "#1f3a5f",
    "button_color": "#1d4ed8",
}


def _channel(value: int) -> float:
    c = value / 255
    return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4


def relative_luminance(color: str) -> float:
    hex_digits = color.lstrip("#")
    if len(hex_digits) == 3:
        hex_digits = "".join(ch * 2 for ch in hex_digits)
    r, g, b = (int(hex_digits[i:i + 2], 16) for i in (0, 2, 4))
    return 0.2126 * _channel(r) + 0.7152 * _channel(g) + 0.0722 * _channel(b)


def contrast_ratio(a: str, b: str) -> float:
    la, lb = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_color_for(background: str) -> str:
    """Near-black or white, whichever reads better on background; pure black when neither
    reaches 4.5:1 (mid-greys): black or white always does, the worst case being about 4.58:1."""
    best = max((DARK_TEXT, LIGHT_TEXT), key=lambda text: contrast_ratio(background, text))
    if contrast_ratio(background, best) >= 4.5:
        return best
    return max(("#000000", LIGHT_TEXT), key=lambda text: contrast_ratio(background, text))


def _edge(color: str) -> str:
    """A button's outline: its own colour when that stands out on the white card (3:1), else dark."""
    return color if contrast_ratio(color, "#ffffff") >= 3 else DARK_TEXT


def safe_color(value, default: str) -> str:
    """A validated #rgb/#rrggbb colour (it is written into CSS), else the default."""
    return value if isinstance(value, str) and HEX_COLOR.match(value) else default


def safe_url(value) -> str | None:
    if isinstance(value, str) and value.startswith(("https://", "http://")) and len(value) <= 2000:
        return value
    return None


def theme_css(webpage_style: dict | None, email_style: dict | None) -> str:
    """The one inline <style> block of a page: campaign colours as CSS custom properties.

    Its content is hashed into the Content-Security-Policy, so no other inline style runs.
    """
    page = webpage_style or {}
    mail = email_style or {}
    background = safe_color(page.get("background_color"), DEFAULTS["background_color"])
    logo_background = safe_color(page.get("logo_background_color") or mail.get("logo_background_color"),
                                 DEFAULTS["logo_background_color"])
    button = safe_color(mail.get("button_color"), DEFAULTS["button_color"])
    height = page.get("logo_image_height_px")
    height = height if isinstance(height, int) and 16 <= height <= 160 else 48
    return (
        ":root{"
        f"--page-bg:{background};--page-fg:{text_color_for(background)};"
        f"--brand-bg:{logo_background};--brand-fg:{text_color_for(logo_background)};"
        f"--button-bg:{button};--button-fg:{text_color_for(button)};--button-edge:{_edge(button)};"
        f"--logo-height:{height}px"
        "}"
    )
