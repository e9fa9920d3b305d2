"""Reading the POST form of a server-rendered page, within limits: the dashboard, the
redemption pages and the connect pages all read their forms here.

The body is read as bytes, at most a limit the page names, then parsed:

- urlencoded by urllib, with a cap on the number of fields, counted before anything is parsed;
- multipart/form-data (the dashboard's CSV upload) by the small parser below, which counts the
  parts before it reads any (one bytes.count), reads each part's headers with the email
  package (headers only, at most MAX_PART_HEADER bytes in a few lines: never a body), and
  refuses a part that is itself multipart instead of descending into it. The email package's own MIME parser
  parsed every part of the body first (14,500 tiny parts: a second of CPU) and recursed into
  nested ones (10,000 levels: a RecursionError).

Whatever is over a limit or cannot be read raises FormRefused (413 for size, else 400), which
each page answers with its usual error page: never a 500, never an ERROR log. Parsing is
synchronous: callers run it in the thread pool, never on the event loop.
"""

from __future__ import annotations

import base64
import binascii
import quopri
from email.message import Message
from email.parser import HeaderParser
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

# A browser's part headers: Content-Disposition (name, filename) and perhaps Content-Type, ~100
# bytes. The email package's parameter parsing is quadratic in the semicolons of a header (1 KB
# of them: 2 ms a part), so the lines and the semicolons are capped too.
MAX_PART_HEADER = 1024
MAX_PART_HEADER_LINES = 8
MAX_PART_HEADER_PARAMS = 16
MAX_CONTENT_TYPE = 1024
TOO_MANY_FIELDS = "The form has too many fields."
UNREADABLE = "The form could not be read."


class FormRefused(Exception):
    """A form the page does not read: status 413 (too large) or 400, and why, in words."""

    def __init__(self, status: int, text: str, *, advice: str | None = None):
        super().__init__(text)
        self.status = status
        self.text = text
        self.advice = advice  # what the person should do, when the page's default does not fit


async def read_body(request: Request, limit: int, *, overhead: int = 0) -> bytes:
    """The request body, refused (413) once it passes limit + overhead bytes (overhead: a
    multipart body's boundaries and part headers around `limit` bytes of content)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit + overhead:
            raise FormRefused(413, f"The form is larger than {limit // 1024} KB.")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_urlencoded(body: bytes, *, max_fields: int, keep_blank_values: bool = False) -> dict[str, list[str]]:
    """name -> values of an application/x-www-form-urlencoded body of at most max_fields fields."""
    try:
        return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=keep_blank_values,
                        max_num_fields=max_fields)
    except ValueError:  # "Max number of fields exceeded", raised before any field is parsed
        raise FormRefused(400, TOO_MANY_FIELDS) from None


def first_values(body: bytes, *, max_fields: int) -> dict[str, str]:
    """name -> first value, for the pages' small forms (a CSRF token and a choice)."""
    return {name: values[0] for name, values in parse_urlencoded(body, max_fields=max_fields).items()}


def boundary_of(content_type: str) -> bytes:
    if len(content_type) > MAX_CONTENT_TYPE:
        raise FormRefused(400, UNREADABLE)
    header = Message()
    header["Content-Type"] = content_type
    boundary = header.get_boundary()
    if not boundary or len(boundary) > 70:  # RFC 2046: 1 to 70 characters
        raise FormRefused(400, UNREADABLE)
    try:
        return boundary.encode("ascii")
    except UnicodeEncodeError:
        raise FormRefused(400, UNREADABLE) from None


def parse_multipart(content_type: str, body: bytes, *, max_parts: int, max_files: int = 1
                    ) -> tuple[dict[str, list[str]], dict[str, tuple[str, bytes]]]:
    """(name -> values, name -> (filename, content)) of a multipart/form-data body of at most
    max_parts parts, max_files of them files. A part whose Content-Type is multipart/* is
    refused: form data is one level deep (RFC 7578), and nothing here recurses."""
    delimiter = b"\r\n--" + boundary_of(content_type)
    data = b"\r\n" + body  # the first delimiter may open the body, without the CRLF before it
    if data.count(delimiter) > max_parts + 1:  # the parts, and the closing delimiter
        raise FormRefused(400, TOO_MANY_FIELDS)
    pieces = data.split(delimiter)
    if len(pieces) < 2:
        raise FormRefused(400, UNREADABLE)
    values: dict[str, list[str]] = {}
    files: dict[str, tuple[str, bytes]] = {}
    file_count = 0
    for piece in pieces[1:]:  # pieces[0]: the preamble
        if piece.startswith(b"--"):  # the closing delimiter; after it, the epilogue
            break
        name, filename, content = _part(piece)
        if filename is not None:
            file_count += 1
            if file_count > max_files:
                raise FormRefused(400, "The form has more files than it takes." if max_files else
                                  "The form takes no file.")
        if not name:
            continue
        if filename is not None:
            files[name] = (filename[:200], content)
        else:
            values.setdefault(name, []).append(content.decode("utf-8", "replace"))
    return values, files


def _part(piece: bytes) -> tuple[str | None, str | None, bytes]:
    """(name, filename or None, content) of one part: what follows its delimiter."""
    line_end = piece.find(b"\r\n")
    if line_end < 0 or piece[:line_end].strip(b" \t"):  # only transport padding may follow a delimiter
        raise FormRefused(400, UNREADABLE)
    rest = piece[line_end + 2:]
    if rest.startswith(b"\r\n"):  # no headers at all
        raw_headers, content = b"", rest[2:]
    else:
        end = rest.find(b"\r\n\r\n", 0, MAX_PART_HEADER + 4)
        if end < 0:
            raise FormRefused(400, UNREADABLE)
        raw_headers, content = rest[:end], rest[end + 4:]
    if raw_headers.count(b"\n") >= MAX_PART_HEADER_LINES or raw_headers.count(b";") > MAX_PART_HEADER_PARAMS:
        raise FormRefused(400, UNREADABLE)
    # compat32 (the parser's default policy): plain strings, no structured header parsing.
    headers = HeaderParser().parsestr(raw_headers.decode("utf-8", "replace"), headersonly=True)
    if headers.get_content_maintype() == "multipart":
        raise FormRefused(400, f"{UNREADABLE} A part of it is itself multipart.")
    encoding = (headers.get("content-transfer-encoding") or "").strip().lower()
    try:
        if encoding == "base64":
            content = base64.b64decode(content)
        elif encoding == "quoted-printable":
            content = quopri.decodestring(content)
    except (binascii.Error, ValueError):
        raise FormRefused(400, UNREADABLE) from None
    name = headers.get_param("name", header="content-disposition")
    name = name if isinstance(name, str) else None  # an RFC 2231 tuple is not a field name browsers send
    return name, headers.get_filename(), content


def same_origin(request: Request) -> bool:
    """When a browser names the Origin of a POST it must be this site (defence in depth).

    Under Referrer-Policy no-referrer browsers send "Origin: null"; the CSRF token decides then.
    "This site" is the Host the request came to or LARGESSE_PUBLIC_URL's scheme and host (a
    proxy that does not forward Host hands the server its own upstream name).
    """
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return True
    if urlsplit(origin).netloc == request.headers.get("host", ""):
        return True
    public = urlsplit(request.app.state.settings.public_url)
    named = urlsplit(origin)
    return (named.scheme, named.netloc) == (public.scheme, public.netloc)
