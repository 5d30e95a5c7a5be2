"""Differential determinism check for sieve serve.

Seeded or greedy requests (the soak's generator, eval/soak_requests.py) run
concurrently on server A -- typically with the prefix cache on, a small
--kv-memory so the cache evicts, and a soak running beside it -- half of them
streamed; then each runs alone, not streamed, on server B (e.g. started with
--no-prefix-cache). Every choice's text must be equal. Differences are
printed and written whole to --out (one JSON line each).

  python3 eval/replay_check.py http://127.0.0.1:8080 http://127.0.0.1:8081 --n 300 --clients 16
"""
import argparse
import json
import os
import random
import sys
import threading
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import requests  # noqa: E402
import soak  # noqa: E402
import soak_requests  # noqa: E402
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument('a', help='URL of the server under load')
ap.add_argument('b', help='URL of the server that runs each request alone')
ap.add_argument('--n', type=int, default=300, help='seeded or greedy requests (default 300)')
ap.add_argument('--clients', type=int, default=24, help='concurrent clients on A (default 24)')
ap.add_argument('--seed', type=int, default=0, help='seeds the request generator')
ap.add_argument('--policy', default=None, help="force a kv_policy on every request ('dense': none)")
ap.add_argument('--out', default='replay-check.jsonl', help='differences, one JSON line each')
a = ap.parse_args()
args = types.SimpleNamespace(url=a.a, api_key=None, request_timeout=600, max_gen_tokens=2048, seed=a.seed, kv_policy_pool=16)
env = soak.Env(args)
rng = random.Random(a.seed)
reqs = []
while len(reqs) < a.n:
    path, body, exp = soak_requests.build_valid(env, rng)
    if not exp.deterministic: continue
    body.pop('stream', None); body.pop('stream_options', None)
    if a.policy is not None:
        if a.policy == 'dense': body.pop('kv_policy', None)
        else: body['kv_policy'] = a.policy
    reqs.append((path, body))
def texts(url, path, body, stream=False):
    if stream:
        body = dict(body); body['stream'] = True
        r = requests.post(url + path, data=json.dumps(body), headers={'Content-Type': 'application/json'}, timeout=600, stream=True)
        if r.status_code != 200: return ('HTTP', r.status_code, r.text[:200])
        out = {}
        for line in r.iter_lines():
            if not line.startswith(b'data: {'): continue
            j = json.loads(line[6:])
            for c in j.get('choices', []):
                i = c.get('index', 0)
                t = c.get('text') if 'text' in c else (c.get('delta') or {}).get('content')
                out[i] = out.get(i, '') + (t or '')
        return [out.get(i, '') for i in range(max(out.keys()) + 1)] if out else []
    r = requests.post(url + path, data=json.dumps(body), headers={'Content-Type': 'application/json'}, timeout=600)
    if r.status_code != 200: return ('HTTP', r.status_code, r.text[:200])
    j = r.json()
    return [c.get('text', (c.get('message') or {}).get('content')) for c in j['choices']]
res_a = [None] * len(reqs)
it = iter(range(len(reqs))); mu = threading.Lock()
def worker():
    while True:
        with mu:
            i = next(it, None)
        if i is None: return
        res_a[i] = texts(a.a, *reqs[i], stream=(i % 2 == 0))
ts = [threading.Thread(target=worker) for _ in range(a.clients)]
[t.start() for t in ts]; [t.join() for t in ts]
print('A done', flush=True)
bad = 0
with open(a.out, 'w') as f:
    for i, (path, body) in enumerate(reqs):
        rb = texts(a.b, path, body)
        if rb != res_a[i]:
            bad += 1
            f.write(json.dumps({'i': i, 'path': path, 'body': body, 'a': res_a[i], 'b': rb}) + '\n')
            print('DIFF', i, body.get('kv_policy'), body.get('n'), repr(str(res_a[i])[:80]), repr(str(rb)[:80]), flush=True)
print('bad', bad, 'of', len(reqs))
sys.exit(1 if bad else 0)
