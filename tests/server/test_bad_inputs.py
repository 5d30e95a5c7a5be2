"""Every bad input gets a 4xx with an OpenAI error object, and the server
keeps serving (/health and a real completion after each)."""
import json
import subprocess
import socket
from urllib.parse import urlparse

import pytest
import requests

OK = {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}


def body_with(**fields):
    b = dict(OK)
    for k, v in fields.items():
        if v is _DROP:
            b.pop(k, None)
        else:
            b[k] = v
    return json.dumps(b).encode()


_DROP = object()
CHAT_OK = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}

# (name, path, raw body, expected status)
CASES = [
    ("invalid json", "/v1/completions", b'{"prompt": "x",', 400),
    ("not an object", "/v1/completions", b'["prompt", "x"]', 400),
    ("json string", "/v1/completions", b'"hello"', 400),
    ("deep nesting", "/v1/completions", b"[" * 100000 + b"]" * 100000, 400),
    ("deep nesting unclosed", "/v1/completions", b'{"a":' + b"[" * 100000, 400),
    ("prompt wrong type", "/v1/completions", body_with(prompt=12), 400),
    ("prompt object", "/v1/completions", body_with(prompt={"a": 1}), 400),
    ("max_tokens string", "/v1/completions", body_with(max_tokens="5"), 400),
    ("max_tokens bool", "/v1/completions", body_with(max_tokens=True), 400),
    ("max_tokens zero", "/v1/completions", body_with(max_tokens=0), 400),
    ("max_tokens negative", "/v1/completions", body_with(max_tokens=-3), 400),
    ("max_tokens beyond context", "/v1/completions", body_with(max_tokens=100000), 400),
    ("max_tokens fraction", "/v1/completions", body_with(max_tokens=2.5), 400),
    ("temperature negative", "/v1/completions", body_with(temperature=-0.5), 400),
    ("temperature NaN", "/v1/completions", b'{"prompt": "x", "temperature": NaN}', 400),
    ("temperature Infinity", "/v1/completions", b'{"prompt": "x", "temperature": Infinity}', 400),
    ("temperature huge exponent", "/v1/completions", b'{"prompt": "x", "temperature": 1e999}', 400),
    ("temperature string", "/v1/completions", body_with(temperature="hot"), 400),
    ("top_p above 1", "/v1/completions", body_with(top_p=1.5), 400),
    ("top_p negative", "/v1/completions", body_with(top_p=-0.1), 400),
    ("min_p above 1", "/v1/completions", body_with(min_p=2), 400),
    ("presence_penalty", "/v1/completions", body_with(presence_penalty=5), 400),
    ("top_k too small", "/v1/completions", body_with(top_k=-7), 400),
    ("n zero", "/v1/completions", body_with(n=0), 400),
    ("n huge", "/v1/completions", body_with(n=10**9), 400),
    ("n beyond int64", "/v1/completions", body_with(n=10**30), 400),
    ("logprobs too large", "/v1/completions", body_with(logprobs=6), 400),
    ("chat top_logprobs too large", "/v1/chat/completions",
     json.dumps(dict(CHAT_OK, logprobs=True, top_logprobs=21)).encode(), 400),
    ("chat top_logprobs without logprobs", "/v1/chat/completions",
     json.dumps(dict(CHAT_OK, top_logprobs=2)).encode(), 400),
    ("empty stop string", "/v1/completions", body_with(stop=""), 400),
    ("empty stop in list", "/v1/completions", body_with(stop=["a", ""]), 400),
    ("too many stops", "/v1/completions", body_with(stop=["a", "b", "c", "d", "e"]), 400),
    ("stop wrong type", "/v1/completions", body_with(stop=5), 400),
    ("empty prompt", "/v1/completions", body_with(prompt=""), 400),
    ("empty id prompt", "/v1/completions", body_with(prompt=[]), 400),
    ("missing prompt", "/v1/completions", body_with(prompt=_DROP), 400),
    ("empty messages", "/v1/chat/completions", json.dumps({"messages": []}).encode(), 400),
    ("messages not array", "/v1/chat/completions", json.dumps({"messages": "hi"}).encode(), 400),
    ("message bad role", "/v1/chat/completions",
     json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400),
    ("message content number", "/v1/chat/completions",
     json.dumps({"messages": [{"role": "user", "content": 3}]}).encode(), 400),
    ("token id negative", "/v1/completions", body_with(prompt=[1, 2, -1]), 400),
    ("token id beyond vocab", "/v1/completions", body_with(prompt=[1, 2, 512]), 400),
    ("token id huge", "/v1/completions", body_with(prompt=[1, 2**40]), 400),
    ("token id float", "/v1/completions", body_with(prompt=[1, 2.5]), 400),
    ("batched prompts", "/v1/completions", body_with(prompt=["a", "b"]), 400),
    ("prompt longer than context", "/v1/completions", body_with(prompt="Lily was happy. " * 400), 400),
    ("id prompt longer than context", "/v1/completions", body_with(prompt=[5] * 300), 400),
    ("invalid utf-8", "/v1/completions", b'{"prompt": "bad \xff\xfe bytes"}', 400),
    ("overlong utf-8", "/v1/completions", b'{"prompt": "\xc0\xaf"}', 400),
    ("lone surrogate escape", "/v1/completions", b'{"prompt": "\\ud800"}', 400),
    ("unknown model", "/v1/completions", body_with(model="gpt-17"), 404),
    ("chat without a chat template", "/v1/chat/completions", json.dumps(CHAT_OK).encode(), 400),
    ("stream_options without stream", "/v1/completions", body_with(stream_options={"include_usage": True}), 400),
    ("stream not bool", "/v1/completions", body_with(stream="yes"), 400),
    ("echo", "/v1/completions", body_with(echo=True), 400),
    ("tokenize no content", "/tokenize", b'{"text": "x"}', 400),
    ("detokenize bad id", "/detokenize", b'{"tokens": [1, -5]}', 400),
    ("unknown route", "/v1/embeddings", body_with(), 404),
    ("unknown route get", "/v2/whatever", None, 404),
]


