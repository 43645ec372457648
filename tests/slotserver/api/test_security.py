"""API keys and the Origin policy (slotserver/api/security.py): the pure helpers, the middleware on a
tiny app, and the flags reaching ``ServerConfig``; no model, milliseconds."""

from __future__ import annotations

import asyncio
import hmac

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from slotserver.api import security
from slotserver.api.hosts import HostAllowlist, HostName, parse_allowed_hosts, parse_host
from slotserver.api.security import (
    ANY_ORIGIN,
    Policy,
    authorized,
    cors_headers,
    is_loopback_origin,
    key_digest,
    key_matches,
    load_api_keys,
    needs_key,
    normalize_origin,
    origin_allowed,
    parse_cors_origins,
    presented_keys,
    read_key_file,
    security_middleware,
    split_keys,
)
from slotserver.api.state import TENANT
from slotserver.flags.command_line import build_parser, config_from_args, parse_args

# --- keys --------------------------------------------------------------------------------------------


def test_split_keys_takes_comma_lists_and_repeats():
    assert split_keys(["k1,k2", " k3 "], source="--api-key") == ("k1", "k2", "k3")


@pytest.mark.parametrize("values", [[""], ["k1,,k2"], ["k1,"], [" "]])
def test_an_empty_key_is_an_error_not_an_open_server(values):
    with pytest.raises(ValueError, match="empty API key"):
        split_keys(values, source="--api-key")


def test_key_file_skips_blank_lines_and_comments(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# editor plugin\nk1\n\n  k2  \n#k3\n")
    assert read_key_file(str(path)) == ("k1", "k2")


def test_key_file_without_a_key_or_unreadable_is_an_error(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# nothing\n\n")
    with pytest.raises(ValueError, match="holds no key"):
        read_key_file(str(path))
    with pytest.raises(ValueError, match="cannot read"):
        read_key_file(str(tmp_path / "missing"))


def test_environment_stands_for_the_flag_as_in_llama_server(tmp_path):
    env = {"LLAMA_API_KEY": "e1,e2"}
    assert load_api_keys(flags=None, files=None, environ=env) == ("e1", "e2")
    assert load_api_keys(flags=["f1"], files=None, environ=env) == ("f1",)  # the flag wins
    path = tmp_path / "keys"
    path.write_text("k1\nf1\n")
    assert load_api_keys(flags=None, files=[str(path)], environ=env) == ("e1", "e2", "k1", "f1")
    assert load_api_keys(flags=["f1"], files=[str(path)], environ={}) == ("f1", "k1")  # no duplicates
    assert load_api_keys(flags=None, files=None, environ={"LLAMA_API_KEY": ""}) == ()
    assert load_api_keys(flags=None, files=None, environ={}) == ()


def test_key_matches_any_configured_key_only():
    digests = tuple(key_digest(k) for k in ("k1", "k2"))
    assert key_matches("k1", digests) and key_matches("k2", digests)
    assert not key_matches("k3", digests) and not key_matches("", digests) and not key_matches("k1 ", digests)
    assert not key_matches("\ud800é", digests)  # any header text compares, none raises


def test_key_matches_compares_with_every_key_even_after_a_match(monkeypatch):
    calls, compare = [], hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", counting)
    digests = tuple(key_digest(k) for k in ("k1", "k2", "k3"))
    assert key_matches("k1", digests)
    assert len(calls) == 3
    assert all(len(a) == len(b) == 32 for a, b in calls)  # digests: the key lengths do not show


def test_presented_keys_bearer_and_x_api_key():
    assert presented_keys({"Authorization": "Bearer k1"}) == ["k1"]
    assert presented_keys({"Authorization": "bearer  k1 "}) == ["k1"]
    assert presented_keys({"X-Api-Key": "k2"}) == ["k2"]
    assert presented_keys({"Authorization": "Bearer k1", "X-Api-Key": "k2"}) == ["k1", "k2"]
    assert presented_keys({"Authorization": "Basic azE6"}) == []
    assert presented_keys({"Authorization": "Bearer "}) == []
    assert presented_keys({}) == []


def test_authorized_when_either_presented_key_matches_and_names_the_key_by_position():
    digests = (key_digest("k1"), key_digest("k2"))
    assert authorized({"Authorization": "Basic x", "X-Api-Key": "k1"}, digests) == "key-1"
    assert authorized({"Authorization": "Bearer k2", "X-Api-Key": "bad"}, digests) == "key-2"
    assert authorized({"Authorization": "Bearer k2", "X-Api-Key": "k1"}, digests) == "key-2"  # Bearer first
    assert authorized({"Authorization": "Bearer bad"}, digests) is None
    assert authorized({}, digests) is None


def test_exempt_paths_and_metrics():
    for path in ("/health", "/v1/health", "/models", "/v1/models"):
        assert not needs_key(path, metrics_no_auth=False)
    for path in ("/completion", "/v1/chat/completions", "/slots", "/props", "/health/", "/metrics"):
        assert needs_key(path, metrics_no_auth=False)
    assert not needs_key("/metrics", metrics_no_auth=True)


# --- origins -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, normal", [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("HTTP://LocalHost:8080", "http://localhost:8080"),
    ("http://example.com:80", "http://example.com"),
    ("https://example.com:443/", "https://example.com"),
    ("https://example.com:8443", "https://example.com:8443"),
    ("http://[::1]:8080", "http://[::1]:8080"),
    ("vscode-webview://abc123", "vscode-webview://abc123"),
    ("null", None),
    ("http://example.com/path", None),
    ("http://user@example.com", None),
    ("http://example.com:99999", None),
    ("http://example.com?q", None),
    ("", None),
])
def test_normalize_origin(text, normal):
    assert normalize_origin(text) == normal


