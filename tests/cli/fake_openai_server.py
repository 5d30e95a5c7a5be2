#!/usr/bin/env python3
"""A tiny OpenAI-compatible streaming server for testing `sieve bench-serve`.

Loopback only. Streams `max_tokens` content chunks ("tok0 ", "tok1 ", ...)
after a short "prefill" pause, then a usage chunk and `data: [DONE]`. Each
event is written in two pieces, with a comment line before it, so the
client's incremental SSE parsing is exercised over a real socket.

It checks what a load generator must send (stream, ignore_eos, max_tokens,
token ids below the vocabulary) and answers 400 with an OpenAI error object
when a request is wrong, so a test fails if bench-serve's requests drift.

Flags for failure cases: --fail-every K (every K-th request gets HTTP 500),
--stall-ms MS (stall after the first chunk), --no-usage, --n-vocab 0 (no
meta.n_vocab in /v1/models). Writes the bound port to --port-file and exits
by itself after --lifetime seconds so a crashed test leaves nothing behind.
"""
import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--n-vocab", type=int, default=512)
    ap.add_argument("--prefill-ms", type=float, default=10)
    ap.add_argument("--delay-ms", type=float, default=3)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--stall-ms", type=float, default=0)
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--lifetime", type=float, default=120)
    args = ap.parse_args()
    counter = {"n": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # stream until close, no chunked encoding

        def log_message(self, *a):
            pass

        def send_json(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status, msg):
            self.send_json(status, {"error": {"message": msg, "type": "invalid_request_error", "code": status}})

        def do_GET(self):
            if self.path != "/v1/models":
                return self.error(404, f"no route {self.path}")
            model = {"id": MODEL, "object": "model", "owned_by": "test"}
            if args.n_vocab > 0:
                model["meta"] = {"n_vocab": args.n_vocab}
            self.send_json(200, {"object": "list", "data": [model]})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            try:
                req = json.loads(self.rfile.read(length))
            except ValueError:
                return self.error(400, "invalid JSON")
            chat = self.path == "/v1/chat/completions"
            if not chat and self.path != "/v1/completions":
                return self.error(404, f"no route {self.path}")
            if req.get("model") != MODEL:
                return self.error(404, f"model '{req.get('model')}' not found")
            if req.get("stream") is not True or req.get("ignore_eos") is not True:
                return self.error(400, "expected stream: true and ignore_eos: true")
            n_out = req.get("max_tokens")
            if not isinstance(n_out, int) or n_out < 1:
                return self.error(400, f"bad max_tokens {n_out!r}")
            if chat:
                msgs = req.get("messages")
                if not isinstance(msgs, list) or not msgs or not isinstance(msgs[0].get("content"), str):
                    return self.error(400, "bad messages")
                n_prompt = len(msgs[0]["content"].split())
            else:
                prompt = req.get("prompt")
                if isinstance(prompt, list):
                    if args.n_vocab <= 0:
                        return self.error(400, "token-id prompt but this server reports no vocabulary")
                    if not prompt or not all(isinstance(t, int) and 0 <= t < args.n_vocab for t in prompt):
                        return self.error(400, f"token ids must be in [0, {args.n_vocab})")
                    n_prompt = len(prompt)
                elif isinstance(prompt, str) and prompt:
                    n_prompt = len(prompt.split())
                else:
                    return self.error(400, "bad prompt")
            with lock:
                counter["n"] += 1
                nth = counter["n"]
            if args.fail_every > 0 and nth % args.fail_every == 0:
                return self.error(500, f"injected failure of request {nth}")
            include_usage = bool((req.get("stream_options") or {}).get("include_usage"))

            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()

            def event(obj, crlf=False):
                data = obj if isinstance(obj, str) else json.dumps(obj)
                text = f": keep-alive\r\n" if crlf else ": keep-alive\n"
                text += f"data: {data}" + ("\r\n\r\n" if crlf else "\n\n")
                raw = text.encode()
                cut = len(raw) // 2
                self.wfile.write(raw[:cut])
                self.wfile.flush()
                self.wfile.write(raw[cut:])
                self.wfile.flush()

            base = {"id": f"cmpl-{nth}", "created": int(time.time()), "model": MODEL}
            if chat:
                event({**base, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            time.sleep(args.prefill_ms / 1000)
            for i in range(n_out):
                if i > 0:
                    time.sleep(args.delay_ms / 1000)
                text = f"tok{i} "
                last = i == n_out - 1
                if chat:
                    choice = {"index": 0, "delta": {"content": text}, "finish_reason": "length" if last else None}
                    event({**base, "object": "chat.completion.chunk", "choices": [choice]}, crlf=i % 2 == 1)
                else:
                    choice = {"index": 0, "text": text, "finish_reason": "length" if last else None}
                    event({**base, "object": "text_completion", "choices": [choice]}, crlf=i % 2 == 1)
                if i == 0 and args.stall_ms > 0:
                    time.sleep(args.stall_ms / 1000)
            if include_usage and not args.no_usage:
                usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                         "total_tokens": n_prompt + n_out}
                event({**base, "choices": [], "usage": usage})
            event("[DONE]")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    # Renamed into place so a reader never sees a half-written port.
    os.replace(args.port_file + ".tmp", args.port_file)
    threading.Timer(args.lifetime, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
