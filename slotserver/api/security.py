"""Who may talk to the server: a ``Host`` allowlist, API keys (llama-server's) and a browser Origin policy.

Three checks, in one middleware that runs before any other work on a request (before its body is read):

* **Hosts (DNS rebinding).** A web page on ``http://rebind.attacker.example:8080`` whose name the
  attacker then points at 127.0.0.1 is, to the browser, the same origin as this server: its
  requests carry ``Host: rebind.attacker.example:8080`` and a matching ``Origin`` (measured at
  24272d3: ``GET /props`` answered 200; Ollama's CVE-2024-28224 class). Rebinding needs a *name*,
  so the ``Host`` a request names must be one of (``HostAllowlist``, any port unless one is given):
  an IP literal (``127.0.0.1``, ``[::1]``, the LAN address of a ``--host 0.0.0.0`` server: a
  browser that sends one connected to that very address), ``localhost`` or a name under
  ``.localhost`` (browsers resolve those to loopback themselves; no public DNS name ends so), the
  ``--host`` value when it is a name, or an ``--allowed-host`` entry (``name`` or ``name:port``;
  ``*``: any Host). Anything else gets 403 before routing and before the Origin check. A request
  without ``Host`` is served on HTTP/1.0 (no name to rebind; browsers always send one); aiohttp's
  parser answers 400 to an HTTP/1.1 one (RFC 9112 section 3.2) and to two ``Host`` fields.
* **Keys.** With ``--api-key``/``--api-key-file``/``LLAMA_API_KEY`` set, every request except the
  exempt ones (``EXEMPT_PATHS``; ``/metrics`` too with ``--metrics-no-auth``) and OPTIONS must show
  one configured key as ``Authorization: Bearer KEY`` or ``X-Api-Key: KEY``, else 401. A request
  with a valid key carries the key's id (``key-N``) as ``request[TENANT]``: ``--spec-learning
  per-key`` keeps one draft chain per key (``slotserver/speculation/learning_scopes.py``).
* **Origins.** Any web page the user visits can POST ``text/plain`` to a server on localhost or the
  LAN: such a "simple" request needs no CORS preflight, so the browser sends it and the server would
  act on it (the page just cannot read the answer). Browsers put an ``Origin`` header on every such
  request, so a request whose ``Origin`` is none of the server's own (same scheme://host:port as its
  ``Host``), a loopback origin (``is_loopback_origin``: ``localhost``, ``*.localhost``,
  ``127.0.0.0/8``, ``[::1]``, any port; a page there is served by a local process, which can call us
  directly anyway, and the Host allowlist keeps a rebound name from posing as one), or one listed with
  ``--cors-origin``/``--cors-origins`` (llama-server's flag: a comma list, ``localhost`` its keyword
  for the loopback origins, ``*`` any) gets 403, with or without a valid key: a foreign page cannot
  know the key anyway, and refusing it outright keeps the rule simple. A preflight (``OPTIONS``) from
  such an origin is answered as llama-server answers it, 204 without ``Access-Control-Allow-Origin``,
  so the browser itself stops the request it announced. Clients that send no ``Origin`` (curl,
  Python, the openai package) are unaffected.

The same-origin rule trusts ``Host``; the Host allowlist is what makes that trust safe.

``create_app`` installs ``security_middleware`` right inside the error middleware (a bug here still
answers JSON), hence inside the request counter (refusals are counted), and outside every other
middleware (a refused request takes no request-limit place). ``cors_headers`` is a response signal:
a streamed response sends its headers from inside the handler, past any middleware. The pure
helpers (key lists, key checking, origin and host parsing and matching) are tested without a server.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from aiohttp import web

from slotserver.api.bodies import error_body, json_response
from slotserver.api.hosts import HostAllowlist, is_localhost, parse_host
from slotserver.api.state import TENANT
from slotserver.config import ServerConfig

log = logging.getLogger(__name__)

# llama-server reads its --api-key from this variable when the flag is not given.
API_KEY_ENV = "LLAMA_API_KEY"
# llama-server's public endpoints: health checks and model listing must work for probes and clients
# that discover the server before they are configured.
EXEMPT_PATHS = frozenset({"/health", "/v1/health", "/models", "/v1/models"})
METRICS_PATH = "/metrics"  # exempt only with --metrics-no-auth (a Prometheus without credentials)
BEARER = "bearer"  # the Authorization scheme, compared case-insensitively (RFC 9110 section 11.1)
API_KEY_HEADER = "X-Api-Key"
ANY_ORIGIN = "*"  # --cors-origin '*': every origin is allowed
LOOPBACK_ORIGINS = "localhost"  # --cors-origins localhost (llama-server's keyword): loopback origins, any port
BROWSER_SCHEMES = frozenset({"http", "https"})  # the schemes a loopback web page is served with
# Ports browsers leave out of an Origin; "http://h" and "http://h:80" are the same origin.
DEFAULT_PORTS = {"http": 80, "https": 443}
# What a preflight may ask for: the methods the routes use, and the headers a browser client needs
# to send a key and a JSON body.
ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, X-Api-Key, Content-Type"
# An allowed origin's preflight may also ask for its own headers (the openai JS package sends
# X-Stainless-*); those named as RFC 9110 tokens are granted too, up to a bound.
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'+.^_`|~-]{1,64}")
MAX_EXTRA_HEADERS = 32
# Browsers cap this (Chromium at 2 hours); 10 minutes saves a preflight per request without making
# a changed --cors-origin take long to be seen.
PREFLIGHT_MAX_AGE_S = 600
INVALID_KEY = "Invalid API Key"  # llama-server's message, which clients may match on
# RFC 9110 requires a 401 to name the scheme it wants; llama-server omits it, clients ignore it.
WWW_AUTHENTICATE = "Bearer"
MAX_ECHOED_ORIGIN = 200  # characters of a refused Origin quoted back: the error stays small
# Bind addresses only this machine reaches; any other without a key is worth a warning at start.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
MAX_ECHOED_HOST = 200  # characters of a refused Host quoted back


# --- keys -------------------------------------------------------------------------------------------

def split_keys(values: Iterable[str], *, source: str) -> tuple[str, ...]:
    """Keys from ``--api-key`` values, each a comma list as llama-server's; ``source`` names the origin.

    An empty key is an error rather than skipped: ``--api-key ""`` meant to protect the server and
    must not silently leave it open.
    """
    keys = []
    for value in values:
        for key in value.split(","):
            key = key.strip()
            if not key:
                raise ValueError(f"{source}: empty API key in {value!r}")
            keys.append(key)
    return tuple(keys)


def read_key_file(path: str) -> tuple[str, ...]:
    """One key per line; blank lines and lines starting with ``#`` are ignored. No key is an error."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--api-key-file: cannot read {path}: {exc}") from None
    keys = tuple(s for s in (line.strip() for line in lines) if s and not s.startswith("#"))
    if not keys:
        raise ValueError(f"--api-key-file: {path} holds no key")
    return keys