def test_parse_cors_origins():
    assert parse_cors_origins(None) == ()
    assert parse_cors_origins(["http://A.example:80", "http://a.example", "*"]) == ("http://a.example", "*")
    with pytest.raises(ValueError, match="not an origin"):
        parse_cors_origins(["a.example"])


def test_cors_origins_is_llama_servers_comma_list_with_its_keywords():
    assert parse_cors_origins(None, "localhost, HTTP://B.example:80,,https://c.example:8443") == (
        "localhost", "http://b.example", "https://c.example:8443")
    assert parse_cors_origins(["http://a.example,http://b.example"], "LOCALHOST,*,http://a.example") == (
        "http://a.example", "http://b.example", "localhost", "*")  # both flags add to one list
    with pytest.raises(ValueError, match="^--cors-origins: 'b.example' is not an origin"):
        parse_cors_origins(None, "http://a.example,b.example")
    with pytest.raises(ValueError, match="^--cors-origin: "):
        parse_cors_origins(["http://a.example/path"])


@pytest.mark.parametrize("origin", [
    "http://localhost:5173", "http://localhost", "https://localhost:8443", "http://app.localhost:3000",
    "http://127.0.0.1:3000", "http://127.5.6.7", "http://[::1]:8081", "HTTP://LOCALHOST.:80",
])
def test_loopback_origins_are_allowed_by_default(origin):
    assert is_loopback_origin(normalize_origin(origin))
    assert origin_allowed(origin, own="http://127.0.0.1:8080", allowed=())


@pytest.mark.parametrize("origin", [
    "http://localhost.evil.example", "http://127.0.0.1.evil.example", "http://evil.example:3000",
    "http://192.168.1.20:3000", "http://0.0.0.0:3000", "http://[::2]", "http://[::ffff:127.0.0.1]",
    "http://127.1", "ftp://localhost", "chrome-extension://localhost", "null",
])
def test_other_origins_are_not_loopback(origin):
    normal = normalize_origin(origin)
    assert normal is None or not is_loopback_origin(normal)
    assert not origin_allowed(origin, own="http://127.0.0.1:8080", allowed=("localhost",))


