"""Automatic prefix caching through the server: a request that starts like an
earlier one maps the cached prefix (usage.prompt_tokens_details.cached_tokens
says how many prompt tokens, OpenAI's field) and answers exactly what it
answers without the cache; /metrics counts lookups and hits in tokens under
vLLM's names; --no-prefix-cache turns it off; cached pages of finished
requests are reclaimable, never counted as used."""
import json

import pytest
import requests

from conftest import SERVER_THREADS, _spawn, stories_model

SYSTEM = ("Once upon a time, there was a little dog named Max who liked to run in the park. "
          "One day Max found a red ball under a big tree, and he wanted to show it to his friend Lily. ") * 4


@pytest.fixture(scope="module")
def cache_server():
    yield from _spawn(["-m", stories_model(), "-np", "4", "-c", "512", "-t", SERVER_THREADS, "--chat-template", "chatml"])


@pytest.fixture(scope="module")
def plain_server():
    yield from _spawn(["-m", stories_model(), "-np", "4", "-c", "512", "-t", SERVER_THREADS, "--no-prefix-cache"])


def complete(server, prompt, **extra):
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    body.update(extra)
    r = requests.post(server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def cached(resp):
    return resp["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_shared_prefix_is_computed_once_and_answers_the_same(cache_server, plain_server):
    before = cache_server.wait_idle()
    first = complete(cache_server, SYSTEM + "Max said")
    assert cached(first) == 0
    questions = [" Lily asked", " The ball was", " At night, Max"]
    n_prompt = first["usage"]["prompt_tokens"]
    queried = n_prompt
    for q in questions:
        hit = complete(cache_server, SYSTEM + q)
        ref = complete(plain_server, SYSTEM + q)
        assert hit["choices"][0]["text"] == ref["choices"][0]["text"], q
        c = cached(hit)
        p = hit["usage"]["prompt_tokens"]
        queried += p
        assert c > 0 and c % 16 == 0 and c < p, (q, c, p)
        assert c >= n_prompt - 40, "the shared system text should come from the cache"
        assert cached(ref) == 0
    m = cache_server.wait_idle()
    assert m["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] == queried
    assert m["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] > 0
    assert m["sieve:prefix_cache_blocks"] > 0
    assert m["sieve:prefix_cache_pages"] > 0, "finished requests' prefixes stay cached"
    assert m["sieve:kv_pages_used"] == 0, "cached pages are reclaimable, not in use"
    p = plain_server.wait_idle()
    assert p["vllm:prefix_cache_queries_total"] == 0 and p["sieve:prefix_cache_blocks"] == 0


def test_streamed_usage_and_chat_history_hits(cache_server):
    messages = [{"role": "user", "content": SYSTEM + "What did Max find?"}]
    r = requests.post(cache_server.url + "/v1/chat/completions",
                      json={"messages": messages, "max_tokens": 16, "temperature": 0},
                      timeout=120)
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]["message"]["content"]
    # The next turn repeats the conversation so far: most of it is cached.
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    with requests.post(cache_server.url + "/v1/chat/completions",
                       json={"messages": messages, "max_tokens": 8, "temperature": 0, "stream": True,
                             "stream_options": {"include_usage": True}},
                       stream=True, timeout=120) as s:
        assert s.status_code == 200
        usage = None
        for line in s.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
    assert usage is not None
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] // 2, usage
