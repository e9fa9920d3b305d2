"""A cheap SMTP sink for the delivery benchmark, in its own process.

    python -m bench.smtp_sink --port 2525

A real SMTP conversation (RFC 5321) with as little work per message as possible, so that
the sink does not take the CPU the workers are measured with: a greeting, EHLO/HELO,
MAIL/RCPT/DATA with the usual sequencing errors (503), RSET, NOOP, VRFY, QUIT, any number
of messages per connection, pipelined commands, and DATA read up to the "<CRLF>.<CRLF>"
terminator with dot-unstuffing (RFC 5321 4.5.2). Each accepted message is stamped
(time.monotonic, which is system-wide on Linux: the parent compares it with its own clock).

Control, one line each on stdin, one JSON line back on stdout:
- `reset`: forget the messages counted so far;
- `stats`: {"count", "first", "last", "quarter_rates", "cpu_s" (this process's user + system
  CPU so far), "bytes", "sample"} where sample is the first message since the reset
  (latin-1 text), for the parent to check that it parses as the email it expects.
The process prints `ready <port>` once it listens, and exits when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

MAX_LINE = 4096  # a command line longer than this is an error (RFC 5321: 512)
EHLO_REPLY = (b"250-bench-sink\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250-PIPELINING\r\n"
              b"250 SIZE 52428800\r\n")


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.stamps: list[float] = []
        self.bytes = 0
        self.sample: bytes | None = None

    def accepted(self, message: bytes) -> None:
        self.stamps.append(time.monotonic())
        self.bytes += len(message)
        if self.sample is None:
            self.sample = message

    def quarter_rates(self) -> list[float]:
        """emails/s in each quarter of the run: a queue that drains without slowing keeps them level."""
        stamps = self.stamps
        n = len(stamps) // 4
        if n < 2:
            return []
        return [round((n - 1) / max(stamps[(q + 1) * n - 1] - stamps[q * n], 1e-6), 1) for q in range(4)]

    def report(self) -> dict:
        times = os.times()
        return {"count": len(self.stamps), "first": self.stamps[0] if self.stamps else None,
                "last": self.stamps[-1] if self.stamps else None, "quarter_rates": self.quarter_rates(),
                "cpu_s": times.user + times.system, "bytes": self.bytes,
                "sample": self.sample.decode("latin-1") if self.sample is not None else None}


class SmtpSession(asyncio.Protocol):
    def __init__(self, stats: Stats):
        self.stats = stats
        self.buffer = bytearray()
        self.in_data = False
        self.scanned = 0  # where the search for the DATA terminator continues
        self.greeted = False
        self.mail_from: bytes | None = None
        self.recipients = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(b"220 bench-sink ESMTP ready\r\n")

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        replies: list[bytes] = []
        closing = False
        while self.buffer and not closing:
            if self.in_data:
                # The terminator is "<CRLF>.<CRLF>"; the CRLF before it is part of the message.
                # The buffer starts with a CRLF of our own (put there at DATA), so an empty
                # message and a first line starting with "." need no special case.
                at = self.buffer.find(b"\r\n.\r\n", max(0, self.scanned - 4))
                if at < 0:
                    self.scanned = len(self.buffer)
                    break
                message = bytes(self.buffer[:at + 2]).replace(b"\r\n..", b"\r\n.")[2:]
                del self.buffer[:at + 5]
                self.in_data, self.scanned = False, 0
                self.stats.accepted(message)
                self.mail_from, self.recipients = None, 0
                replies.append(b"250 2.0.0 OK queued\r\n")
                continue
            at = self.buffer.find(b"\r\n")
            if at < 0:
                if len(self.buffer) > MAX_LINE:
                    self.buffer.clear()
                    replies.append(b"500 5.5.2 line too long\r\n")
                break
            line = bytes(self.buffer[:at])
            del self.buffer[:at + 2]
            reply, closing = self.command(line)
            replies.append(reply)
        if replies and self.transport is not None:
            self.transport.write(b"".join(replies))
        if closing and self.transport is not None:
            self.transport.close()

    def command(self, line: bytes) -> tuple[bytes, bool]:
        verb, _, arg = line.partition(b" ")
        verb = verb.upper()
        if verb == b"EHLO" or verb == b"HELO":
            if not arg.strip():
                return b"501 5.5.4 hostname required\r\n", False
            self.greeted, self.mail_from, self.recipients = True, None, 0
            return (EHLO_REPLY if verb == b"EHLO" else b"250 bench-sink\r\n"), False
        if verb == b"MAIL":
            if not self.greeted:
                return b"503 5.5.1 EHLO first\r\n", False
            if self.mail_from is not None:
                return b"503 5.5.1 nested MAIL command\r\n", False
            if not arg.upper().startswith(b"FROM:"):
                return b"501 5.5.4 syntax: MAIL FROM:<address>\r\n", False
            self.mail_from = arg[5:].strip()
            return b"250 2.1.0 OK\r\n", False
        if verb == b"RCPT":
            if self.mail_from is None:
                return b"503 5.5.1 MAIL first\r\n", False
            if not arg.upper().startswith(b"TO:") or b"@" not in arg:
                return b"501 5.5.4 syntax: RCPT TO:<address>\r\n", False
            self.recipients += 1
            return b"250 2.1.5 OK\r\n", False
        if verb == b"DATA":
            if self.mail_from is None or not self.recipients:
                return b"503 5.5.1 RCPT first\r\n", False
            self.in_data, self.scanned = True, 0
            self.buffer[0:0] = b"\r\n"
            return b"354 end data with <CR><LF>.<CR><LF>\r\n", False
        if verb == b"RSET":
            self.mail_from, self.recipients = None, 0
            return b"250 2.0.0 OK\r\n", False
        if verb == b"NOOP":
            return b"250 2.0.0 OK\r\n", False
        if verb == b"VRFY":
            return b"252 2.0.0 cannot verify\r\n", False
        if verb == b"QUIT":
            return b"221 2.0.0 bye\r\n", True
        return b"500 5.5.2 command not recognized\r\n", False


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    stats = Stats()
    server = await loop.create_server(lambda: SmtpSession(stats), "127.0.0.1", port, backlog=256)
    done = loop.create_future()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)

    async def control() -> None:
        while True:
            line = (await reader.readline()).decode().strip()
            if not line:
                done.set_result(None)
                return
            if line == "reset":
                stats.reset()
                print(json.dumps({"ok": True}), flush=True)
            elif line == "stats":
                print(json.dumps(stats.report()), flush=True)

    task = asyncio.create_task(control())
    await done
    task.cancel()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.smtp_sink", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    opts = parser.parse_args()
    try:
        import uvloop
        uvloop.run(serve(opts.port))
    except ImportError:
        asyncio.run(serve(opts.port))


if __name__ == "__main__":
    main()
