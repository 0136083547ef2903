"""Binding a server's listening socket, checked: the port and host a user gives, and the reason a bind
failed, as ``InvalidInput`` naming the option (a port in use is bad input, exit 2, not a ``Conflict``:
the fix is another port, not a retry). The metrics server and the HTTP API bind through it, before the
daemon starts, so a port that cannot be bound starts nothing."""

from __future__ import annotations

import errno
import socket
from typing import SupportsInt, cast

from repart.errors import InvalidInput
from repart.validation import Interval, shown

LOOPBACK = "127.0.0.1"
"""The default host of every server repart runs: reachable from this machine only."""
PORTS = Interval(int, 0, 65535)


def check_port(field: str, port: object) -> int:
    """``port`` if it is an integer in [0, 65535] (0: any free port); InvalidInput naming ``field``."""
    if not PORTS.accepts(port):
        raise InvalidInput(field, f"must be {PORTS} (0: any free port), got {shown(port)}")
    return int(cast(SupportsInt, port))


def bound_socket(host: str, port: int, *, field: str) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (IPv4 or IPv6 by the host's form), not yet listening;
    InvalidInput naming ``field`` (the port's option) or ``field``'s host option when it cannot be bound."""
    wanted = check_port(field, port)
    try:
        family = socket.getaddrinfo(host or None, wanted, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]
    except (socket.gaierror, UnicodeError) as error:
        host_field = field.replace("port", "host")
        raise InvalidInput(
            host_field, f"must be an address or name of this host, got {host!r} ({error})"
        ) from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, wanted))
    except OSError as error:
        sock.close()
        raise InvalidInput(field, _unbindable(host, wanted, error)) from None
    return sock


def _unbindable(host: str, port: int, error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return f"must be a free port on this host; {port} is in use ({error.strerror})"
    if error.errno == errno.EACCES:
        return f"must be a port this process may bind; {port} needs privileges ({error.strerror})"
    return f"must be a port this host can listen on; binding {host or '*'}:{port} failed ({error.strerror})"
