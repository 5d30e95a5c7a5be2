#!/usr/bin/env python3
"""Soak test for a running `sieve serve`: C client threads for M minutes,
every answer checked, then leaks and memory growth read from /metrics.

    python3 eval/soak.py http://127.0.0.1:8080 --minutes 60 --clients 32 --cancel-frac 0.2 --json soak.json

The mix, per request a client sends:
  - valid requests (the rest): chat and completions, streamed or not, random
    prompt sizes up to the context, sampling parameters anywhere in their
    documented ranges (edges included), n, stop strings, logprobs, and a
    random `kv_policy` with valid keys; a few replay an earlier seeded or
    greedy request (streamed if it was not, or the other way round) and must
    give the same text;
  - cancellations (--cancel-frac): the client reads part of a stream, or
    gives up on a non-streamed answer, or sends a request over a raw socket
    and hangs up (half a body, or after sending, sometimes with a TCP RST);
  - malformed requests (--malformed-frac): bad JSON, wrong types, values out
    of range, unknown or invalid kv_policy, prompts beyond the context, ids
    outside the vocabulary, an unknown model or route.

Every answer is checked:
  - valid: 200 and a well-formed OpenAI body, or an SSE stream of `data:`
    lines that ends with exactly one `data: [DONE]`, one finish_reason per
    choice, usage consistent with the request (prompt tokens as sent,
    completion tokens <= n * max_tokens, == when every choice hit the length
    limit, finish "length" when EOS is ignored and there are no stop strings,
    no stop string in the text, logprobs shaped as asked);
  - malformed: a 4xx OpenAI error object whose `param` names the field;
  - 429 / 503 are "busy" (allowed, counted apart);
  - anything else is "failed" (5xx, a bad body, a 200 carrying an error);
    no answer at all (reset, timeout, a stream cut short) on a request the
    client did not cancel is "lost".

After a warm-up (--warmup-s) the clients pause, the server is waited on to
go idle and its resident and heap memory are read: the baseline. At the end
the same is done again: KV pages still in use with nothing running are
leaked (the server counts pages that only its prefix cache holds as free;
with --subtract-cached, for a server that counts them as used, the gauge
named by --cached-pages-metric is subtracted), and the memory growth is
final vs baseline, both at idle.

Exit status: 0 when nothing failed or was lost, nothing leaked, resident and
heap memory grew by at most --max-rss-growth / --max-heap-growth percent, at
least one request completed and the server is still the same healthy
process; 1 otherwise; 2 when the server cannot be set up against. Progress
goes to stderr, the summary to stdout, one JSON line to --json FILE.
docs/reliability.md ("Soak test") has the details and the allocator
settings that make the memory figures mean something.
"""
import argparse
import collections
import json
import math
import os
import random
import socket
import struct
import sys
import threading
import time
from urllib.parse import urlparse

import requests

from soak_checks import Stream, check_error_object, check_json_body
from soak_requests import CORPUS, build_malformed, build_valid, rnd_kv_policy, size_class

# ---------------------------------------------------------------- metrics ----
# Gauges read from /metrics (src/sieve/server/metrics.cpp).
M_RUNNING = "sieve:num_requests_running"
M_WAITING = "sieve:num_requests_waiting"
M_PAGES_USED = "sieve:kv_pages_used"
M_PAGES_TOTAL = "sieve:kv_pages_total"
M_SWAP_USED = "sieve:kv_swap_bytes_used"
# Pages only the prefix cache holds once their requests are gone: not leaks.
# sieve counts them as free (not in kv_pages_used), so by default they are
# reported and not subtracted; --cached-pages-metric renames the gauge and
# --subtract-cached subtracts it (for a server that counts them as used).
M_PAGES_CACHED = "sieve:prefix_cache_pages"
M_RSS = "process_resident_memory_bytes"
M_HEAP = "sieve:heap_bytes_in_use"
M_START = "process_start_time_seconds"
M_HTTP_5XX = 'sieve:http_errors_total{class="5xx"}'
M_ENGINE_ERRORS = 'sieve:request_success_total{finished_reason="error"}'
M_CANCELLED = 'sieve:request_success_total{finished_reason="cancelled"}'
M_PREEMPTIONS = "sieve:num_preemptions_total"
M_PREFIX_HITS = "vllm:prefix_cache_hits_total"
M_PREFIX_BLOCKS = "sieve:prefix_cache_blocks"


