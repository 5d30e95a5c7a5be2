"""The chat page's HTTP contract (GET / and HEAD /), without a browser: the
headers, the element ids the page's script and test_chat_browser.py use, no
external resource, the page open while the API stays behind --api-key, and
the page's number fields accepted by the server with the same limits."""
import http.client
import json
import re

import pytest
import requests

KEY = "page-test-key"
AUTH = {"Authorization": "Bearer " + KEY}

# Valid values for each number field of the page (its element id = the request field).
FIELD_VALUES = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
                "presence_penalty": 0.5, "frequency_penalty": 0.5, "max_tokens": 4, "seed": 1234}


@pytest.fixture(scope="module")
def key_server():
    from conftest import SERVER_THREADS, Server, stories_model
    srv = Server(["-m", stories_model(), "--chat-template", "chatml", "--api-key", KEY, "-np", "2", "-c", "256",
                  "-t", SERVER_THREADS])
    yield srv
    assert srv.stop() == 0, srv.log_text()[-4000:]


@pytest.fixture(scope="module")
def page(key_server):
    r = requests.get(key_server.url + "/", timeout=10)
    assert r.status_code == 200, r.text
    return r


def number_inputs(html):
    """{id: {attr: value}} for every <input type="number"> of the page."""
    out = {}
    for tag in re.findall(r"<input\b[^>]*>", html):
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag))
        if attrs.get("type") == "number":
            out[attrs["id"]] = attrs
    return out


def test_get_serves_the_page_without_the_key(page):
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert page.headers["Cache-Control"] == "no-cache"
    assert re.fullmatch(r'W/"[0-9a-f]{16}"', page.headers["ETag"])
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert page.text.startswith("<!doctype html>")
    assert page.text.rstrip().endswith("</html>")


def test_the_page_has_its_controls(page):
    for element_id in ["messages", "input", "send", "stop", "new-chat", "settings-toggle", "params", "api-key",
                       "system", "kv_policy", "extra", "speed", "error", "model", *FIELD_VALUES]:
        assert f'id="{element_id}"' in page.text, element_id
    assert "v1/chat/completions" in page.text
    assert "include_usage: true" in page.text and "stream: true" in page.text
    assert "AbortController" in page.text


def test_no_external_resources(page):
    html = page.text
    assert not re.search(r"https?://", html, re.I), "the page names an absolute URL"
    refs = re.findall(r'\b(?:src|href|action|poster|srcset)\s*=\s*["\']([^"\']*)', html, re.I)
    assert all(r.startswith("data:") for r in refs), refs
    assert not re.search(r"@import|url\(\s*['\"]?(?!data:)", html, re.I), "the CSS loads something"
    assert "//" not in "".join(refs)
    # fetch() only this server's own API, by relative path.
    for target in re.findall(r'fetch\(\s*"([^"]*)"', html):
        assert target.startswith("v1/"), target


def test_head_and_revalidation(key_server, page):
    head = requests.head(key_server.url + "/", timeout=10)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["Content-Type"] == "text/html; charset=utf-8"
    assert head.headers["ETag"] == page.headers["ETag"]
    assert head.headers["Content-Length"] == page.headers["Content-Length"]  # both gzip: requests asks for it
    plain = requests.head(key_server.url + "/", headers={"Accept-Encoding": "identity"}, timeout=10)
    assert int(plain.headers["Content-Length"]) == len(page.content)
    again = requests.get(key_server.url + "/", headers={"If-None-Match": page.headers["ETag"]}, timeout=10)
    assert again.status_code == 304 and again.content == b""
    assert again.headers["Cache-Control"] == "no-cache"
    stale = requests.get(key_server.url + "/", headers={"If-None-Match": 'W/"0000000000000000"'}, timeout=10)
    assert stale.status_code == 200 and stale.content == page.content


def test_the_api_stays_behind_the_key(key_server):
    for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/index.html")]:
        r = requests.request(method, key_server.url + path, json={}, timeout=10)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"]["code"] == "invalid_api_key"
    assert requests.get(key_server.url + "/v1/models", headers=AUTH, timeout=10).status_code == 200
    # The page is open to GET/HEAD only; POST / is an unknown route.
    r = requests.post(key_server.url + "/", data="x", timeout=10)
    assert r.status_code == 404 and "error" in r.json()


def test_a_refused_post_leaves_the_connection_usable(key_server):
    """The page's first steps on one keep-alive connection, as a browser sends
    them: a chat POST without the key (401, its body never read by a handler),
    then GET /v1/models with the key must be a 200, not its body parsed as a
    request."""
    host, port = key_server.url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"messages": [{"role": "user", "content": "Hello"}], "stream": True})
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 401 and json.loads(r.read())["error"]["code"] == "invalid_api_key"
    conn.request("GET", "/v1/models", headers=AUTH)
    r = conn.getresponse()
    assert r.status == 200, r.read()
    assert json.loads(r.read())["data"][0]["id"] == "stories260K"
    conn.close()


def test_the_page_fields_are_the_servers(key_server, page):
    """Every number field of the page is a request field, and the page's
    min/max are the server's: at the limit 200, past it a 400 naming it."""
    fields = number_inputs(page.text)
    assert set(fields) == set(FIELD_VALUES), "a number field was added or removed: update FIELD_VALUES"
    url = key_server.url + "/v1/chat/completions"
    base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}, "kv_policy": "snapkv:keep=0.5"}
    r = requests.post(url, json={**base, **FIELD_VALUES}, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    assert r.text.rstrip().endswith("data: [DONE]")
    for field, attrs in fields.items():
        step_int = attrs.get("step") == "1"
        for bound, past in [("min", -1), ("max", +1)]:
            if bound not in attrs:
                continue
            limit = float(attrs[bound])
            at = int(limit) if step_int else limit
            ok = requests.post(url, json={**base, field: at}, headers=AUTH, timeout=60)
            assert ok.status_code == 200, (field, bound, at, ok.text)
            beyond = at + past
            bad = requests.post(url, json={**base, field: beyond}, headers=AUTH, timeout=60)
            assert bad.status_code == 400, (field, beyond, bad.text)
            assert bad.json()["error"]["param"] == field