def check_error(r, status):
    assert r.status_code == status, r.text[:500]
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]


def check_alive(server):
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    r = requests.post(server.url + "/v1/completions", json=OK, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("name,path,body,status", CASES, ids=[c[0] for c in CASES])
def test_bad_input(server, name, path, body, status):
    if body is None:
        r = requests.get(server.url + path, timeout=30)
    else:
        r = requests.post(server.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
    check_error(r, status)
    check_alive(server)


@pytest.mark.parametrize("size", [2 << 20, 10 << 20])
def test_body_over_limit(server, size):
    # The fixture's limit is 1 MiB; a 10 MB prompt is the case.
    body = b'{"prompt": "' + b"a" * size + b'"}'
    try:
        r = requests.post(server.url + "/v1/completions", data=body, timeout=60)
        check_error(r, 413)
    except requests.ConnectionError:
        # The server may answer 413 and close before the client finished
        # sending; what matters is that it keeps serving.
        pass
    check_alive(server)


def test_prompt_far_longer_than_context_within_body(server):
    r = requests.post(server.url + "/v1/completions", json=dict(OK, prompt="x " * 400000), timeout=60)
    check_error(r, 400)
    check_alive(server)


def test_too_many_headers(server):
    headers = {f"X-Filler-{i}": "v" for i in range(200)}
    r = requests.post(server.url + "/v1/completions", json=OK, headers=headers, timeout=30)
    check_error(r, 431)
    check_alive(server)


def test_garbage_request_line(server):
    u = urlparse(server.url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(b"\x00\x01\x02 garbage\r\n\r\n")
        s.recv(4096)  # whatever it answers (or nothing), it must not fall over
    check_alive(server)


def test_api_key_required():
    from conftest import Server, stories_model
    srv = Server(["-m", stories_model(), "-np", "2", "-c", "128", "-t", "1", "--api-key", "s3cret"])
    try:
        check_error(requests.post(srv.url + "/v1/completions", json=OK, timeout=30), 401)
        check_error(requests.post(srv.url + "/v1/completions", json=OK,
                                  headers={"Authorization": "Bearer wrong"}, timeout=30), 401)
        r = requests.post(srv.url + "/v1/completions", json=OK, headers={"Authorization": "Bearer s3cret"},
                          timeout=30)
        assert r.status_code == 200
        assert requests.get(srv.url + "/health", timeout=10).status_code == 200
    finally:
        assert srv.stop() == 0


def test_kv_memory_past_the_machine_is_refused_at_start():
    """--kv-memory beyond the memory available: the server exits 1 at start
    naming both sizes, rather than starting and being OOM-killed when the
    pool fills."""
    from conftest import _bin, stories_model
    out = subprocess.run([_bin(), "serve", "-m", stories_model(), "--port", "0", "-t", "1",
                          "--kv-memory", "100TiB"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "more than this machine has available" in out.stderr, out.stderr
    assert "(--kv-memory)" in out.stderr, out.stderr