def read_metrics(url, timeout=10):
    """/metrics as {name{labels}: value}; raises on any HTTP problem."""
    r = requests.get(url + "/metrics", timeout=timeout)
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def rss_from_proc(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not reaped by its parent) is not alive either.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ------------------------------------------------------------- the server ----
class Env:
    """What the clients need to know about the server, measured once."""

    def __init__(self, args):
        self.url = args.url.rstrip("/")
        u = urlparse(self.url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = "Bearer " + args.api_key
        self.request_timeout = args.request_timeout
        self.gen_cap = args.max_gen_tokens
        self.model, self.ctx = self._model()
        self.ids = self._tokenize(self._corpus(self.ctx * 8), add_special=False)
        self.prompts = self._prompt_pool(args.seed)
        # kv_policy specs: a pool of --kv-policy-pool random valid ones, or a
        # fresh one per request with 0. The server keeps counters (a /metrics
        # label) per distinct spec, so fresh specs grow its memory with the
        # run; the pool keeps the memory checks about leaks.
        rng = random.Random(f"{args.seed}:policies")
        self.policies = [rnd_kv_policy(rng) for _ in range(args.kv_policy_pool)]
        self.chat, self.chat_base, self.chat_per_msg = self._calibrate_chat()

    def post(self, path, body, timeout):
        return requests.post(self.url + path, data=body, headers=self.headers, timeout=timeout)

    def _model(self):
        r = requests.get(self.url + "/v1/models", headers=self.headers, timeout=30)
        r.raise_for_status()
        m = r.json()["data"][0]
        return m["id"], int(m["max_model_len"])

    def _tokenize(self, text, add_special):
        r = self.post("/tokenize", json.dumps({"content": text, "add_special": add_special}), 60)
        r.raise_for_status()
        return r.json()["tokens"]

    @staticmethod
    def _corpus(n_chars):
        return (CORPUS * (n_chars // len(CORPUS) + 1))[:n_chars]

    def _prompt_pool(self, seed):
        """~40 texts with exact token counts (as the server encodes them),
        log-spaced from 1 token to nearly the whole context."""
        rng = random.Random(seed)
        words = CORPUS.split(" ")
        per_word = max(0.5, len(self.ids) / max(1, len(self._corpus(self.ctx * 8).split(" "))))
        pool = {}
        for k in range(40):
            target = max(1, int(round(math.exp(k / 39 * math.log(max(2, self.ctx - 8))))))
            n_words = max(1, int(target / per_word))
            start = rng.randrange(len(words))
            text = " ".join(words[(start + i) % len(words)] for i in range(n_words)).strip() or "Once"
            n = len(self._tokenize(text, add_special=True))
            if n < self.ctx:
                pool[text] = n
        return sorted(((n, t) for t, n in pool.items()))

    def _calibrate_chat(self):
        """Whether chat works here, and the template's token overhead:
        prompt_tokens ~ base + per_msg * (messages - 1) + content tokens."""
        t = len(self._tokenize("hi", add_special=False))

        def prompt_tokens(msgs):
            r = self.post("/v1/chat/completions", json.dumps({"messages": msgs, "max_tokens": 1}), 120)
            if r.status_code != 200:
                return None, r
            return r.json()["usage"]["prompt_tokens"], r

        p1, r = prompt_tokens([{"role": "user", "content": "hi"}])
        if p1 is None:
            print(f"soak: chat disabled (HTTP {r.status_code}: {r.text[:200]})", file=sys.stderr)
            return False, 0, 0
        p3, _ = prompt_tokens([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"},
                               {"role": "user", "content": "hi"}])
        per = max(0, math.ceil(((p3 or p1) - p1 - 2 * t) / 2))
        return True, p1 - t, per

    def prompt_text(self, rng, max_tokens):
        """A pool text of at most max_tokens tokens, near a random size."""
        fits = [p for p in self.prompts if p[0] <= max_tokens]
        if not fits:
            return None
        target = size_class(rng, self.ctx)
        best = min(fits, key=lambda p: abs(p[0] - target))
        return best


# ------------------------------------------------------------ bookkeeping ----
OUTCOMES = ("completed", "cancelled", "rejected", "busy", "failed", "lost")


def request_summary(req):
    """'POST path {body}' with the body's messages / prompt moved last, so a
    cut line still shows the sampling parameters and the policy."""
    path, _, body = req.partition(" {")
    try:
        b = json.loads("{" + body)
    except ValueError:
        return req
    long = {k: b.pop(k) for k in ("messages", "prompt") if k in b}
    return path + " " + json.dumps({**b, **long})


class Stats:
    def __init__(self, max_failures=200, fail_log=None):
        self.fail_log = fail_log
        self.mu = threading.Lock()
        self.counts = collections.Counter()
        self.by_kind = collections.Counter()
        self.inflight = 0
        self.failures = []
        self.max_failures = max_failures
        self.n_printed = 0
        self.tokens = 0
        self.replays = collections.deque(maxlen=256)
        self.t0 = time.monotonic()

    def begin(self):
        with self.mu:
            self.counts["sent"] += 1
            self.inflight += 1

    def end(self, outcome, kind, detail=None, request=None, tokens=0):
        with self.mu:
            self.inflight -= 1
            self.counts[outcome] += 1
            self.by_kind[f"{kind}:{outcome}"] += 1
            self.tokens += tokens
            if outcome in ("failed", "lost"):
                rec = {"t_s": round(time.monotonic() - self.t0, 1), "outcome": outcome, "kind": kind,
                       "detail": detail}
                if request is not None:
                    path, body = request
                    # Whole (a reproducer) up to 64 KiB; oversize prompts are cut.
                    rec["request"] = f"POST {path} " + (body if isinstance(body, str) else
                                                        body.decode("utf-8", "replace"))[:65536]
                if len(self.failures) < self.max_failures:
                    self.failures.append(rec)
                if self.fail_log:
                    with open(self.fail_log, "a") as f:
                        f.write(json.dumps(rec) + "\n")
                self.n_printed += 1
                if self.n_printed <= 50:
                    print(f"soak: {outcome.upper()} [{kind}] {detail}" +
                          (f"\n      {request_summary(rec['request'])[:600]}" if "request" in rec else ""),
                          file=sys.stderr)
                elif self.n_printed == 51:
                    print(f"soak: more failures are counted, not printed (the first {self.max_failures} go to --json)",
                          file=sys.stderr)

    def snapshot(self):
        with self.mu:
            return dict(self.counts), self.inflight


def sse_lines(resp):
    """Lines of a streamed answer as they arrive (bytes, without the newline)."""
    buf = b""
    for chunk in resp.iter_content(chunk_size=None):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.rstrip(b"\r")
    if buf:
        yield buf


# ------------------------------------------------------------ the clients ----
class Client:
    """One client thread's requests; every one ends in exactly one Stats.end."""

    def __init__(self, env, stats, rng, args):
        self.env, self.stats, self.rng, self.args = env, stats, rng, args

    def one(self):
        r = self.rng.random()
        if r < self.args.malformed_frac:
            return self.malformed()
        if r < self.args.malformed_frac + self.args.cancel_frac:
            return self.cancel()
        if self.rng.random() < self.args.replay_frac:
            with self.stats.mu:
                past = self.rng.choice(self.stats.replays) if self.stats.replays else None
            if past is not None:
                return self.replay(past)
        path, body, exp = build_valid(self.env, self.rng)
        return self.valid(path, body, exp, "stream" if body.get("stream") else "json")

    def malformed(self):
        name, path, raw, statuses, param, code, words = build_malformed(self.env, self.rng)
        kind = "malformed:" + name
        self.stats.begin()
        try:
            resp = self.env.post(path, raw, (10, self.env.request_timeout))
        except requests.RequestException as e:
            time.sleep(0.2)  # a server that is gone must not turn this into a busy loop
            return self.stats.end("lost", kind, f"no answer: {e}", (path, raw))
        if resp.status_code in (429, 503):
            return self.stats.end("busy", kind)
        probs = check_error_object(resp, statuses, param, code, words)
        if probs:
            return self.stats.end("failed", kind, "; ".join(probs), (path, raw))
        self.stats.end("rejected", kind)

    def valid(self, path, body, exp, kind, cancel_after=None, cancel_wait_s=None, replay_of=None):
        """Sends one valid request and checks it. cancel_after: close the
        stream after that many SSE events; cancel_wait_s: give up on a
        non-streamed answer after that long."""
        raw = json.dumps(body).encode()
        stream = bool(body.get("stream"))
        timeout = (10, cancel_wait_s if cancel_wait_s is not None else self.env.request_timeout)
        self.stats.begin()
        t0 = time.monotonic()
        try:
            resp = self.env.post(path, raw, timeout) if not stream else requests.post(
                self.env.url + path, data=raw, headers=self.env.headers, timeout=timeout, stream=True)
        except requests.RequestException as e:
            if cancel_wait_s is not None and time.monotonic() - t0 >= 0.8 * cancel_wait_s:
                return self.stats.end("cancelled", kind)
            time.sleep(0.2)
            return self.stats.end("lost", kind, f"no answer after {time.monotonic() - t0:.1f} s: {e}", (path, raw))
        try:
            if resp.status_code in (429, 503):
                probs = check_error_object(resp, {429, 503}, param=...)
                if probs:
                    return self.stats.end("failed", kind, "; ".join(probs), (path, raw))
                return self.stats.end("busy", kind)
            if resp.status_code != 200:
                return self.stats.end("failed", kind, f"HTTP {resp.status_code}: {resp.text[:300]}", (path, raw))
            if stream:
                return self.read_stream(resp, path, raw, exp, kind, t0, cancel_after, replay_of, body)
            try:
                j = resp.json()
            except ValueError:
                return self.stats.end("failed", kind, f"body is not JSON: {resp.text[:200]!r}", (path, raw))
            probs, texts, finishes = check_json_body(exp, self.env, j)
            self.finish(kind, path, raw, body, exp, probs, texts, finishes, replay_of,
                        (j.get("usage") or {}).get("completion_tokens", 0))
        finally:
            resp.close()

    def read_stream(self, resp, path, raw, exp, kind, t0, cancel_after, replay_of, body):
        s = Stream(exp, self.env, bool((body.get("stream_options") or {}).get("include_usage")))
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.startswith("text/event-stream"):
            s.probs.append(f"Content-Type {ctype!r}")
        if cancel_after == 0:  # hang up on the headers, before any event
            return self.stats.end("cancelled", kind)
        try:
            for line in sse_lines(resp):
                s.line(line)
                if cancel_after is not None and s.n_events >= cancel_after and not s.done:
                    resp.close()
                    return self.stats.end("cancelled", kind)
                if time.monotonic() - t0 > self.env.request_timeout:
                    return self.stats.end("lost", kind, f"stream still open after {self.env.request_timeout} s",
                                          (path, raw))
        except requests.RequestException as e:
            return self.stats.end("lost", kind, f"stream broken after {s.n_events} events: {e}", (path, raw))
        if not s.done and cancel_after is None:
            return self.stats.end("lost", kind, f"stream closed after {s.n_events} events without [DONE]",
                                  (path, raw))
        ct = (s.usage or {}).get("completion_tokens", 0) if isinstance(s.usage, dict) else 0
        self.finish(kind, path, raw, body, exp, s.finish(), s.texts, s.finishes, replay_of, ct)

    def finish(self, kind, path, raw, body, exp, probs, texts, finishes, replay_of, tokens):
        if not probs and replay_of is not None:
            want_texts, want_finishes = replay_of
            for i, (a, b, fa, fb) in enumerate(zip(want_texts, texts, want_finishes, finishes)):
                if a != b or fa != fb:
                    probs.append(f"replay differs, choice {i}: first {a[:80]!r} ({fa}), now {b[:80]!r} ({fb})")
                    break
        if probs:
            return self.stats.end("failed", kind, "; ".join(probs[:4]), (path, raw))
        self.stats.end("completed", kind, tokens=tokens if isinstance(tokens, int) else 0)
        if exp.deterministic and replay_of is None:
            with self.stats.mu:
                self.stats.replays.append((path, body, exp, texts, finishes))

    def replay(self, past):
        path, body, exp, texts, finishes = past
        body = dict(body)
        if body.pop("stream", False):
            body.pop("stream_options", None)
        else:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        self.valid(path, body, exp, "replay", replay_of=(texts, finishes))

    def cancel(self):
        """A valid request the client abandons part way."""
        path, body, exp = build_valid(self.env, self.rng, long_gen=True)
        how = self.rng.random()
        if how < 0.4:
            body["stream"] = True
            body.pop("stream_options", None)
            return self.valid(path, body, exp, "cancel:stream", cancel_after=self.rng.randint(0, 12))
        if how < 0.7:
            body.pop("stream", None)
            body.pop("stream_options", None)
            return self.valid(path, body, exp, "cancel:wait", cancel_wait_s=self.rng.choice([0.05, 0.2, 0.5, 1.0, 2.0]))
        return self.disconnect(path, body)

    def disconnect(self, path, body):
        """Raw socket: half a body, or the request then a hang-up (sometimes RST)."""
        raw = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.env.host}:{self.env.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n").encode()
        for k, v in self.env.headers.items():
            if k == "Authorization":
                head += f"{k}: {v}\r\n".encode()
        head += b"\r\n"
        mode = self.rng.choice(["mid-upload", "after-send", "after-first-bytes"])
        kind = "cancel:" + mode
        self.stats.begin()
        try:
            with socket.create_connection((self.env.host, self.env.port), timeout=10) as s:
                if mode == "mid-upload":
                    s.sendall(head + raw[:self.rng.randint(0, len(raw) - 1)])
                else:
                    s.sendall(head + raw)
                    if mode == "after-first-bytes":
                        s.settimeout(self.rng.uniform(0.1, 2.0))
                        try:
                            s.recv(self.rng.randint(1, 512))
                        except socket.timeout:
                            pass
                    else:
                        time.sleep(self.rng.uniform(0, 0.5))
                if self.rng.random() < 0.5:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        except OSError as e:
            return self.stats.end("lost", kind, f"raw connection failed: {e}")
        self.stats.end("cancelled", kind)


def client_loop(env, stats, args, i, ctl):
    client = Client(env, stats, random.Random(f"{args.seed}:{i}"), args)
    while not ctl.stop.is_set():
        if ctl.pause.is_set():
            with ctl.mu:
                ctl.n_paused += 1
            ctl.resume.wait()
            with ctl.mu:
                ctl.n_paused -= 1
            continue
        try:
            client.one()
        except Exception as e:  # a bug in this tool must not pass for a healthy server
            with stats.mu:
                stats.counts["tool_errors"] += 1
            print(f"soak: client {i}: {type(e).__name__}: {e}", file=sys.stderr)
            time.sleep(0.5)


class Control:
    def __init__(self):
        self.stop, self.pause, self.resume = threading.Event(), threading.Event(), threading.Event()
        self.mu = threading.Lock()
        self.n_paused = 0


# ------------------------------------------------------------- controller ----
class Server:
    """The server's side: /metrics gauges, RSS, liveness."""

    def __init__(self, env, args):
        self.env, self.pid = env, args.pid
        self.cached_name, self.subtract_cached = args.cached_pages_metric, args.subtract_cached

    def metrics(self):
        try:
            return read_metrics(self.env.url)
        except (requests.RequestException, ValueError):
            return None

    def rss(self, m):
        if self.pid is not None:
            try:
                return rss_from_proc(self.pid)
            except OSError:
                return None
        return m.get(M_RSS) if m else None

    def alive(self):
        if self.pid is not None and not pid_alive(self.pid):
            return False
        try:
            return requests.get(self.env.url + "/health", timeout=10).status_code == 200
        except requests.RequestException:
            return False

    def kv(self, m):
        """(used, cached, leaked if idle) pages."""
        used = m.get(M_PAGES_USED, 0.0)
        cached = m.get(self.cached_name, 0.0)
        return used, cached, max(0.0, used - cached) if self.subtract_cached else used

    def wait_idle(self, timeout_s, settle_s=5.0):
        """Polls until nothing runs or waits and no KV page is held outside
        the cache. Returns (metrics, idle?, seconds waited)."""
        t0 = time.monotonic()
        idle_since = None
        m = None
        while time.monotonic() - t0 < timeout_s:
            m = self.metrics() or m
            if m is not None and m.get(M_RUNNING, 1) == 0 and m.get(M_WAITING, 1) == 0:
                idle_since = idle_since or time.monotonic()
                if self.kv(m)[2] == 0 or time.monotonic() - idle_since > settle_s:
                    return m, True, time.monotonic() - t0
            else:
                idle_since = None
            time.sleep(0.25)
        return m, False, time.monotonic() - t0


def idle_sample(srv, args, label):
    m, idle, waited = srv.wait_idle(args.idle_timeout)
    if idle and args.idle_settle > 0:
        # Memory is read after the server has been idle a while: the engine
        # gives freed heap back (malloc_trim) 200 ms after its last step, so a
        # sample at the first idle poll may or may not include it. Baseline
        # and final are both taken this way.
        time.sleep(args.idle_settle)
        m2, idle, waited2 = srv.wait_idle(args.idle_timeout)
        m, waited = m2 or m, waited + args.idle_settle + waited2
    if m is None:
        return {"label": label, "metrics": False}
    used, cached, leaked = srv.kv(m)
    return {"label": label, "metrics": True, "idle": idle, "idle_wait_s": round(waited, 1),
            "running": m.get(M_RUNNING), "waiting": m.get(M_WAITING), "kv_pages_used": used,
            "kv_pages_cached": cached, "kv_pages_leaked": leaked if idle else None,
            "kv_pages_total": m.get(M_PAGES_TOTAL), "kv_swap_bytes_used": m.get(M_SWAP_USED),
            "rss_bytes": srv.rss(m), "heap_bytes": m.get(M_HEAP), "start_time": m.get(M_START),
            "http_5xx": m.get(M_HTTP_5XX, 0.0), "engine_errors": m.get(M_ENGINE_ERRORS, 0.0),
            "cancelled_server": m.get(M_CANCELLED, 0.0), "preemptions": m.get(M_PREEMPTIONS, 0.0),
            "prefix_hit_tokens": m.get(M_PREFIX_HITS, 0.0), "prefix_blocks": m.get(M_PREFIX_BLOCKS, 0.0)}


def pause_clients(ctl, n_clients, timeout_s):
    ctl.resume.clear()
    ctl.pause.set()
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        with ctl.mu:
            if ctl.n_paused == n_clients:
                return True
        time.sleep(0.1)
    return False


def resume_clients(ctl):
    ctl.pause.clear()
    ctl.resume.set()


def progress(stats, srv, t_run, total_s, rss_samples):
    c, inflight = stats.snapshot()
    m = srv.metrics()
    line = (f"soak {t_run:6.0f}/{total_s:.0f}s  sent {c.get('sent', 0)}  ok {c.get('completed', 0)}  "
            f"cancel {c.get('cancelled', 0)}  bad {c.get('rejected', 0)}  busy {c.get('busy', 0)}  "
            f"FAIL {c.get('failed', 0)}  LOST {c.get('lost', 0)}  inflight {inflight}")
    if m is None:
        return line + "  | /metrics unreachable"
    rss = srv.rss(m)
    if rss is not None:
        rss_samples.append((round(t_run, 1), rss))
    used, cached, _ = srv.kv(m)
    line += (f"  | running {m.get(M_RUNNING, 0):.0f} waiting {m.get(M_WAITING, 0):.0f}  "
             f"kv {used:.0f}/{m.get(M_PAGES_TOTAL, 0):.0f}" + (f" (cached {cached:.0f})" if cached else "") +
             (f"  rss {rss / 2**20:.1f} MiB" if rss is not None else "") +
             (f"  heap {m[M_HEAP] / 2**20:.1f} MiB" if M_HEAP in m else ""))
    return line


def run(args):
    try:
        env = Env(args)
    except (requests.RequestException, KeyError, ValueError, IndexError) as e:
        print(f"soak: cannot set up against {args.url}: {e}", file=sys.stderr)
        return 2, None
    srv = Server(env, args)
    print(f"soak: {env.url} model {env.model!r}, context {env.ctx}, chat {'on' if env.chat else 'off'}; "
          f"{args.clients} clients for {args.minutes:g} min, cancel {args.cancel_frac:g}, "
          f"malformed {args.malformed_frac:g}, seed {args.seed}", file=sys.stderr)
    first = srv.metrics()
    if first is None or M_PAGES_USED not in first or (args.pid is None and M_RSS not in first):
        print(f"soak: /metrics lacks {M_PAGES_USED} or {M_RSS}; cannot check leaks (give --pid for RSS)",
              file=sys.stderr)
        return 2, None

    stats, ctl = Stats(fail_log=args.fail_log), Control()
    threads = [threading.Thread(target=client_loop, args=(env, stats, args, i, ctl), daemon=True)
               for i in range(args.clients)]
    total_s = args.minutes * 60
    warmup_s = args.warmup_s if args.warmup_s is not None else min(300.0, max(10.0, 0.15 * total_s))
    progress_s = args.progress_s or (10.0 if total_s <= 600 else 30.0)
    t_start = time.monotonic()
    for t in threads:
        t.start()
    baseline, rss_samples, paused_s, server_down = None, [], 0.0, 0
    next_progress, next_alive = t_start + progress_s, t_start + 2.0
    while True:
        now = time.monotonic()
        t_run = now - t_start - paused_s
        if t_run >= total_s:
            break
        if baseline is None and t_run >= warmup_s:
            t_p = time.monotonic()
            if not pause_clients(ctl, args.clients, args.request_timeout + 30):
                print("soak: clients did not pause for the baseline; taking it under load", file=sys.stderr)
            baseline = idle_sample(srv, args, "baseline")
            resume_clients(ctl)
            paused_s += time.monotonic() - t_p
            next_progress = time.monotonic() + progress_s
            print(f"soak: baseline at {t_run:.0f}s (clients paused {time.monotonic() - t_p:.0f} s): rss "
                  f"{fmt_bytes(baseline.get('rss_bytes'))}, heap {fmt_bytes(baseline.get('heap_bytes'))}, kv pages "
                  f"{fmt_num(baseline.get('kv_pages_used'))}, idle {baseline.get('idle')}", file=sys.stderr)
        if now >= next_progress:
            print(progress(stats, srv, t_run, total_s, rss_samples), file=sys.stderr)
            next_progress += progress_s
        if now >= next_alive:
            next_alive = now + 2.0
            server_down = 0 if srv.alive() else server_down + 1
            if server_down >= 3:
                print("soak: the server is gone or unhealthy; stopping early", file=sys.stderr)
                break
        time.sleep(min(0.5, max(0.05, min(next_progress, next_alive) - time.monotonic())))
    ctl.stop.set()
    resume_clients(ctl)
    t_join = time.monotonic()
    for t in threads:
        t.join(timeout=max(1.0, args.request_timeout + 30 - (time.monotonic() - t_join)))
    stuck = sum(1 for t in threads if t.is_alive())
    load_s = time.monotonic() - t_start - paused_s
    # A server that stopped answering gets no idle wait; the report says why.
    final = idle_sample(srv, args, "final") if server_down < 3 else {"label": "final", "metrics": False}
    alive = srv.alive()
    return report(args, env, stats, baseline, final, alive, stuck, rss_samples, load_s, first)


def fmt_bytes(b):
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"


# ----------------------------------------------------------------- report ----
def report(args, env, stats, baseline, final, alive, stuck, rss_samples, load_s, first):
    c, inflight = stats.snapshot()
    sent = c.get("sent", 0)
    # Anything sent and not accounted for (a client thread stuck or broken) is lost.
    unaccounted = sent - sum(c.get(o, 0) for o in OUTCOMES)
    counts = {o: c.get(o, 0) for o in OUTCOMES}
    counts["lost"] += unaccounted
    reasons = []
    if counts["failed"]:
        reasons.append(f"{counts['failed']} failed")
    if counts["lost"]:
        reasons.append(f"{counts['lost']} lost")
    if counts["completed"] == 0:
        reasons.append("no request completed")
    if c.get("tool_errors"):
        reasons.append(f"{c['tool_errors']} errors inside the soak tool")
    if stuck:
        reasons.append(f"{stuck} client threads still waiting at the end")
    if not alive:
        reasons.append("the server is gone or unhealthy at the end")

    leaked = None
    if not final.get("metrics"):
        reasons.append("/metrics unreadable at the end")
    elif not final["idle"]:
        reasons.append(f"the server did not go idle within {args.idle_timeout:g} s "
                       f"(running {final['running']:.0f}, waiting {final['waiting']:.0f})")
    else:
        leaked = final["kv_pages_leaked"]
        if leaked:
            reasons.append(f"{leaked:.0f} KV pages leaked")
        if final.get("kv_swap_bytes_used"):
            reasons.append(f"{final['kv_swap_bytes_used']:.0f} swap bytes held with nothing running")
    if final.get("metrics"):
        d5xx = final["http_5xx"] - first.get(M_HTTP_5XX, 0.0)
        derr = final["engine_errors"] - first.get(M_ENGINE_ERRORS, 0.0)
        if d5xx:
            reasons.append(f"the server counted {d5xx:.0f} 5xx answers")
        if derr:
            reasons.append(f"the engine finished {derr:.0f} requests with an error")
        if first.get(M_START) is not None and final.get("start_time") != first.get(M_START):
            reasons.append("the server restarted (process_start_time_seconds changed)")

    growth = None
    if baseline is None or baseline.get("rss_bytes") is None:
        reasons.append("no RSS baseline (the run was shorter than --warmup-s, or RSS unreadable)")
    elif final.get("rss_bytes") is None:
        reasons.append("no final RSS")
    else:
        growth = 100.0 * (final["rss_bytes"] - baseline["rss_bytes"]) / baseline["rss_bytes"]
        if growth > args.max_rss_growth:
            reasons.append(f"RSS grew {growth:.2f}% (limit {args.max_rss_growth:g}%)")

    heap_growth = None
    if baseline and baseline.get("heap_bytes") and final.get("heap_bytes") is not None:
        heap_growth = 100.0 * (final["heap_bytes"] - baseline["heap_bytes"]) / baseline["heap_bytes"]
        if heap_growth > args.max_heap_growth:
            reasons.append(f"heap in use grew {heap_growth:.2f}% (limit {args.max_heap_growth:g}%)")

    result = {
        "url": env.url, "model": env.model, "context": env.ctx, "chat": env.chat, "minutes": args.minutes,
        "load_s": round(load_s, 1), "clients": args.clients, "cancel_frac": args.cancel_frac,
        "malformed_frac": args.malformed_frac, "seed": args.seed, "sent": sent, **counts,
        "tokens_completed": stats.tokens, "tool_errors": c.get("tool_errors", 0),
        "by_kind": dict(sorted(stats.by_kind.items())),
        "kv_pages_leaked": leaked, "kv_cached_metric": args.cached_pages_metric,
        "kv_subtract_cached": args.subtract_cached,
        "rss_source": f"/proc/{args.pid}/status" if args.pid is not None else M_RSS,
        "rss_growth_pct": None if growth is None else round(growth, 3), "max_rss_growth_pct": args.max_rss_growth,
        "heap_growth_pct": None if heap_growth is None else round(heap_growth, 3),
        "max_heap_growth_pct": args.max_heap_growth, "kv_policy_pool": args.kv_policy_pool,
        "baseline": baseline, "final": final, "rss_samples": rss_samples,
        "failures": stats.failures, "pass": not reasons, "reasons": reasons,
    }
    kinds = collections.Counter()
    for k, v in stats.by_kind.items():
        kinds[k.split(":")[0] + ":" + k.rsplit(":", 1)[1]] += v
    print(f"soak: {load_s:.0f} s of load, {args.clients} clients, {sent} requests ({sent / max(load_s, 1e-9):.1f}/s), "
          f"{env.model} at context {env.ctx}")
    for o in OUTCOMES:
        parts = ", ".join(f"{k.split(':')[0]} {v}" for k, v in sorted(kinds.items()) if k.endswith(":" + o))
        print(f"  {o:<10} {counts[o]:>7}" + (f"   ({parts})" if parts else ""))
    print(f"  tokens     {stats.tokens:>7}   (completion tokens of completed requests with usage)")
    if final.get("metrics"):
        print(f"  KV pages   leaked {fmt_num(leaked)} (used {final['kv_pages_used']:.0f}, prefix cache "
              f"{final['kv_pages_cached']:.0f}, of {final['kv_pages_total']:.0f}); idle after {final['idle_wait_s']} s")
        print(f"  server     5xx {final['http_5xx'] - first.get(M_HTTP_5XX, 0.0):.0f}, engine errors "
              f"{final['engine_errors'] - first.get(M_ENGINE_ERRORS, 0.0):.0f}, cancelled by the server's count "
              f"{final['cancelled_server'] - first.get(M_CANCELLED, 0.0):.0f}, preemptions "
              f"{final['preemptions'] - first.get(M_PREEMPTIONS, 0.0):.0f}, prefix-cache hit tokens "
              f"{final['prefix_hit_tokens'] - first.get(M_PREFIX_HITS, 0.0):.0f}")
    print(f"  RSS        baseline {fmt_bytes((baseline or {}).get('rss_bytes'))} -> final "
          f"{fmt_bytes(final.get('rss_bytes'))} ({'n/a' if growth is None else f'{growth:+.2f}%'}, "
          f"limit {args.max_rss_growth:g}%), both at idle")
    if heap_growth is not None:
        print(f"  heap       baseline {fmt_bytes(baseline['heap_bytes'])} -> final {fmt_bytes(final['heap_bytes'])} "
              f"({heap_growth:+.2f}%, limit {args.max_heap_growth:g}%), malloc'd bytes in use at idle; "
              f"prefix-cache blocks {baseline.get('prefix_blocks', 0):.0f} -> {final.get('prefix_blocks', 0):.0f}")
    for f in stats.failures[:10]:
        print(f"  {f['outcome']} at {f['t_s']} s [{f['kind']}]: {f['detail']}")
        if "request" in f:
            print(f"      {f['request'][:300]}")
    if len(stats.failures) > 10:
        print(f"  ... {len(stats.failures) - 10} more in the JSON")
    if any("grew" in r for r in reasons):
        print("  note       glibc keeps freed memory in per-thread caches and arenas; start the server with the\n"
              "             allocator settings of docs/reliability.md (\"Soak test\") to tell that from a leak")
    print("  result     " + ("PASS" if not reasons else "FAIL: " + "; ".join(reasons)))
    return (0 if not reasons else 1), result


def fmt_num(v):
    return "n/a" if v is None else f"{v:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="the server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--minutes", type=float, required=True, help="time under load (pauses not counted)")
    ap.add_argument("--clients", type=int, required=True, help="concurrent client threads")
    ap.add_argument("--cancel-frac", type=float, default=0.2, help="share of requests the client abandons")
    ap.add_argument("--malformed-frac", type=float, default=0.1, help="share of malformed requests")
    ap.add_argument("--replay-frac", type=float, default=0.05,
                    help="share of valid requests that repeat an earlier seeded or greedy one")
    ap.add_argument("--seed", type=int, default=0, help="seeds each client's random choices")
    ap.add_argument("--pid", type=int, help="the server's pid: RSS from /proc/PID/status, and a liveness check")
    ap.add_argument("--json", metavar="FILE", help="write the result as one JSON line")
    ap.add_argument("--fail-log", metavar="FILE", help="append each failed or lost request (whole, as JSON) as it happens")
    ap.add_argument("--max-rss-growth", type=float, default=5.0, metavar="PCT",
                    help="fail when idle RSS grows more than this percent from baseline to end (default 5)")
    ap.add_argument("--max-heap-growth", type=float, default=5.0, metavar="PCT",
                    help=f"the same for the heap in use ({M_HEAP}, where the server exports it; default 5)")
    ap.add_argument("--kv-policy-pool", type=int, default=64, metavar="N",
                    help="draw kv_policy from N random valid specs fixed at start (0: a fresh spec per request)")
    ap.add_argument("--warmup-s", type=float, help="load before the RSS baseline (default 15%% of the run, 10..300 s)")
    ap.add_argument("--request-timeout", type=float, default=300.0,
                    help="seconds without an answer (or a stream open) before a request counts as lost")
    ap.add_argument("--idle-timeout", type=float, default=60.0, help="seconds to wait for the server to go idle")
    ap.add_argument("--idle-settle", type=float, default=2.0,
                    help="seconds idle before memory is sampled (baseline and final alike)")
    ap.add_argument("--max-gen-tokens", type=int, default=1024, help="n x max_tokens cap of one valid request")
    ap.add_argument("--progress-s", type=float, help="seconds between progress lines (default 10, or 30 past 10 min)")
    ap.add_argument("--cached-pages-metric", default=M_PAGES_CACHED,
                    help=f"gauge of KV pages only the prefix cache holds (default {M_PAGES_CACHED})")
    ap.add_argument("--subtract-cached", action="store_true",
                    help="leaked = used - cached (for a server whose kv_pages_used counts the cache's pages)")
    ap.add_argument("--api-key", help="sent as Authorization: Bearer KEY")
    args = ap.parse_args()
    if args.clients < 1 or args.minutes <= 0 or not 0 <= args.cancel_frac + args.malformed_frac <= 1:
        ap.error("need --clients >= 1, --minutes > 0 and cancel + malformed fractions within [0, 1]")
    rc, result = run(args)
    if result is not None and args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(result) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
