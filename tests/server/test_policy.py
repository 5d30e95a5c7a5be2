"""KV policies through the server: the server's --kv-policy is the default,
a request's "kv_policy" extension field overrides it (validated like every
other field), usage.kv reports the request's compression, and /metrics the
compression per policy and the pages evicted. Concurrent requests with random
policies and cancellations leave every page back in the pool."""
import random
import threading

import pytest
import requests

PROMPT = " ".join(["Once upon a time, there was a little dog named Max who liked to run in the park."] * 12)


def complete(server, **extra):
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    body.update(extra)
    return requests.post(server.url + "/v1/completions", json=body, timeout=120)


def test_default_policy_compresses_and_reports(policy_server):
    r = complete(policy_server)
    assert r.status_code == 200, r.text
    kv = r.json()["usage"]["kv"]
    assert kv["policy"] == "snapkv:keep=0.25"
    assert kv["rows_kept"] < kv["rows_dense"]
    assert kv["compression"] > 2.0
    m = policy_server.wait_idle()
    assert m['sieve:kv_compression_ratio{policy="snapkv:keep=0.25"}'] < 0.5
    assert m["sieve:kv_pages_evicted_total"] > 0


def test_request_policy_overrides_the_default(policy_server):
    dense = complete(policy_server, kv_policy="dense").json()
    assert dense["usage"]["kv"]["policy"] == "dense"
    assert dense["usage"]["kv"]["compression"] == 1.0
    stream = complete(policy_server, kv_policy="streaming:sink=4,recent=28").json()
    assert stream["usage"]["kv"]["policy"] == "streaming:recent=28,sink=4"
    assert stream["usage"]["kv"]["compression"] > 2.0
    # A budget past the prompt keeps every row: the dense text exactly.
    full = complete(policy_server, kv_policy="h2o:budget=4096").json()
    assert full["choices"][0]["text"] == dense["choices"][0]["text"]
    m = policy_server.wait_idle()
    assert m['sieve:kv_policy_requests_total{policy="dense"}'] >= 1
    assert m['sieve:kv_compression_ratio{policy="dense"}'] == 1.0


def test_page_selection_keeps_every_row(policy_server):
    # quest reads a subset while decoding but evicts nothing: compression 1;
    # a budget past the sequence reads every row, so the text is dense's.
    q = complete(policy_server, kv_policy="quest:budget=64,page=16,full_layers=0").json()
    kv = q["usage"]["kv"]
    assert kv["policy"] == "quest:budget=64,full_layers=0,page=16"
    assert kv["rows_kept"] == kv["rows_dense"] and kv["compression"] == 1.0
    dense = complete(policy_server, kv_policy="dense").json()
    full = complete(policy_server, kv_policy="quest:budget=4096").json()
    assert full["choices"][0]["text"] == dense["choices"][0]["text"]
    m = policy_server.wait_idle()
    assert m['sieve:kv_policy_requests_total{policy="quest:budget=64,full_layers=0,page=16"}'] >= 1


@pytest.mark.parametrize("policy,message", [
    ("snapkb", "unknown policy 'snapkb'"),
    ("snapkv:keep=0", "keep=0: expected a number in (0, 1]"),
    ("snapkv:pool=4", "pool=4: expected an odd"),
    ("streaming:window=3", "streaming has no key 'window'"),
    ("@/etc/passwd", "the server reads no files"),
    (17, "expected a string"),
    ("quest:page=24", "page=24: expected a multiple of 16"),
    ("lserve:static=0.5", "lserve needs profile=FILE"),
    ("lserve:profile=/etc/passwd", "a request cannot name a head profile"),
])
def test_bad_policy_is_a_400_naming_the_field(policy_server, policy, message):
    r = complete(policy_server, kv_policy=policy)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "kv_policy"
    assert message in err["message"], err["message"]


def test_concurrent_random_policies_and_cancellations(policy_server):
    policies = ["dense", "snapkv:keep=0.1", "pyramidkv:keep=0.2", "layerwise:keep=0.1,full_layers=2",
                "streaming:budget=40", "h2o:budget=48", "quest:budget=64,page=16,interval=2", None]
    rng = random.Random(5)
    errors = []

    def one(i):
        extra = {"max_tokens": rng.randint(8, 64)}
        p = rng.choice(policies)
        if p:
            extra["kv_policy"] = p
        try:
            if i % 4 == 0:  # a streamed request dropped after a few chunks
                body = {"prompt": PROMPT, "temperature": 0, "ignore_eos": True, "stream": True, **extra}
                with requests.post(policy_server.url + "/v1/completions", json=body, stream=True, timeout=120) as r:
                    for k, _ in enumerate(r.iter_lines()):
                        if k > 3:
                            break
            else:
                r = complete(policy_server, **extra)
                if r.status_code != 200:
                    errors.append(r.text)
        except requests.RequestException as e:
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    m = policy_server.wait_idle()
    assert m["sieve:kv_pages_used"] == 0
    assert m["sieve:num_requests_running"] == 0