def test_origin_allowed_same_origin_listed_or_any():
    own = "http://127.0.0.1:8080"
    assert origin_allowed("http://127.0.0.1:8080", own=own, allowed=())
    assert not origin_allowed("http://192.168.1.20:8081", own=own, allowed=())
    assert not origin_allowed("https://[::2]:8080", own=own, allowed=())
    assert not origin_allowed("http://evil.example", own=own, allowed=())
    assert not origin_allowed("null", own=own, allowed=())
    assert not origin_allowed("http://evil.example", own=None, allowed=())
    assert origin_allowed("http://app.example:80", own=own, allowed=("http://app.example",))
    assert origin_allowed("null", own=own, allowed=(ANY_ORIGIN,))


# --- hosts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, parsed", [
    ("127.0.0.1:8080", HostName("127.0.0.1", 8080, True)),
    ("LocalHost", HostName("localhost", None, False)),
    ("localhost.:8080", HostName("localhost", 8080, False)),  # the FQDN's trailing dot
    ("[::1]:8080", HostName("[::1]", 8080, True)),
    ("[0:0::1]", HostName("[::1]", None, True)),
    ("127.1:80", HostName("127.1", 80, True)),  # a numeric last label: no DNS name ends so
    ("my_service:8080", HostName("my_service", 8080, False)),
    ("rebind.attacker.example:8080", HostName("rebind.attacker.example", 8080, False)),
    ("::1", None), ("[::1", None), ("[::1]x", None), ("[evil]:80", None), ("a b", None), ("a..b", None),
    ("a.example:", None), ("a.example:99999", None), ("a.example:+80", None), ("user@a.example", None),
    ("http://a.example", None), ("", None), (".", None), ("ä.example", None),
])
def test_parse_host(value, parsed):
    assert parse_host(value) == parsed


def test_parse_allowed_hosts_normalizes_and_refuses_what_is_not_a_host():
    assert parse_allowed_hosts(None) == ()
    assert parse_allowed_hosts(["My.Lan.", "my.lan", "box:8080", " * "]) == ("my.lan", "box:8080", "*")
    for bad in ("http://my.lan", "my.lan/", "my lan", "my.lan:port", ""):
        with pytest.raises(ValueError, match="--allowed-host"):
            parse_allowed_hosts([bad])


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "127.0.0.2", "localhost:8080", "LOCALHOST", "app.localhost:1",
                                  "[::1]:8080", "192.168.1.20:8080", "[fe80::1]", "10.0.0.1"])
def test_ip_literals_and_localhost_names_are_always_allowed(host):
    assert HostAllowlist.from_config("127.0.0.1", ()).allows(host)
    assert HostAllowlist.from_config("0.0.0.0", ()).allows(host)


@pytest.mark.parametrize("host", ["evil.example", "rebind.attacker.example:8080", "localhost.evil.example",
                                  "evillocalhost", "server:8080", "", "a b", "[::1", "127.0.0.1:99999"])
def test_names_that_could_be_rebound_are_refused_by_default(host):
    assert not HostAllowlist.from_config("127.0.0.1", ()).allows(host)
    assert not HostAllowlist.from_config("::", ()).allows(host)


def test_host_and_allowed_hosts_admit_their_names():
    hosts = HostAllowlist.from_config("my.box", parse_allowed_hosts(["My.Lan", "server:8080"]))
    assert hosts.allows("my.box:8080") and hosts.allows("MY.BOX.")  # the --host name, any port
    assert hosts.allows("my.lan") and hosts.allows("my.lan:1234")  # a name without a port: any port
    assert hosts.allows("server:8080") and not hosts.allows("server:8081") and not hosts.allows("server")
    assert not hosts.allows("evil.example:8080")
    assert HostAllowlist.from_config("127.0.0.1", ["*"]).allows("evil.example:8080")
    assert not HostAllowlist.from_config("0.0.0.0", ()).allows("0.0.0.0.evil.example")


# --- the middleware on a tiny app ---------------------------------------------------------------------


async def ok(request: web.Request) -> web.Response:
    return web.json_response({"tenant": request.get(TENANT)})


async def streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)  # headers leave here, inside the handler
    await response.write(b"data: {}\n\n")
    return response


