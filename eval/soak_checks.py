"""The answer checks of eval/soak.py: an OpenAI error object, a non-streamed
body, an SSE stream, each against what the request asked for (an Expect from
soak_requests.build_valid). A check returns a list of problems; [] is a pass."""
import json
import math


def check_error_object(r, statuses, param=None, code=None, words=None):
    """Problems with an error answer ([] when right). param: the field the
    error must name (None: must be null; ... : any)."""
    if r.status_code not in statuses:
        return [f"HTTP {r.status_code}, expected {sorted(statuses)}"]
    try:
        err = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        return [f"HTTP {r.status_code} without an OpenAI error object: {r.text[:200]!r}"]
    probs = []
    if not isinstance(err, dict) or set(err) != {"message", "type", "param", "code"}:
        return [f"error object has keys {sorted(err) if isinstance(err, dict) else type(err).__name__}"]
    if not isinstance(err["message"], str) or not err["message"]:
        probs.append("empty error message")
    if not isinstance(err["type"], str) or not err["type"]:
        probs.append("empty error type")
    if param is not ... and err["param"] != param:
        probs.append(f"error param {err['param']!r}, expected {param!r} ({err['message'][:120]})")
    if code is not None and err["code"] != code:
        probs.append(f"error code {err['code']!r}, expected {code!r}")
    if words and not any(w.lower() in str(err["message"]).lower() for w in words):
        probs.append(f"error message {err['message'][:120]!r} names none of {words}")
    return probs


def check_logprobs(exp, lp, where):
    """Shape of one choice's logprobs; returns (problems, token count)."""
    if exp.logprobs is None:
        return ([] if lp is None else [f"{where}: logprobs not asked for, got some"]), None
    if not isinstance(lp, dict):
        return [f"{where}: logprobs asked for, got {lp!r:.80}"], None
    probs = []

    def check_lp(v, what):
        if not isinstance(v, (int, float)) or math.isnan(v) or v > 1e-3:
            probs.append(f"{where}: {what} logprob {v!r} is not a number <= 0")

    if exp.chat:
        content = lp.get("content")
        if not isinstance(content, list):
            return [f"{where}: chat logprobs without a content list"], None
        for e in content:
            check_lp(e.get("logprob"), "token")
            if not isinstance(e.get("token"), str) or not isinstance(e.get("bytes"), list):
                probs.append(f"{where}: logprob entry without token / bytes")
            alts = e.get("top_logprobs")
            if not isinstance(alts, list) or len(alts) > exp.logprobs:
                got = len(alts) if isinstance(alts, list) else repr(alts)
                probs.append(f"{where}: {got} top_logprobs, asked {exp.logprobs}")
            else:
                for a in alts:
                    check_lp(a.get("logprob"), "top")
        return probs, len(content)
    toks, tlp, top = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not (isinstance(toks, list) and isinstance(tlp, list) and isinstance(top, list)) or not (
            len(toks) == len(tlp) == len(top)):
        return [f"{where}: completions logprobs lists missing or of different lengths"], None
    for v in tlp:
        check_lp(v, "token")
    for alts in top:
        if not isinstance(alts, dict) or len(alts) > exp.logprobs:
            probs.append(f"{where}: top_logprobs entry {alts!r:.60}, asked {exp.logprobs}")
        else:
            for v in alts.values():
                check_lp(v, "top")
    return probs, len(toks)