def load_api_keys(*, flags: Iterable[str] | None, files: Iterable[str] | None,
                  environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Every configured key, in order, without duplicates.

    As in llama-server, ``LLAMA_API_KEY`` stands for ``--api-key`` when that flag is absent; key
    files add to either. An empty variable counts as unset (``export LLAMA_API_KEY=``).
    """
    keys: list[str] = []
    if flags:
        keys += split_keys(flags, source="--api-key")
    elif environ.get(API_KEY_ENV, "").strip():
        keys += split_keys([environ[API_KEY_ENV]], source=API_KEY_ENV)
    for path in files or ():
        keys += read_key_file(path)
    return tuple(dict.fromkeys(keys))


def key_digest(key: str) -> bytes:
    """Keys are compared as SHA-256 digests: equal lengths, so the comparison time tells nothing
    about a key's length either; ``surrogatepass`` lets any header text encode (never raises)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def key_index(candidate: str, digests: Iterable[bytes]) -> int | None:
    """Which key ``candidate`` is (its position), or None; every key is compared, no early exit."""
    given = key_digest(candidate)
    found = None
    for i, digest in enumerate(digests):
        if hmac.compare_digest(given, digest):
            found = i
    return found


def key_matches(candidate: str, digests: Iterable[bytes]) -> bool:
    return key_index(candidate, digests) is not None


def presented_keys(headers: Mapping[str, str]) -> list[str]:
    """The keys a request shows: a Bearer token and/or an ``X-Api-Key`` value (either may match)."""
    out = []
    scheme, _, token = headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() == BEARER and token.strip():
        out.append(token.strip())
    if (value := headers.get(API_KEY_HEADER, "").strip()):
        out.append(value)
    return out


def tenant_id(index: int) -> str:
    """The id a key's requests carry (``TENANT``): its 1-based position among the configured keys.
    Never the key itself, nor a hash of it, which a weak key would not survive in a log."""
    return f"key-{index + 1}"


def authorized(headers: Mapping[str, str], digests: tuple[bytes, ...]) -> str | None:
    """The tenant id of the key the request shows, or None. Each presented key is checked against
    every digest (no short-circuit); a Bearer token that matches wins over ``X-Api-Key``."""
    found = [i for i in [key_index(k, digests) for k in presented_keys(headers)] if i is not None]
    return tenant_id(found[0]) if found else None


def needs_key(path: str, *, metrics_no_auth: bool) -> bool:
    return path not in EXEMPT_PATHS and not (metrics_no_auth and path == METRICS_PATH)


# --- origins ----------------------------------------------------------------------------------------

def normalize_origin(text: str) -> str | None:
    """``scheme://host[:port]`` in canonical form (lower case, default port left out), or None when
    ``text`` is not a serialized origin (``null``, a path, credentials, a bad port...)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname or parts.username is not None or parts.password is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname.lower()
    if ":" in host:  # IPv6 literal: urlsplit dropped the brackets
        host = f"[{host}]"
    if port is None or port == DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def parse_cors_origin_list(text: str, *, source: str) -> list[str]:
    """One comma list as llama-server's ``--cors-origins`` takes it: origins normalized, ``*`` and
    the ``localhost`` keyword kept as they are, blank items skipped (``a,b,``). A malformed item is
    an error naming ``source``: the server must not start with another policy than meant."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item == ANY_ORIGIN or item.lower() == LOOPBACK_ORIGINS:
            out.append(item.lower())
            continue
        origin = normalize_origin(item)
        if origin is None:
            raise ValueError(f"{source}: {item!r} is not an origin (scheme://host[:port]), 'localhost' or '*'")
        out.append(origin)
    return out


def parse_cors_origins(values: Iterable[str] | None, lists: str | None = None) -> tuple[str, ...]:
    """The allowed origins: every ``--cors-origin`` value and the ``--cors-origins`` list (both comma
    lists; an origin holds no comma), in order, without duplicates."""
    out = []
    for value in values or ():
        out += parse_cors_origin_list(value, source="--cors-origin")
    if lists is not None:
        out += parse_cors_origin_list(lists, source="--cors-origins")
    return tuple(dict.fromkeys(out))


def is_loopback_origin(normal: str) -> bool:
    """Whether a normalized origin is a web page on this machine: ``http(s)://`` and ``localhost``, a
    name under ``.localhost``, an address in ``127.0.0.0/8`` or ``[::1]``, on any port. What
    llama-server's ``localhost`` keyword allows (it checks localhost, 127.0.0.1 and ::1)."""
    scheme, _, authority = normal.partition("://")
    parsed = parse_host(authority) if scheme in BROWSER_SCHEMES else None
    if parsed is None:
        return False
    if is_localhost(parsed.host):
        return True
    try:
        return parsed.is_ip and ipaddress.ip_address(parsed.host.strip("[]")).is_loopback
    except ValueError:  # "127.1": digits, but not an address a browser sends
        return False


def origin_allowed(origin: str, *, own: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a request carrying ``Origin: origin`` may be served. ``own`` is the server's origin as
    the request addressed it; ``allowed`` the parsed ``--cors-origin(s)`` entries. Loopback origins
    always may (the ``localhost`` keyword is what the default already allows)."""
    if ANY_ORIGIN in allowed:
        return True
    normal = normalize_origin(origin)
    return normal is not None and (normal == own or normal in allowed or is_loopback_origin(normal))


def own_origin(request: web.Request) -> str | None:
    """The origin the client addressed: this connection's scheme and the request's ``Host``."""
    return normalize_origin(f"{request.scheme}://{request.host}")


def host_refusal(request: web.Request, hosts: HostAllowlist) -> web.Response | None:
    """The 403 for a request whose ``Host`` is not allowed; None when it may go on."""
    if hosts.admits(request):
        return None
    value = request.headers["Host"]
    return refusal(403, f"host {value[:MAX_ECHOED_HOST]!r} not allowed; see --allowed-host", "permission_error")


# --- HTTP -------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    key_digests: tuple[bytes, ...]  # empty: no key needed
    metrics_no_auth: bool
    cors_origins: tuple[str, ...]
    hosts: HostAllowlist = HostAllowlist()  # IP literals and localhost names only

    @classmethod
    def from_config(cls, config: ServerConfig) -> "Policy":
        hosts = [h.strip() for h in config.host.split(",")]  # --host takes llama-server's comma list
        if not config.api_keys and any(h not in LOOPBACK_HOSTS for h in hosts):
            log.warning("listening on %s without an API key: anyone who can reach it can use it (--api-key)",
                        config.host)
        return cls(key_digests=tuple(key_digest(k) for k in config.api_keys),
                   metrics_no_auth=config.metrics_no_auth, cors_origins=config.cors_origins,
                   hosts=HostAllowlist.from_config(config.host, config.allowed_hosts))

    def allowed_origin(self, request: web.Request) -> str | None:
        """The request's ``Origin`` if it has one and it is allowed; else None. Never on a refused
        ``Host``: its 403 must not grant the rebinding page a read of itself (``cors_headers``)."""
        origin = request.headers.get("Origin")
        if origin is None or not self.hosts.admits(request):
            return None
        if not origin_allowed(origin, own=own_origin(request), allowed=self.cors_origins):
            return None
        return origin


def route_path(request: web.Request) -> str:
    """The path of the route that will run: exemption follows the handler, never a spelling of the
    URL; an unrouted request (only a 404 or 405 can answer it) falls back to its path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


def refusal(status: int, message: str, kind: str) -> web.Response:
    response = json_response(error_body(status, message, kind), status)
    if status == 401:
        response.headers["WWW-Authenticate"] = WWW_AUTHENTICATE
    return response


def allow_headers(requested: str) -> str:
    """``ALLOW_HEADERS`` and the well-formed names of ``Access-Control-Request-Headers`` (llama-server
    grants ``*``, which browsers do not apply to ``Authorization``)."""
    names = {h.lower(): h for h in ALLOW_HEADERS.split(", ")}
    for name in (h.strip() for h in requested.split(",")[:MAX_EXTRA_HEADERS]):
        if HEADER_NAME.fullmatch(name):
            names.setdefault(name.lower(), name)
    return ", ".join(names.values())


def preflight(origin: str | None, requested_headers: str = "") -> web.Response:
    """Any OPTIONS: 204. To an allowed origin, the CORS grant (the ACAO header is added on prepare);
    to a refused one none, as llama-server answers it: the browser then blocks the real request."""
    headers = {"Allow": ALLOW_METHODS}
    if origin is not None:
        headers.update({"Access-Control-Allow-Methods": ALLOW_METHODS,
                        "Access-Control-Allow-Headers": allow_headers(requested_headers),
                        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S)})
    return web.Response(status=204, headers=headers)


def security_middleware(policy: Policy):
    """Host first (403), then OPTIONS (204, no key: browsers send no credentials on a preflight; a
    grant only to an allowed origin), then Origin (403), then the key (401); only then does the
    handler run."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        if (refused := host_refusal(request, policy.hosts)) is not None:
            return refused
        origin = request.headers.get("Origin")
        allowed = policy.allowed_origin(request)
        if request.method == "OPTIONS":
            return preflight(allowed, request.headers.get("Access-Control-Request-Headers", ""))
        if origin is not None and allowed is None:
            message = f"origin {origin[:MAX_ECHOED_ORIGIN]!r} not allowed; see --cors-origins"
            return refusal(403, message, "permission_error")
        if policy.key_digests:
            tenant = authorized(request.headers, policy.key_digests)
            if tenant is not None:
                request[TENANT] = tenant  # whose learned drafter state the request uses (learning_scopes.py)
            elif needs_key(route_path(request), metrics_no_auth=policy.metrics_no_auth):
                return refusal(401, INVALID_KEY, "authentication_error")
        return await handler(request)

    return middleware


def cors_headers(policy: Policy):
    """``on_response_prepare`` signal: ``Access-Control-Allow-Origin`` on every response to an
    allowed Origin (a same-origin one included), streamed ones too."""

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        origin = policy.allowed_origin(request)
        if origin is None:
            return
        response.headers["Access-Control-Allow-Origin"] = origin
        vary = response.headers.get("Vary", "")
        if "origin" not in vary.lower():
            response.headers["Vary"] = f"{vary}, Origin" if vary else "Origin"

    return on_prepare
