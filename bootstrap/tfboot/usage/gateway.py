"""One HTTP request to a Pushgateway under a total deadline, with the URL's credentials as
basic auth: the handler ``metrics.push`` gives ``prometheus_client.push_to_gateway``.

``prometheus_client``'s own handler passes its timeout to each socket operation, so a
gateway (or a proxy before it) that sends a byte every few seconds keeps a push, and the
process's exit, going without end. Here a timer shuts the connection's socket down when the
deadline passes, so a blocked read returns at once, however the other side answers. A user
name and password in the URL are taken out of it and sent as an ``Authorization: Basic``
header (as ``prometheus_client.basic_auth_handler`` does); no message names them.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

MAX_ANSWER_BYTES = 65536  # a Pushgateway's answer is a few bytes; more is read no further


class PushFailed(OSError):
    """A push that did not succeed; the message names no credentials."""


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user information, and the (user, password) it held, if any."""
    parts = urlsplit(url.strip())
    if parts.username is None and parts.password is None:
        return url.strip(), None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
    return urlunsplit(parts._replace(netloc=netloc)), credentials


def handler(credentials: tuple[str, str] | None, deadline_s: float) -> Callable[..., Any]:
    """A ``push_to_gateway`` handler: the request within ``deadline_s`` in all."""

    def make(url: str, method: str, timeout: float | None, headers: list[tuple[str, str]],
             data: bytes) -> Callable[[], None]:  # fmt: skip
        return lambda: request(url, method, headers, data, credentials, deadline_s)

    return make


def _shut(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    expired.set()
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def request(url: str, method: str, headers: list[tuple[str, str]], data: bytes,
            credentials: tuple[str, str] | None, deadline_s: float) -> None:  # fmt: skip
    """Send one request; ``PushFailed`` unless the gateway answers 2xx within the deadline."""
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "", parts.port, timeout=deadline_s)
    sent = dict(headers)
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode("ascii")
        sent["Authorization"] = f"Basic {token}"
    expired = threading.Event()
    timer = threading.Timer(deadline_s, _shut, (connection, expired))
    timer.daemon = True
    timer.start()
    try:
        connection.connect()
        if expired.is_set():  # the deadline passed while connecting, before a socket to shut
            raise TimeoutError
        path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        connection.request(method, path, body=data, headers=sent)
        answer = connection.getresponse()
        answer.read(MAX_ANSWER_BYTES)
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            raise PushFailed(f"no answer within {deadline_s:g} s") from None
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise PushFailed(str(reason)) from None
    finally:
        timer.cancel()
        connection.close()
    if expired.is_set():
        raise PushFailed(f"no answer within {deadline_s:g} s")
    if not 200 <= answer.status < 300:
        raise PushFailed(f"the Pushgateway answered HTTP {answer.status} {answer.reason}"[:200])
