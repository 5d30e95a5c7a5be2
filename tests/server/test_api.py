"""The API through the official `openai` client and raw HTTP: completions and
chat, streamed and not, with the endpoint shapes vLLM / llama-server give."""
import json

import openai
import pytest
import requests

PROMPT = "Once upon a time, there was a little"


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def model_id(server):
    return requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]


def test_models_and_health(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["stories260K"]
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize("max_tokens", [1, 7, 40])
def test_completion_stream_equals_nonstream(server, max_tokens):
    c = client(server)
    full = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=max_tokens, temperature=0)
    assert full.object == "text_completion"
    assert full.usage.completion_tokens <= max_tokens
    assert full.usage.prompt_tokens > 0
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens
    assert full.choices[0].finish_reason in ("stop", "length")
    if full.choices[0].finish_reason == "length":
        assert full.usage.completion_tokens == max_tokens

    stream = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=max_tokens, temperature=0,
                                  stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.text
            if ch.finish_reason:
                finish = ch.finish_reason
    assert text == full.choices[0].text
    assert finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens


def test_token_id_prompt_matches_text_prompt(server):
    toks = requests.post(server.url + "/tokenize", json={"content": PROMPT, "add_special": True}, timeout=10).json()
    ids = toks["tokens"]
    assert all(isinstance(t, int) for t in ids) and len(ids) > 3
    back = requests.post(server.url + "/detokenize", json={"tokens": ids}, timeout=10).json()["content"]
    assert PROMPT in back
    c = client(server)
    a = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=12, temperature=0)
    b = c.completions.create(model=model_id(server), prompt=ids, max_tokens=12, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    assert a.usage.prompt_tokens == b.usage.prompt_tokens == len(ids)


def test_tokenize_with_pieces(server):
    r = requests.post(server.url + "/tokenize", json={"content": "Lily was happy", "with_pieces": True}, timeout=10)
    pieces = r.json()["tokens"]
    assert "".join(p["piece"] for p in pieces if isinstance(p["piece"], str)).strip() == "Lily was happy"


def test_n_choices_seeded_and_logprobs(server):
    c = client(server)
    r = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=8, temperature=1.0, seed=1234, n=3,
                             logprobs=3)
    assert sorted(ch.index for ch in r.choices) == [0, 1, 2]
    r2 = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=8, temperature=1.0, seed=1234, n=3,
                              logprobs=3)
    assert [ch.text for ch in r.choices] == [ch.text for ch in r2.choices]  # same seed, same answers
    for ch in r.choices:
        lp = ch.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) > 0
        for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
            assert chosen <= 0.0 and 1 <= len(top) <= 3
            assert max(top.values()) >= chosen - 1e-5
    assert r.usage.completion_tokens == sum(1 for ch in r.choices for _ in ch.logprobs.tokens)


def test_stop_string(server):
    c = client(server)
    base = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=30, temperature=0).choices[0].text
    word = base.split()[2]
    r = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=30, temperature=0, stop=[word])
    assert r.choices[0].finish_reason == "stop"
    assert word not in r.choices[0].text
    assert base.startswith(r.choices[0].text)


def test_raw_sse_done_exactly_once(server):
    body = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "stream": True, "ignore_eos": True}
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = b"".join(r.iter_content(chunk_size=None))
    events = [e for e in raw.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"
    assert raw.count(b"data: [DONE]") == 1
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    for e in events[:-1]:
        e.decode("utf-8")  # every chunk is whole UTF-8


def test_metrics_names(server):
    m = server.metrics()
    for name in ["sieve:num_requests_running", "sieve:num_requests_waiting", "sieve:kv_cache_usage_perc",
                 "sieve:kv_pages_used", "sieve:kv_pages_total", "sieve:prompt_tokens_total",
                 "sieve:generation_tokens_total", "sieve:time_to_first_token_seconds_count",
                 "sieve:inter_token_latency_seconds_count", "sieve:e2e_request_latency_seconds_count"]:
        assert name in m, name
    assert 0.0 <= m["sieve:kv_cache_usage_perc"] <= 1.0
    assert m["sieve:kv_pages_total"] > 0
    for where in ["step", "ahead"]:
        assert m['sieve:kv_map_calls_total{where="%s"}' % where] >= 0
        assert m['sieve:kv_map_seconds_total{where="%s"}' % where] >= 0