def check_usage(exp, usage, finishes, n_lp_tokens):
    probs = []
    if not isinstance(usage, dict):
        return [f"usage missing or not an object: {usage!r:.80}"]
    pt, ct, tt = usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
    if not all(isinstance(v, int) for v in (pt, ct, tt)):
        return [f"usage tokens not integers: {usage}"]
    if tt != pt + ct:
        probs.append(f"usage total_tokens {tt} != {pt} + {ct}")
    if exp.prompt_exact is not None and pt != exp.prompt_exact:
        probs.append(f"usage prompt_tokens {pt}, sent {exp.prompt_exact}")
    if pt < 1:
        probs.append(f"usage prompt_tokens {pt}")
    cap = exp.max_tokens if exp.max_tokens is not None else exp.ctx - pt
    if pt + min(1, ct) > exp.ctx:
        probs.append(f"usage prompt_tokens {pt} leave no room in the context of {exp.ctx}")
    if ct > exp.n * cap:
        probs.append(f"usage completion_tokens {ct} > n {exp.n} x max_tokens {cap}")
    n_length = sum(1 for f in finishes if f == "length")
    if ct < n_length * cap:
        probs.append(f"usage completion_tokens {ct} < {n_length} choices at the length limit x {cap}")
    if n_lp_tokens is not None and not exp.stop and n_lp_tokens != ct:
        probs.append(f"{n_lp_tokens} logprob entries for {ct} completion tokens")
    kv = usage.get("kv")
    if kv is not None:
        if not (isinstance(kv, dict) and isinstance(kv.get("rows_kept"), int)
                and isinstance(kv.get("rows_dense"), int)):
            probs.append(f"usage.kv malformed: {kv!r:.120}")
        elif kv["rows_kept"] > kv["rows_dense"] or kv["rows_kept"] < 0:
            probs.append(f"usage.kv rows_kept {kv['rows_kept']} outside [0, rows_dense {kv['rows_dense']}]")
        elif exp.kv_policy is not None and not str(kv.get("policy", "")).startswith(exp.kv_policy):
            probs.append(f"usage.kv policy {kv.get('policy')!r}, asked {exp.kv_policy}")
    return probs


def check_choices(exp, texts, finishes):
    probs = []
    for i, (t, f) in enumerate(zip(texts, finishes)):
        if f not in ("stop", "length"):
            probs.append(f"choice {i}: finish_reason {f!r}")
        if exp.ignore_eos and not exp.stop and f != "length":
            probs.append(f"choice {i}: finish_reason {f!r} with ignore_eos and no stop strings")
        for s in exp.stop:
            if s in t:
                probs.append(f"choice {i}: stop string {s!r} in the text")
    return probs


def check_json_body(exp, env, j):
    """A non-streamed 200 body: (problems, texts, finishes)."""
    if not isinstance(j, dict):
        return [f"body is {type(j).__name__}, not an object"], [], []
    if "error" in j:
        return [f"200 carrying an error: {json.dumps(j)[:300]}"], [], []
    probs = []
    want_obj = "chat.completion" if exp.chat else "text_completion"
    if j.get("object") != want_obj:
        probs.append(f"object {j.get('object')!r}, expected {want_obj}")
    if not isinstance(j.get("id"), str) or not j["id"]:
        probs.append("no id")
    if j.get("model") != env.model:
        probs.append(f"model {j.get('model')!r}")
    if not isinstance(j.get("created"), int):
        probs.append("created is not an integer")
    choices = j.get("choices")
    indices = ([c.get("index") if isinstance(c, dict) else None for c in choices]
               if isinstance(choices, list) else None)
    if indices is None or sorted(i for i in indices if isinstance(i, int)) != list(range(exp.n)):
        return probs + [f"choices indices {indices if indices is not None else choices!r:.80}, n={exp.n}"], [], []
    choices = sorted(choices, key=lambda c: c["index"])
    texts, finishes, n_lp = [], [], 0
    for c in choices:
        if exp.chat:
            msg = c.get("message") or {}
            if msg.get("role") != "assistant" or not isinstance(msg.get("content"), str):
                probs.append(f"choice {c['index']}: message {msg!r:.80}")
            texts.append(msg.get("content") or "")
        else:
            if not isinstance(c.get("text"), str):
                probs.append(f"choice {c['index']}: text {c.get('text')!r:.80}")
            texts.append(c.get("text") or "")
        finishes.append(c.get("finish_reason"))
        p, k = check_logprobs(exp, c.get("logprobs"), f"choice {c['index']}")
        probs += p
        n_lp = None if (k is None or n_lp is None) else n_lp + k
    probs += check_choices(exp, texts, finishes)
    probs += check_usage(exp, j.get("usage"), finishes, n_lp if exp.logprobs is not None else None)
    return probs, texts, finishes


