"""Which ``Host`` header values may reach the server: the allowlist that closes DNS rebinding.

A web page on a name the attacker points at 127.0.0.1 is, to the browser, the same origin as this
server; rebinding needs a *name*, so only names the operator gave pass (the rule, and why each kind
of value is safe, is in ``slotserver/api/security.py``'s docstring, which applies it first). Pure:
parsing and matching, tested without a server.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable

from aiohttp import web

ANY_HOST = "*"  # --allowed-host '*': every Host is allowed
LOCALHOST = "localhost"  # and every name under it (RFC 6761: always loopback, never public DNS)
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", "[::]", ""})  # --host values naming no one host
# A host name as RFC 3986's reg-name allows it in practice: letters, digits, '-', '.', and '_'
# (container and compose service names use it); never empty, never starting with a '.'.
HOST_NAME = re.compile(r"[a-z0-9_-][a-z0-9_.-]*")


@dataclass(frozen=True, slots=True)
class HostName:
    """A parsed ``Host`` value: the host in canonical form (lower case, no trailing dot, an IPv6
    address in brackets), its port if given, and whether it is an IP literal."""
    host: str
    port: int | None
    is_ip: bool


def _port(text: str) -> int | None:
    if not (1 <= len(text) <= 5 and text.isascii() and text.isdigit()) or int(text) > 65535:
        raise ValueError
    return int(text)


def parse_host(value: str) -> HostName | None:
    """``host[:port]`` as a ``Host`` header (or ``--allowed-host``) gives it, or None if malformed.

    A name whose last label is all digits counts as an IP literal: no DNS name ends so (browsers
    parse such a host as an IPv4 address and send it canonical, so only other clients send
    ``127.1``), hence it cannot be rebound.
    """
    text = value.strip().lower()
    try:
        if text.startswith("["):
            address, sep, rest = text[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                return None
            port = _port(rest[1:]) if rest else None
            return HostName(f"[{ipaddress.IPv6Address(address).compressed}]", port, True)
        name, sep, port_text = text.partition(":")
        port = _port(port_text) if sep else None
    except ValueError:
        return None
    name = name[:-1] if name.endswith(".") else name
    if not name.isascii() or not HOST_NAME.fullmatch(name) or ".." in name:
        return None
    last = name.rsplit(".", 1)[-1]
    return HostName(name, port, last.isdigit())


def parse_allowed_hosts(values: Iterable[str] | None) -> tuple[str, ...]:
    """``--allowed-host`` values, normalized (``name`` or ``name:port``); ``*`` kept as is. A
    malformed one is an error: the server must not start with an allowlist other than meant."""
    out = []
    for value in values or ():
        if value.strip() == ANY_HOST:
            out.append(ANY_HOST)
            continue
        parsed = parse_host(value)
        if parsed is None:
            raise ValueError(f"--allowed-host: {value!r} is not a host name, name:port or '*'")
        out.append(parsed.host if parsed.port is None else f"{parsed.host}:{parsed.port}")
    return tuple(dict.fromkeys(out))


def is_localhost(name: str) -> bool:
    return name == LOCALHOST or name.endswith("." + LOCALHOST)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostAllowlist:
    """Which ``Host`` values may reach the server (module docstring); ``allows`` is the check."""
    any_host: bool = False
    names: frozenset[str] = frozenset()  # allowed on any port
    name_ports: frozenset[str] = frozenset()  # "name:port": on that port only

    @classmethod
    def from_config(cls, host: str, allowed_hosts: Iterable[str]) -> "HostAllowlist":
        entries = parse_allowed_hosts(allowed_hosts)
        names = {e for e in entries if e != ANY_HOST and parse_host(e).port is None}
        bound = parse_host(host) if host.strip() not in WILDCARD_BINDS else None
        if bound is not None and not bound.is_ip:
            names.add(bound.host)  # --host my.lan: the name the operator gave is the server's own
        return cls(any_host=ANY_HOST in entries, names=frozenset(names),
                   name_ports=frozenset(e for e in entries if e != ANY_HOST and e not in names))

    def allows(self, value: str) -> bool:
        if self.any_host:
            return True
        parsed = parse_host(value)
        if parsed is None:
            return False
        if parsed.is_ip or is_localhost(parsed.host) or parsed.host in self.names:
            return True
        return parsed.port is not None and f"{parsed.host}:{parsed.port}" in self.name_ports

    def admits(self, request: web.Request) -> bool:
        """Whether the request's ``Host`` header is allowed. Only the header counts (aiohttp's
        ``request.host`` falls back to the socket's address). No header: HTTP/1.0, admitted;
        aiohttp's parser already answered 400 to an HTTP/1.1 request without one or with two. An
        empty one (an HTTP/1.1 client with no authority to name) names nothing to rebind either."""
        value = request.headers.get("Host")
        return not value or self.allows(value)
