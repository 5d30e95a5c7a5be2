"""The request mix of eval/soak.py: random valid requests (sizes, sampling,
n, stop strings, logprobs, kv_policy) with what each asked for, and
malformed ones with the error that must come back."""
import json


CORPUS = (
    "Once upon a time there was a little girl named Lily. She loved to play in the park with her dog. "
    "One day the sun was shining and the birds were singing in the tall green trees. "
    "Tom had a red ball and he wanted to share it with his friends. The cat sat on the warm mat and purred. "
    "The capital of Japan is Tokyo, and the capital of France is Paris. Water boils at 100 degrees Celsius. "
    "A compiler turns source code into machine code; an interpreter runs it line by line. "
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n"
    "The quick brown fox jumps over the lazy dog. Naive cafe, na\u00efve caf\u00e9, \u65e5\u672c\u8a9e, "
    "\u00fcber, \u0441\u043f\u0430\u0441\u0438\u0431\u043e, \U0001F600. "
    "In 1969 two astronauts walked on the Moon while a third orbited above them. "
    "Ben and Sue went to the store to buy apples, bread and milk for their mother. "
)


STOP_WORDS = ["the", ".", "\n", " and", "Lily", "!", "was", ",", "\u00e9", "ing", " a ", "Once"]


def size_class(rng, ctx):
    r = rng.random()
    if r < 0.45:
        return rng.randint(1, 32)
    if r < 0.75:
        return rng.randint(33, max(33, min(256, ctx // 2)))
    if r < 0.93:
        return rng.randint(min(257, ctx // 4), max(min(257, ctx // 4), ctx // 4))
    return rng.randint(ctx // 4, max(ctx // 4, ctx - 2))


def rnd_kv_policy(rng):
    """A random valid kv_policy spec (docs/sparsity.md), or None."""
    if rng.random() < 0.3:
        return None, None
    name = rng.choice(["dense", "streaming", "snapkv", "pyramidkv", "layerwise", "h2o", "quest"])
    if name == "dense":
        return name, name
    if name == "quest":
        # Page selection: budget >= page, page a multiple of 16.
        page = rng.choice([16, 32, 64])
        keys = {"budget": rng.choice([page, 2 * page, 256, 1024, page * rng.randint(1, 40)])}
        if rng.random() < 0.5:
            keys["page"] = page
        elif page != 64:
            keys["budget"] = max(keys["budget"], 64)  # the default page is 64
        for k, choices in (("interval", [1, 2, 4, 8]), ("sink", [0, 16, 64]), ("recent", [0, 16, 100]),
                           ("full_layers", [0, 1, 2, 64]), ("agg", ["max", "mean"])):
            if rng.random() < 0.3:
                keys[k] = rng.choice(choices)
        return name + ":" + ",".join(f"{k}={v}" for k, v in keys.items()), name
    keys = {}
    budget = None
    if rng.random() < 0.6:
        keys["keep"] = rng.choice([0.05, 0.1, 0.25, 0.5, 1.0, round(rng.uniform(0.01, 1.0), 3)])
    elif name != "streaming" or rng.random() < 0.5:
        budget = rng.choice([1, 4, 16, 64, 256, rng.randint(1, 2048)])
        keys["budget"] = budget
    if name in ("snapkv", "pyramidkv", "layerwise"):
        if rng.random() < 0.4:
            keys["window"] = rng.choice([1, 8, 32, rng.randint(1, 128)])
        if rng.random() < 0.3:
            keys["pool"] = rng.choice([1, 3, 5, 7, 2 * rng.randint(0, 10) + 1])
        if name == "pyramidkv" and rng.random() < 0.3:
            keys["beta"] = rng.choice([1, 5, 20, round(rng.uniform(1, 100), 2)])
    if name in ("snapkv", "pyramidkv", "layerwise", "h2o") and rng.random() < 0.3:
        keys["agg"] = rng.choice(["mean", "max"])
    if rng.random() < 0.25:
        keys["full_layers"] = rng.choice([0, 1, 2, 3, 64])
    if name == "streaming":
        # sink (default 4) must stay below a budget; recent excludes keep and budget.
        sink = rng.choice([0, 1, 4, 8])
        if budget is not None:
            sink = min(sink, budget - 1)
        if "keep" not in keys and budget is None:
            keys["recent"] = rng.choice([1, 16, 64, rng.randint(1, 512)])
        if rng.random() < 0.6 or (budget is not None and budget <= 4):
            keys["sink"] = sink
    if name == "h2o" and rng.random() < 0.4:
        keys["recent"] = rng.randint(0, budget) if budget is not None else rng.randint(0, 256)
    spec = name + (":" + ",".join(f"{k}={v}" for k, v in keys.items()) if keys else "")
    return spec, name


def rnd_sampling(rng, body):
    """Sampling fields within the documented ranges, edges included."""
    if rng.random() < 0.85:
        body["temperature"] = rng.choice([0.0, 0.0, 1.0, 2.0, round(rng.uniform(0, 2), 3), round(rng.uniform(0, 1), 3)])
    if rng.random() < 0.4:
        body["top_p"] = rng.choice([0.0, 1.0, 0.9, round(rng.uniform(0, 1), 3)])
    if rng.random() < 0.4:
        body["top_k"] = rng.choice([-1, 0, 1, 40, rng.randint(2, 1000), 2**31 - 1])
    if rng.random() < 0.3:
        body["min_p"] = rng.choice([0.0, 0.05, 1.0, round(rng.uniform(0, 1), 3)])
    if rng.random() < 0.2:
        body["presence_penalty"] = rng.choice([-2.0, 2.0, round(rng.uniform(-2, 2), 3)])
    if rng.random() < 0.2:
        body["frequency_penalty"] = rng.choice([-2.0, 2.0, round(rng.uniform(-2, 2), 3)])
    if rng.random() < 0.15:
        body["repetition_penalty"] = rng.choice([0.001, 100.0, round(rng.uniform(0.5, 2), 3)])
    if rng.random() < 0.6:
        body["seed"] = rng.choice([0, rng.randint(0, 2**32), rng.randint(-2**63, 2**63 - 1)])
    if rng.random() < 0.3:
        k = rng.randint(1, 4)
        stops = [rng.choice(STOP_WORDS) for _ in range(k)]
        if rng.random() < 0.1:
            stops[0] = "x" * 256
        body["stop"] = stops[0] if k == 1 and rng.random() < 0.5 else stops
    if rng.random() < 0.3:
        body["ignore_eos"] = rng.random() < 0.8


class Expect:
    """What a valid request asked for: the checks' reference."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def build_valid(env, rng, long_gen=False):
    """(path, body dict, Expect) of a random valid request."""
    chat = env.chat and rng.random() < 0.5
    body = {}
    if rng.random() < 0.3:
        body["model"] = env.model
    if chat:
        n_msgs = rng.choice([1, 1, 1, 2, 3, 4])
        overhead = env.chat_base + env.chat_per_msg * (n_msgs - 1) + 16
        budget = env.ctx - 1 - overhead
        msgs, content_tokens = [], 0
        for i in range(n_msgs):
            role = "user" if (n_msgs - 1 - i) % 2 == 0 else "assistant"
            if i == 0 and n_msgs > 1 and rng.random() < 0.5:
                role = rng.choice(["system", "developer"])
            p = env.prompt_text(rng, max(1, (budget - content_tokens) // (n_msgs - i)))
            if p is None or content_tokens + p[0] > budget:
                break
            content_tokens += p[0]
            text = p[1]
            content = text
            if rng.random() < 0.15:
                cut = len(text) // 2
                content = [{"type": "text", "text": text[:cut]}, {"type": "text", "text": text[cut:]}]
            msgs.append({"role": role, "content": content})
        if not msgs or msgs[-1]["role"] != "user":
            msgs = [{"role": "user", "content": "Hello"}]
            content_tokens = 2
        body["messages"] = msgs
        est = env.chat_base + env.chat_per_msg * (len(msgs) - 1) + content_tokens
        prompt_exact = None
        room = env.ctx - (est + 16 + est // 32)
    else:
        r = rng.random()
        if r < 0.35:
            n = min(len(env.ids), max(1, size_class(rng, env.ctx)), env.ctx - 1)
            start = rng.randrange(len(env.ids) - n + 1)
            ids = env.ids[start:start + n]
            body["prompt"] = [ids] if rng.random() < 0.15 else ids
            prompt_exact = n
        else:
            p = env.prompt_text(rng, env.ctx - 1)
            body["prompt"] = [p[1]] if rng.random() < 0.1 else p[1]
            prompt_exact = p[0]
        room = env.ctx - prompt_exact
    if room < 1:
        return build_valid(env, rng, long_gen)

    r = rng.random()
    if long_gen:
        max_tokens = rng.randint(min(room, 32), min(room, 512))
    elif r < 0.5:
        max_tokens = rng.randint(1, min(room, 16))
    elif r < 0.83:
        max_tokens = rng.randint(1, min(room, 128))
    elif r < 0.95:
        max_tokens = rng.randint(1, min(room, 512))
    else:
        max_tokens = None if room <= env.gen_cap else min(room, 512)
    n = rng.choices([1, 2, 3, 4, 6, 8, 16], weights=[750, 150, 40, 30, 15, 10, 5])[0]
    cap = max_tokens if max_tokens is not None else room
    while n > 1 and n * cap > env.gen_cap:
        n //= 2
    if n > 1 or rng.random() < 0.1:
        body["n"] = n
    if max_tokens is not None:
        body["max_completion_tokens" if chat and rng.random() < 0.3 else "max_tokens"] = max_tokens
    rnd_sampling(rng, body)
    stream = rng.random() < 0.5
    if stream:
        body["stream"] = True
        if rng.random() < 0.6:
            body["stream_options"] = {"include_usage": True}
    logprobs = None
    if rng.random() < 0.2:
        if chat:
            body["logprobs"] = True
            logprobs = rng.choice([0, 1, 5, 20]) if rng.random() < 0.7 else 0
            if logprobs or rng.random() < 0.5:
                body["top_logprobs"] = logprobs
        else:
            logprobs = rng.choice([0, 1, 2, 5])
            body["logprobs"] = logprobs
    spec, policy_name = rng.choice(env.policies) if env.policies else rnd_kv_policy(rng)
    if spec is not None:
        body["kv_policy"] = spec
    stop = body.get("stop", [])
    exp = Expect(chat=chat, n=n, max_tokens=max_tokens, ctx=env.ctx, prompt_exact=prompt_exact,
                 ignore_eos=body.get("ignore_eos", False), stop=[stop] if isinstance(stop, str) else stop,
                 logprobs=logprobs, kv_policy=policy_name,
                 deterministic=("seed" in body or body.get("temperature", 1.0) == 0.0))
    return ("/v1/chat/completions" if chat else "/v1/completions"), body, exp


def build_malformed(env, rng):
    """(name, path, raw body, statuses, param, code, words): a request the
    server must refuse with an error object that names the problem."""
    ok = {"prompt": "Once upon a time", "max_tokens": 4}
    chat_ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    def with_(base=None, **kw):
        b = dict(ok if base is None else base)
        b.update(kw)
        return json.dumps(b).encode()

    ctx = env.ctx
    cases = [
        ("invalid json", lambda: ("/v1/completions", json.dumps(ok).encode()[:rng.randint(1, 20)], {400}, None, None,
                                  ["JSON"])),
        ("empty body", lambda: ("/v1/completions", b"", {400}, None, None, ["JSON"])),
        ("not an object", lambda: ("/v1/completions", b'["prompt", "x"]', {400}, None, None, None)),
        ("deep nesting", lambda: ("/v1/completions", b'{"prompt": ' + b"[" * rng.randint(65, 5000) + b"]" * 3 + b"}",
                                  {400}, None, None, ["nest"])),
        ("invalid utf-8", lambda: ("/v1/completions", b'{"prompt": "bad \xff\xfe"}', {400}, None, None, ["UTF-8"])),
        ("unknown route", lambda: ("/v1/" + rng.choice(["embeddings", "nothing", "completion"]), with_(), {404}, None,
                                   None, ["route"])),
    ]
    wrong_types = [("temperature", "hot"), ("top_p", "x"), ("top_k", 1.5), ("min_p", []), ("max_tokens", "10"),
                   ("n", "2"), ("seed", "abc"), ("stream", "yes"), ("stop", 5), ("logprobs", True),
                   ("presence_penalty", {}), ("ignore_eos", 1), ("kv_policy", 7), ("model", 3), ("prompt", {"a": 1}),
                   ("max_tokens", 2.5), ("n", True)]
    out_of_range = [("temperature", 2.5), ("temperature", -0.1), ("top_p", 1.01), ("min_p", -0.5),
                    ("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0),
                    ("repetition_penalty", 1000), ("top_k", -2), ("n", 0), ("n", 17), ("max_tokens", 0),
                    ("max_tokens", -1), ("logprobs", 6), ("seed", 2**64)]
    bad_policies = ["nosuch", "snapkv:keep=0", "snapkv:keep=1.5", "snapkv:pool=4", "streaming:window=8",
                    "h2o:budget=10,recent=20", "snapkv:keep=0.1,budget=5", "@/etc/passwd", "snapkv:", "snapkv:keep",
                    "streaming:sink=0,recent=0", "dense:keep=0.1", "snapkv:budget=0", "pyramidkv:beta=0.5",
                    "snapkv:agg=median", "snapkv:keep=0.1,keep=0.2", "snap kv", "streaming:sink=8,budget=8",
                    "layerwise:full_layers=-1", "snapkv:keep=nan", "quest:page=24", "quest:budget=8,page=16",
                    "quest:keep=0.1", "lserve:static=0.5", "lserve:profile=/etc/passwd"]
    cases += [
        ("wrong type", lambda: (lambda f, v: ("/v1/completions", with_(**{f: v}), {400}, f, None, None))(
            *rng.choice(wrong_types))),
        ("out of range", lambda: (lambda f, v: ("/v1/completions", with_(**{f: v}), {400}, f, None, None))(
            *rng.choice(out_of_range))),
        ("bad kv_policy", lambda: ("/v1/completions", with_(kv_policy=rng.choice(bad_policies)), {400}, "kv_policy",
                                   None, None)),
        ("too many stops", lambda: ("/v1/completions", with_(stop=["a", "b", "c", "d", "e"]), {400}, "stop", None,
                                    None)),
        ("empty stop", lambda: ("/v1/completions", with_(stop=["a", ""]), {400}, "stop", None, None)),
        ("long stop", lambda: ("/v1/completions", with_(stop="y" * 257), {400}, "stop", None, None)),
        ("ids beyond context", lambda: ("/v1/completions", with_(prompt=(env.ids * 2)[:ctx + rng.randint(0, 64)],
                                                                 max_tokens=1),
                                        {400}, "prompt", "context_length_exceeded", None)),
        ("text beyond context", lambda: ("/v1/completions", with_(prompt=CORPUS * (ctx // 8 + 4), max_tokens=1), {400},
                                         "prompt", "context_length_exceeded", None)),
        ("bytes far beyond context", lambda: ("/v1/completions", with_(prompt="a" * (128 * ctx + 1)), {400}, "prompt",
                                              "context_length_exceeded", None)),
        ("max_tokens beyond context", lambda: ("/v1/completions", with_(max_tokens=ctx), {400}, "max_tokens",
                                               "context_length_exceeded", None)),
        ("id outside vocabulary", lambda: ("/v1/completions", with_(prompt=[1, 2, rng.choice([-1, 10**9, 2**40])]),
                                           {400}, "prompt", None, None)),
        ("unknown model", lambda: ("/v1/completions", with_(model="gpt-17"), {404}, "model", "model_not_found", None)),
        ("missing prompt", lambda: ("/v1/completions", json.dumps({"max_tokens": 3}).encode(), {400}, "prompt", None,
                                    None)),
        ("empty prompt", lambda: ("/v1/completions", with_(prompt=rng.choice(["", []])), {400}, "prompt", None, None)),
        ("echo", lambda: ("/v1/completions", with_(echo=True), {400}, "echo", None, None)),
        ("stream_options without stream", lambda: ("/v1/completions", with_(stream_options={"include_usage": True}),
                                                   {400}, "stream_options", None, None)),
        ("missing messages", lambda: ("/v1/chat/completions", b'{"max_tokens": 3}', {400}, "messages", None, None)),
        ("empty messages", lambda: ("/v1/chat/completions", with_(chat_ok, messages=[]), {400}, "messages", None,
                                    None)),
        ("bad role", lambda: ("/v1/chat/completions", with_(chat_ok, messages=[{"role": "wizard", "content": "hi"}]),
                              {400}, "messages[0].role", None, None)),
        ("content number", lambda: ("/v1/chat/completions", with_(chat_ok, messages=[{"role": "user", "content": 3}]),
                                    {400}, "messages[0].content", None, None)),
        ("chat top_logprobs without logprobs", lambda: ("/v1/chat/completions", with_(chat_ok, top_logprobs=2), {400},
                                                        "top_logprobs", None, None)),
        ("chat top_logprobs too large", lambda: ("/v1/chat/completions",
                                                 with_(chat_ok, logprobs=True, top_logprobs=21), {400}, "top_logprobs",
                                                 None, None)),
        ("chat kv_policy", lambda: ("/v1/chat/completions", with_(chat_ok, kv_policy=rng.choice(bad_policies)), {400},
                                    "kv_policy", None, None)),
    ]
    if env.chat:
        cases.append(("chat beyond context", lambda: (
            "/v1/chat/completions", with_(chat_ok, messages=[{"role": "user", "content": CORPUS * (ctx // 8 + 4)}]),
            {400}, "messages", "context_length_exceeded", None)))
    name, make = rng.choice(cases)
    return (name,) + make()