class Stream:
    """Checks an SSE answer chunk by chunk."""

    def __init__(self, exp, env, include_usage):
        self.exp, self.env, self.include_usage = exp, env, include_usage
        self.texts = [""] * exp.n
        self.finishes = [None] * exp.n
        self.opened = [False] * exp.n
        self.n_lp = [0] * exp.n
        self.usage, self.id, self.done, self.n_events = None, None, False, 0
        self.probs = []

    def line(self, raw):
        if not raw:
            return
        if self.done:
            self.probs.append(f"data after [DONE]: {raw[:80]!r}")
            return
        if not raw.startswith(b"data: "):
            self.probs.append(f"SSE line without 'data: ': {raw[:80]!r}")
            return
        payload = raw[6:]
        self.n_events += 1
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            ch = json.loads(payload)
        except ValueError:
            self.probs.append(f"SSE chunk is not JSON: {payload[:80]!r}")
            return
        if not isinstance(ch, dict):
            self.probs.append(f"SSE chunk is not an object: {payload[:80]!r}")
            return
        if "error" in ch:
            self.probs.append(f"error in stream: {payload[:300]!r}")
            return
        self.chunk(ch)

    def chunk(self, ch):
        exp = self.exp
        want = "chat.completion.chunk" if exp.chat else "text_completion"
        if ch.get("object") != want or ch.get("model") != self.env.model:
            self.probs.append(f"chunk object/model {ch.get('object')!r}/{ch.get('model')!r}")
        if self.id is None:
            self.id = ch.get("id")
        elif ch.get("id") != self.id:
            self.probs.append(f"chunk id changed: {self.id!r} -> {ch.get('id')!r}")
        choices = ch.get("choices")
        if not isinstance(choices, list):
            self.probs.append("chunk without a choices list")
            return
        if self.include_usage:
            if not choices:
                if self.usage is not None:
                    self.probs.append("two usage chunks")
                self.usage = ch.get("usage")
                return
            if ch.get("usage", "absent") is not None:
                self.probs.append("choice chunk with a non-null usage")
        elif not choices or ch.get("usage") is not None:
            self.probs.append("usage chunk without include_usage")
            return
        for c in choices:
            i = c.get("index")
            if not isinstance(i, int) or not 0 <= i < exp.n:
                self.probs.append(f"chunk choice index {i!r}, n={exp.n}")
                continue
            if self.finishes[i] is not None:
                self.probs.append(f"choice {i}: chunk after its finish_reason")
            if exp.chat:
                delta = c.get("delta") or {}
                if not self.opened[i] and delta.get("role") != "assistant":
                    self.probs.append(f"choice {i}: first delta without role assistant")
                piece = delta.get("content") or ""
            else:
                piece = c.get("text")
            if not isinstance(piece, str):
                self.probs.append(f"choice {i}: text {piece!r:.60}")
                piece = ""
            self.opened[i] = True
            self.texts[i] += piece
            if c.get("logprobs") is not None:
                p, k = check_logprobs(exp, c["logprobs"], f"choice {i}")
                self.probs += p
                self.n_lp[i] += k or 0
            self.finishes[i] = c.get("finish_reason") or self.finishes[i]

    def finish(self):
        """Problems of a stream read to its end."""
        probs = list(self.probs)
        if not self.done:
            probs.append("stream ended without data: [DONE]")
        if None in self.finishes:
            probs.append(f"choices without a finish_reason: {[i for i, f in enumerate(self.finishes) if f is None]}")
            return probs
        probs += check_choices(self.exp, self.texts, self.finishes)
        if self.include_usage:
            if self.usage is None:
                probs.append("include_usage, but no usage chunk")
            else:
                n_lp = sum(self.n_lp) if self.exp.logprobs is not None else None
                probs += check_usage(self.exp, self.usage, self.finishes, n_lp)
        return probs
