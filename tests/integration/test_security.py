"""API keys, the browser Origin policy and the Host allowlist on real servers (slotserver/api/security.py).

Three small servers, one slot each: ``keyed`` (``--api-key k1,k2``, a key file with ``k3``,
``--metrics``, ``--cors-origin http://allowed.example``, llama-server's ``--cors-origins
localhost,http://listed.example``, ``--allowed-host my.lan``), ``scraped`` (a
key and ``--metrics-no-auth``) and ``open`` (no key: the default, where the Origin policy and the
Host allowlist alone stop a foreign page). Requests stay tiny (``n_predict`` <= 4).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import LiveServer
from tests.metrics.promtext import delta, parse

COMMON = ["-c", "1024", "-np", "1", "-t", "1", "--spec-type", "none"]
ALLOWED = "http://allowed.example"
LISTED = "http://listed.example"  # in --cors-origins' comma list
FOREIGN = "http://evil.example"
LOOPBACK_ORIGINS = ("http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8081")  # local web apps
TINY = {"prompt": "The capital of France is", "n_predict": 2, "temperature": 0.0}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0.0}
INVALID_KEY = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}


async def start(argv: list[str]) -> LiveServer:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LLAMA_API_KEY", raising=False)  # the environment would stand for --api-key
        return await LiveServer(COMMON + argv).start()


@pytest.fixture(scope="module")
async def keyed(tmp_path_factory):
    key_file = tmp_path_factory.mktemp("keys") / "api-keys"
    key_file.write_text("# the editor plugin's key\n\nk3\n")
    srv = await start(["--api-key", "k1,k2", "--api-key-file", str(key_file), "--metrics",
                       "--cors-origin", ALLOWED, "--cors-origins", f"localhost,{LISTED}", "--allowed-host", "my.lan"])
    yield srv
    await srv.stop()


@pytest.fixture(scope="module")
async def scraped():
    srv = await start(["--api-key", "k1", "--metrics", "--metrics-no-auth"])
    yield srv
    await srv.stop()


@pytest.fixture(scope="module")
async def open_server():
    srv = await start([])
    yield srv
    await srv.stop()


async def call(srv: LiveServer, method: str, path: str, body=None, **headers: str):
    """(status, headers, JSON or text). ``body``: a dict is sent as JSON text, a str as is."""
    data = json.dumps(body) if isinstance(body, dict) else body
    headers = {k.replace("_", "-"): v for k, v in headers.items()}
    async with srv.http.request(method, srv.url + path, data=data, headers=headers) as resp:
        text = await resp.text()
        try:
            out = json.loads(text)
        except ValueError:
            out = text
        return resp.status, resp.headers, out


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def finished(srv: LiveServer) -> int:
    """Completions the engine finished: a refused request must not add one."""
    return srv.state.runner.stats.n_requests_finished


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/completion", TINY), ("POST", "/v1/chat/completions", CHAT), ("GET", "/metrics", None),
    ("GET", "/slots", None),
])
@pytest.mark.parametrize("headers", [{}, bearer("k9"), {"X-Api-Key": "k9"}, {"Authorization": "k1"}],
                         ids=["none", "wrong-bearer", "wrong-x-api-key", "no-bearer-scheme"])
async def test_missing_or_wrong_key_is_401(keyed, method, path, body, headers):
    before = finished(keyed)
    status, _, out = await call(keyed, method, path, body, **headers)
    assert (status, out) == (401, INVALID_KEY)
    assert finished(keyed) == before


@pytest.mark.parametrize("key", ["k1", "k2", "k3"], ids=["flag-1", "flag-2", "key-file"])
@pytest.mark.parametrize("header", ["bearer", "x-api-key"])
async def test_every_key_works_in_either_header(keyed, key, header):
    headers = bearer(key) if header == "bearer" else {"X-Api-Key": key}
    status, _, out = await call(keyed, "POST", "/completion", TINY, **headers)
    assert status == 200 and out["tokens_predicted"] == 2
    status, _, out = await call(keyed, "POST", "/v1/chat/completions", CHAT, **headers)
    assert status == 200 and out["choices"][0]["message"]["role"] == "assistant"
    assert (await call(keyed, "GET", "/slots", **headers))[0] == 200


async def test_exempt_endpoints_need_no_key(keyed):
    for path in ("/health", "/v1/health", "/v1/models", "/models"):
        assert (await call(keyed, "GET", path))[0] == 200, path


async def test_metrics_no_auth_opens_metrics_only(scraped):
    status, _, text = await call(scraped, "GET", "/metrics")
    assert status == 200 and "slotserver_http_requests_total" in text
    status, _, out = await call(scraped, "POST", "/completion", TINY)
    assert (status, out) == (401, INVALID_KEY)
    assert (await call(scraped, "GET", "/slots"))[0] == 401


async def test_refused_requests_are_counted(keyed):
    async def scrape():
        status, _, text = await call(keyed, "GET", "/metrics", **bearer("k1"))
        assert status == 200
        return parse(text)

    before = await scrape()
    await call(keyed, "POST", "/completion", TINY)
    await call(keyed, "POST", "/completion", TINY, Origin=FOREIGN, X_Api_Key="k1")
    after = await scrape()
    assert delta(after, before, "slotserver_http_requests_total", endpoint="/completion",
                 outcome="client_error") == 2


@pytest.mark.parametrize("srv_name, headers", [
    ("keyed", {"X-Api-Key": "k1"}),  # a valid key does not help: a page cannot have it anyway
    ("keyed", {}),
    ("open", {}),  # the default configuration: the Origin policy alone refuses it
])
async def test_cross_origin_text_plain_post_is_403_before_any_work(keyed, open_server, srv_name, headers):
    srv = keyed if srv_name == "keyed" else open_server
    before = finished(srv)
    status, resp_headers, out = await call(srv, "POST", "/completion", json.dumps(TINY), Origin=FOREIGN,
                                           Content_Type="text/plain", **headers)
    assert status == 403
    assert out["error"]["code"] == 403 and out["error"]["type"] == "permission_error"
    assert FOREIGN in out["error"]["message"] and "not allowed" in out["error"]["message"]
    assert "Access-Control-Allow-Origin" not in resp_headers
    assert finished(srv) == before


async def test_same_origin_and_allowed_origin_pass_with_the_header(keyed):
    for origin in (keyed.url, ALLOWED):
        status, headers, out = await call(keyed, "POST", "/completion", TINY, Origin=origin, X_Api_Key="k1")
        assert status == 200 and out["tokens_predicted"] == 2, origin
        assert headers["Access-Control-Allow-Origin"] == origin and "Origin" in headers["Vary"]
    # A streamed answer sends its headers from inside the handler; it carries the header too.
    status, headers, text = await call(keyed, "POST", "/completion", {**TINY, "stream": True}, Origin=ALLOWED,
                                       X_Api_Key="k1")
    assert status == 200 and headers["Access-Control-Allow-Origin"] == ALLOWED
    assert text.startswith("data: ")


async def test_preflight(keyed):
    # A refused origin's preflight is answered as llama-server answers it, without a grant: the
    # browser then does not send the request it announced.
    status, headers, _ = await call(keyed, "OPTIONS", "/v1/chat/completions", Origin=FOREIGN, **PREFLIGHT)
    assert status == 204 and "Access-Control-Allow-Origin" not in headers
    assert "Access-Control-Allow-Methods" not in headers and "Access-Control-Allow-Headers" not in headers
    status, headers, _ = await call(keyed, "OPTIONS", "/v1/chat/completions", Origin=ALLOWED, **PREFLIGHT)
    assert status == 204  # no key: browsers send none on a preflight
    assert headers["Access-Control-Allow-Origin"] == ALLOWED and headers["Vary"] == "Origin"
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "x-api-key", "content-type"} <= allowed


async def test_cors_origins_list_allows_its_origins_and_localhost(keyed):
    for origin in (LISTED, *LOOPBACK_ORIGINS):
        status, headers, _ = await call(keyed, "OPTIONS", "/v1/chat/completions", Origin=origin, **PREFLIGHT)
        assert status == 204 and headers["Access-Control-Allow-Origin"] == origin, origin
        status, headers, out = await call(keyed, "POST", "/v1/chat/completions", CHAT, Origin=origin,
                                          Authorization="Bearer k3")
        assert status == 200 and out["usage"]["completion_tokens"] == 2, origin
        assert headers["Access-Control-Allow-Origin"] == origin
    # The origin passes; the key is still needed.
    status, _, out = await call(keyed, "POST", "/completion", TINY, Origin=LISTED)
    assert (status, out) == (401, INVALID_KEY)


async def test_loopback_origins_work_by_default_and_a_foreign_simple_post_is_still_refused(open_server):
    """A web app on another local port can call a default server; a foreign page's simple POST,
    which no preflight precedes, is still refused before any work (its preflight gets no grant)."""
    before = finished(open_server)
    for origin in LOOPBACK_ORIGINS:
        status, headers, out = await call(open_server, "POST", "/completion", TINY, Origin=origin,
                                          Content_Type="application/json")
        assert status == 200 and out["tokens_predicted"] == 2, origin
        assert headers["Access-Control-Allow-Origin"] == origin and "Origin" in headers["Vary"]
    assert finished(open_server) == before + len(LOOPBACK_ORIGINS)
    status, headers, _ = await call(open_server, "OPTIONS", "/completion", Origin=FOREIGN, **PREFLIGHT)
    assert status == 204 and "Access-Control-Allow-Origin" not in headers
    status, headers, out = await call(open_server, "POST", "/completion", json.dumps(TINY), Origin=FOREIGN,
                                      Content_Type="text/plain")
    assert status == 403 and out["error"]["message"] == f"origin {FOREIGN!r} not allowed; see --cors-origins"
    assert "Access-Control-Allow-Origin" not in headers
    assert finished(open_server) == before + len(LOOPBACK_ORIGINS)


@pytest.mark.parametrize("srv_name, headers", [("keyed", bearer("k2")), ("open", {})])
async def test_curl_d_form_post_without_origin_still_completes(keyed, open_server, srv_name, headers):
    srv = keyed if srv_name == "keyed" else open_server
    status, resp_headers, out = await call(srv, "POST", "/completion", json.dumps(TINY),
                                           Content_Type="application/x-www-form-urlencoded", **headers)
    assert status == 200 and out["tokens_predicted"] == 2
    assert "Access-Control-Allow-Origin" not in resp_headers


async def test_per_key_learning_gives_each_key_its_own_drafters():
    """--spec-learning per-key: the key a request shows selects the draft chain it learns into."""
    srv = await start(["--api-key", "k1,k2", "--spec-type", "ngram-mod", "--spec-learning", "per-key"])
    try:
        chains = srv.state.runner.chains
        for key in ("k1", "k2", "k1"):
            status, _, _ = await call(srv, "POST", "/completion", TINY, Authorization=f"Bearer {key}")
            assert status == 200
        assert chains.n_chains == 2 and chains.for_tenant("key-1") is not chains.for_tenant("key-2")
        assert chains.for_tenant("key-1") is not srv.state.runner.chain  # the shared, saved one stays apart
    finally:
        await srv.stop()


def host_refused(host: str) -> dict:
    return {"error": {"code": 403, "message": f"host {host!r} not allowed; see --allowed-host",
                      "type": "permission_error"}}


async def test_dns_rebinding_hosts_are_403_and_loopback_hosts_work(open_server):
    """A rebinding page's requests name the attacker's host (with a matching Origin); curl, llama.vim
    and Python clients name a loopback address or localhost and send no Origin."""
    port = open_server.port
    rebind = f"rebind.attacker.example:{port}"
    before = finished(open_server)
    for method, path, body, headers in [
        ("GET", "/props", None, {"Host": "evil.example"}),
        ("GET", "/props", None, {"Host": rebind, "Origin": f"http://{rebind}"}),
        ("POST", "/completion", json.dumps(TINY), {"Host": rebind, "Origin": f"http://{rebind}",
                                                   "Content-Type": "text/plain"}),
        ("POST", "/v1/chat/completions", CHAT, {"Host": rebind, "Origin": f"http://{rebind}"}),
    ]:
        status, resp_headers, out = await call(open_server, method, path, body, **headers)
        assert (status, out) == (403, host_refused(headers["Host"])), (method, path, headers)
        assert "Access-Control-Allow-Origin" not in resp_headers
    assert finished(open_server) == before  # refused before any work
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
        status, _, out = await call(open_server, "GET", "/props", Host=host)
        assert status == 200 and out["total_slots"] == 1, host
        status, _, out = await call(open_server, "POST", "/completion", TINY, Host=host)
        assert status == 200 and out["tokens_predicted"] == 2, host
    assert finished(open_server) == before + 4


async def test_allowed_host_admits_its_name_only(keyed):
    for host in ("my.lan", f"my.lan:{keyed.port}", "MY.LAN."):
        status, _, out = await call(keyed, "POST", "/completion", TINY, Host=host, X_Api_Key="k1")
        assert status == 200 and out["tokens_predicted"] == 2, host
    for host in ("other.lan", f"my.lan.evil.example:{keyed.port}"):
        status, _, out = await call(keyed, "POST", "/completion", TINY, Host=host, X_Api_Key="k1")
        assert (status, out) == (403, host_refused(host)), host