@pytest.fixture
async def client():
    policy = Policy(key_digests=(key_digest("k1"), key_digest("k2")), metrics_no_auth=False, cors_origins=("http://app.example",))
    app = web.Application(middlewares=[security_middleware(policy)])
    app.on_response_prepare.append(cors_headers(policy))
    app.router.add_post("/completion", ok)
    app.router.add_post("/stream", streamed)
    app.router.add_get("/health", ok)
    app.router.add_get("/metrics", ok)
    async with TestClient(TestServer(app)) as c:
        yield c


async def test_no_key_wrong_key_right_key(client):
    for headers in ({}, {"Authorization": "Bearer nope"}, {"X-Api-Key": "nope"}):
        resp = await client.post("/completion", data="{}", headers=headers)
        assert resp.status == 401
        assert await resp.json() == {"error": {"code": 401, "message": "Invalid API Key",
                                               "type": "authentication_error"}}
        assert resp.headers["WWW-Authenticate"] == "Bearer"
    for headers, tenant in (({"Authorization": "Bearer k1"}, "key-1"), ({"X-Api-Key": "k2"}, "key-2")):
        resp = await client.post("/completion", headers=headers)
        assert resp.status == 200 and (await resp.json())["tenant"] == tenant  # learning_scopes.py's per-key scope
    assert (await (await client.get("/health")).json())["tenant"] is None
    assert (await client.get("/metrics")).status == 401
    assert (await client.get("/nowhere")).status == 401  # no key: not even which paths exist


async def test_foreign_origin_403_before_the_key(client):
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "http://evil.example", "X-Api-Key": "k1"}):
        resp = await client.post("/completion", data="{}", headers={**headers, "Content-Type": "text/plain"})
        assert resp.status == 403
        body = await resp.json()
        assert body["error"]["type"] == "permission_error" and "not allowed" in body["error"]["message"]
        assert "Access-Control-Allow-Origin" not in resp.headers


async def test_loopback_origin_passes_with_the_header_and_still_needs_the_key(client):
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8081"):
        resp = await client.post("/completion", headers={"Origin": origin, "X-Api-Key": "k1"})
        assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == origin
        resp = await client.post("/completion", headers={"Origin": origin, "Content-Type": "text/plain"})
        assert resp.status == 401


async def test_foreign_host_403_before_routing_origin_and_key(client):
    rebind = {"Host": "rebind.attacker.example:8080", "Origin": "http://rebind.attacker.example:8080"}
    for method, path, headers in (("POST", "/completion", {"Host": "evil.example"}),
                                  ("POST", "/completion", {**rebind, "X-Api-Key": "k1"}),
                                  ("GET", "/health", rebind), ("GET", "/nowhere", rebind),
                                  ("OPTIONS", "/completion", rebind)):
        resp = await client.request(method, path, headers=headers)
        assert resp.status == 403, (method, path, headers)
        assert "Access-Control-Allow-Origin" not in resp.headers  # "same origin" as the refused Host: no grant
        assert await resp.json() == {"error": {
            "code": 403, "message": f"host {headers['Host']!r} not allowed; see --allowed-host",
            "type": "permission_error"}}
    assert (await client.post("/completion", headers={"Host": f"localhost:{client.port}", "X-Api-Key": "k1"})).status == 200


async def raw_exchange(client, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.read(), 10)  # HTTP/1.0 and Connection: close end with EOF
    finally:
        writer.close()


