"""The address guard: webhook URLs must not reach the server's own network (SSRF).

A webhook URL is chosen by a client, and the worker POSTs to it from inside the
deployment: without a guard, `http://169.254.169.254/` or `http://10.0.0.5:5432/` would
make Largesse a proxy into its own network. So:

- at creation, the URL's host is parsed the way a browser would (WHATWG: `2130706433`,
  `127.1`, `0x7f.1`, `0177.0.0.1` are all 127.0.0.1), names under `localhost` are refused,
  and a name is resolved (briefly) so that one that already points inside is refused early;
- at every sending (and at `simulate`), the host is resolved once, *every* address is
  checked, and the connection goes to a checked address (webhooks/sender.py pins it), so a
  DNS answer that changes between the check and the connect (rebinding) cannot slip in.

An address is allowed only when it is globally routable unicast: loopback, private,
link-local, unspecified, reserved, multicast, shared (100.64/10), documentation and
benchmarking ranges are refused, and so are IPv6 addresses embedding such an IPv4 address
(IPv4-mapped, IPv4-compatible, SIIT, 6to4, NAT64 64:ff9b::/96). LARGESSE_WEBHOOK_ALLOW_PRIVATE
turns the address checks off (a laptop, the tests); the URL must still be well formed.

A refusal of a resolved name does not say which address it resolved to: the API would
otherwise answer any client's question "what does this internal name resolve to?".

Name lookups run in threads of their own (getaddrinfo cannot be cancelled), at most
LOOKUPS_PER_OWNER at once per organization and LOOKUPS_MAX in all: a lookup that outlives its
deadline keeps its thread until the resolver gives up, and an organization whose webhook names
hang (a slow name server of its own) uses up its own share only, never the other
organizations' lookups.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import re
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 6761: localhost and every name under it are loopback, whatever DNS says.
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_PATH_SAFE = "".join(chr(c) for c in range(33, 127))
_IPV4_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)\Z")

# IPv6 prefixes that carry an IPv4 address, and where it sits.
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPAT = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_6TO4 = ipaddress.IPv6Network("2002::/16")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: local-use translation
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")

# IANA special-purpose IPv4 blocks that Python 3.11 calls global: IETF protocol assignments
# (192.0.0.0/24, of which only two anycast services are reachable) and the deprecated 6to4
# relay anycast (RFC 7526). No webhook receiver lives there.
_SPECIAL_V4 = (ipaddress.IPv4Network("192.0.0.0/24"), ipaddress.IPv4Network("192.88.99.0/24"))
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")  # RFC 3879: deprecated, still routed where configured
_DOCUMENTATION_V6 = ipaddress.IPv6Network("3fff::/20")  # RFC 9637, not yet in Python 3.11's tables

CREATE_RESOLVE_SECONDS = 2.0
# Lookups running at once (a timed-out one included, until the resolver gives up): in all, and
# per organization (the `owner` of resolve()).
LOOKUPS_MAX, LOOKUPS_PER_OWNER = 64, 4
_lookups_lock = threading.Lock()
_lookups: dict[str, int] = {}


class UnsafeURL(ValueError):
    """The URL is malformed or its host is (or resolves to) an address webhooks may not reach."""


class ResolutionFailed(Exception):
    """The name did not resolve (in time): a temporary condition at sending time."""


@dataclass(frozen=True)
class Target:
    """A checked webhook URL, split the way the sender uses it."""

    scheme: str
    host: str  # lower-case; IDNA-encoded; an IP address in canonical form when literal
    port: int
    path: str  # path and query, at least "/"
    literal: IPAddress | None  # the address when the host is an IP literal
    username: str | None = None
    password: str | None = None

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The WHATWG IPv4 parser: 1-4 dot-separated numbers, each decimal, 0x-hex or 0-octal,
    the last filling the remaining bytes. None when the host is not IPv4-shaped; UnsafeURL
    when it is but does not parse (`1.2.3.4.5`, `08`): it would not be a name either."""
    parts = host.split(".")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if not parts or not _IPV4_PART.match(parts[-1]):
        return None
    if len(parts) > 4 or not all(_IPV4_PART.match(p) for p in parts):
        raise UnsafeURL("is not a valid host (a malformed IPv4 address)")
    numbers = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            if not set(part) <= set("01234567"):
                raise UnsafeURL("is not a valid host (a malformed IPv4 address)")
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part, 10))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise UnsafeURL("is not a valid host (an IPv4 number out of range)")
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address in _MAPPED or address in _SIIT or address in _NAT64 or (address in _COMPAT and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _6TO4:
        return address.sixtofour
    return None


def refusal(address: IPAddress) -> str | None:
    """Why webhooks may not reach this address, or None when they may."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return f"must not point to a scoped IPv6 address ({address})"
        inner = _embedded_ipv4(address)
        if inner is not None:
            why = refusal(inner)
            return f"must not point to {address}, which embeds {inner}: {why}" if why else None
        if address in _NAT64_LOCAL:
            return f"must not point to a local-use NAT64 address ({address})"
        if address in _SITE_LOCAL:
            return f"must not point to a site-local address ({address})"
        if address in _DOCUMENTATION_V6:
            return f"must not point to a documentation address ({address})"
    if address == _BROADCAST:  # reserved too, but docs/webhooks.md words it "a private address"
        return f"must not point to a private address ({address})"
    # reserved before private: Python counts 240/4 as both, and docs/webhooks.md names it reserved
    for flag, what in (("is_unspecified", "an unspecified"), ("is_loopback", "a loopback"),
                       ("is_link_local", "a link-local"), ("is_multicast", "a multicast"),
                       ("is_reserved", "a reserved"), ("is_private", "a private")):
        if getattr(address, flag):
            return f"must not point to {what} address ({address})"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return f"must not point to a shared (carrier-grade NAT) address ({address})"
    if isinstance(address, ipaddress.IPv4Address) and any(address in net for net in _SPECIAL_V4):
        return f"must not point to a special-purpose address ({address})"
    if not address.is_global:
        return f"must not point to a non-global address ({address})"
    return None


def parse(url: str) -> Target:
    """Split and normalize an http(s) URL; UnsafeURL when it is malformed."""
    if any(ord(c) < 33 or ord(c) == 127 or c == "\\" for c in url):
        raise UnsafeURL("must not contain spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError as exc:
        raise UnsafeURL(f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise UnsafeURL("must be an http(s) URL")
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    if port == 0:
        raise UnsafeURL("must not use port 0")
    host = hostname.lower()
    literal: IPAddress | None = None
    if "[" in parts.netloc:  # urlsplit checked the brackets hold an IPv6 address
        try:
            literal = ipaddress.IPv6Address(host)
        except ValueError:
            raise UnsafeURL("is not a valid host (a malformed IPv6 address)") from None
    else:
        literal = parse_ipv4(host)
        if literal is None:
            host = _name(host)
    # Non-ASCII characters are percent-encoded; everything already ASCII is sent as given.
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_PATH_SAFE)
    return Target(parts.scheme, str(literal) if literal is not None else host, port, path, literal,
                  parts.username, parts.password)


def _name(host: str) -> str:
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise UnsafeURL("is not a valid host name") from None
    labels = ascii_host.rstrip(".").split(".")
    if len(ascii_host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise UnsafeURL("is not a valid host name")
    return ".".join(labels)


def is_local_name(host: str) -> bool:
    return host in LOCAL_NAMES or host.endswith(".localhost")


def check_static(target: Target, allow_private: bool) -> None:
    """The checks that need no DNS: the literal address, and names that are always local."""
    if allow_private:
        return
    if target.literal is not None:
        why = refusal(target.literal)
        if why:
            raise UnsafeURL(why)
    elif is_local_name(target.host):
        raise UnsafeURL(f"must not point to a local host name ({target.host})")


def _lookup(host: str, port: int, owner: str) -> concurrent.futures.Future:
    """getaddrinfo in a thread of its own, within the owner's and the process's share of
    running lookups (ResolutionFailed beyond)."""
    with _lookups_lock:
        if sum(_lookups.values()) >= LOOKUPS_MAX or _lookups.get(owner, 0) >= LOOKUPS_PER_OWNER:
            raise ResolutionFailed(f"too many name lookups in progress to resolve {host}; try again later")
        _lookups[owner] = _lookups.get(owner, 0) + 1
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter, whatever it is
            future.set_exception(exc)
        finally:
            with _lookups_lock:
                left = _lookups.pop(owner) - 1
                if left:
                    _lookups[owner] = left

    threading.Thread(target=run, name="largesse-webhook-dns", daemon=True).start()
    return future


def resolve(target: Target, timeout: float, owner: str = "") -> list[IPAddress]:
    """Every address the host resolves to (in resolver order); ResolutionFailed otherwise.
    `owner`: whose share of the running lookups this one takes (an organization ID)."""
    if target.literal is not None:
        return [target.literal]
    future = _lookup(target.host, target.port, owner)
    try:
        infos = future.result(timeout=max(0.0, timeout))
    except concurrent.futures.TimeoutError:
        raise ResolutionFailed(f"resolving {target.host} took longer than {timeout:.1f} s") from None
    except (OSError, UnicodeError) as exc:
        raise ResolutionFailed(f"cannot resolve {target.host}: {exc}") from None
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = ipaddress.ip_address(sockaddr[0])
        if isinstance(address, ipaddress.IPv6Address) and len(sockaddr) > 3 and sockaddr[3]:
            address = ipaddress.IPv6Address(f"{sockaddr[0]}%{sockaddr[3]}")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ResolutionFailed(f"{target.host} has no IPv4 or IPv6 address")
    return addresses


def check_resolved(target: Target, addresses: list[IPAddress], allow_private: bool) -> None:
    if allow_private:
        return
    if any(refusal(address) for address in addresses):
        # Not which address, nor why: that would answer what an internal name resolves to.
        raise UnsafeURL(f"host {target.host} resolves to an address that is not public: "
                        "webhooks must reach a public address")


def check_for_create(url: str, allow_private: bool, owner: str = "") -> Target:
    """At creation: static checks, then a short resolution. A name that does not resolve
    (yet) is accepted; every sending checks again."""
    target = parse(url)
    check_static(target, allow_private)
    if not allow_private and target.literal is None:
        try:
            check_resolved(target, resolve(target, CREATE_RESOLVE_SECONDS, owner), allow_private)
        except ResolutionFailed:
            pass
    return target


def check_for_send(url: str, allow_private: bool, deadline: float,
                   owner: str = "") -> tuple[Target, list[IPAddress]]:
    """At sending: resolve once, check every address, and return them to connect to.
    UnsafeURL is a refusal (never retried into success by waiting); ResolutionFailed is
    temporary."""
    target = parse(url)
    check_static(target, allow_private)
    addresses = resolve(target, deadline - time.monotonic(), owner)
    check_resolved(target, addresses, allow_private)
    return target, addresses