async def test_no_host_is_served_on_http_1_0_only_and_two_hosts_never(client):
    assert (await raw_exchange(client, b"GET /health HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.0 200")
    # aiohttp's parser refuses these two before any middleware (the docstring relies on it).
    answer = await raw_exchange(client, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.split(b" ", 2)[1] == b"400" and b"Host" in answer
    answer = await raw_exchange(client, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
                                        b"Connection: close\r\n\r\n")
    assert answer.split(b" ", 2)[1] == b"400" and b"Host" in answer


async def test_same_and_allowed_origins_get_the_header_streamed_too(client):
    same = f"http://{client.host}:{client.port}"
    for origin in (same, "http://app.example"):
        for path in ("/completion", "/stream"):
            resp = await client.post(path, headers={"Origin": origin, "X-Api-Key": "k1"})
            assert resp.status == 200, origin
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            assert "Origin" in resp.headers["Vary"]


async def test_options_preflight(client):
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    resp = await client.options("/completion", headers={**ask, "Origin": "http://evil.example"})
    assert resp.status == 204  # as llama-server: answered, but without a grant the browser stops
    assert "Access-Control-Allow-Origin" not in resp.headers and "Access-Control-Allow-Methods" not in resp.headers
    resp = await client.options("/completion", headers={**ask, "Origin": "http://localhost:5173"})
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    # The openai JS package's own headers are granted to an allowed origin; a malformed name is not.
    asked = "authorization, x-stainless-os, x-stainless-lang, bad header, *"
    resp = await client.options("/completion", headers={"Access-Control-Request-Method": "POST",
                                                        "Access-Control-Request-Headers": asked,
                                                        "Origin": "http://app.example"})
    granted = [h.strip() for h in resp.headers["Access-Control-Allow-Headers"].split(",")]
    assert granted == ["Authorization", "X-Api-Key", "Content-Type", "x-stainless-os", "x-stainless-lang"]
    resp = await client.options("/completion", headers={**ask, "Origin": "http://app.example"})
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "http://app.example"
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in resp.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "x-api-key", "content-type"} <= allowed
    assert resp.headers["Vary"] == "Origin"
    assert (await client.options("/completion")).status == 204  # no Origin, no key: still no 405


# --- the command line ----------------------------------------------------------------------------------


def config_for(*flags: str):
    return config_from_args(build_parser().parse_args(["-m", "/nonexistent/model.gguf", *flags]))


def test_flags_reach_the_config_and_keys_stay_out_of_its_repr(monkeypatch, tmp_path):
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    path = tmp_path / "keys"
    path.write_text("k3\n")
    config = config_for("--api-key", "k1,k2", "--api-key-file", str(path), "--metrics-no-auth",
                        "--cors-origin", "HTTP://App.example:80", "--cors-origin", "*")
    assert config.api_keys == ("k1", "k2", "k3") and config.metrics_no_auth
    assert config.cors_origins == ("http://app.example", "*")
    assert "k1" not in repr(config)
    assert config_for().api_keys == () and config_for().cors_origins == ()
    both = config_for("--cors-origin", "http://a.example", "--cors-origins", "localhost,http://b.example")
    assert both.cors_origins == ("http://a.example", "localhost", "http://b.example")

    def from_env(*flags: str):
        environ = {"LLAMA_ARG_CORS_ORIGINS": "http://c.example,localhost"}
        return config_from_args(parse_args(["-m", "/nonexistent/model.gguf", *flags], environ))

    assert from_env().cors_origins == ("http://c.example", "localhost")
    assert from_env("--cors-origins", "*").cors_origins == ("*",)  # the flag wins over the variable
    assert config_for("--allowed-host", "My.Lan", "--allowed-host", "box:8080").allowed_hosts == ("my.lan", "box:8080")
    monkeypatch.setenv("LLAMA_API_KEY", "e1")
    assert config_for().api_keys == ("e1",)


@pytest.mark.parametrize("flags", [["--api-key", ""], ["--api-key-file", "/nonexistent/keys"],
                                   ["--cors-origin", "app.example"], ["--cors-origins", "localhost,app.example"],
                                   ["--allowed-host", "http://my.lan"]])
def test_bad_flags_stop_the_start(flags):
    with pytest.raises(ValueError):
        config_for(*flags)


@pytest.mark.parametrize("host,warned", [("127.0.0.1,::1", False), ("localhost", False),
                                         ("127.0.0.1,0.0.0.0", True), ("0.0.0.0", True)])
def test_the_no_key_warning_reads_a_host_list_address_by_address(caplog, host, warned):
    config = config_from_args(parse_args(["--host", host], environ={}))
    with caplog.at_level("WARNING", logger="slotserver.api.security"):
        security.Policy.from_config(config)
    assert ("without an API key" in caplog.text) is warned
