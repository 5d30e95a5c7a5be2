"""Fixtures for the HTTP tests: each server fixture spawns `sieve serve` on a
free port (--port 0; the port is read from the server's first log line),
waits for /health, and stops it with SIGTERM at the end (checking that it
exits cleanly).

Environment (set by tests/server/CMakeLists.txt):
  SIEVE_BIN            the sieve binary
  SIEVE_TEST_MODELS  folder with stories260K.gguf
  SIEVE_SOURCE_DIR     repository root (for scripts/fetch_model.sh)
"""
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest
import requests

STARTUP_DEADLINE_S = 120
# Compute threads of the servers under test: both cores by default, so the
# tests exercise the thread pool as users run it (SIEVE_TEST_THREADS overrides).
SERVER_THREADS = os.environ.get("SIEVE_TEST_THREADS", "2")


def _bin():
    path = os.environ.get("SIEVE_BIN")
    if not path or not os.path.exists(path):
        pytest.fail("SIEVE_BIN must name the built sieve binary (run through ctest -L server)")
    return path


def stories_model():
    path = os.path.join(os.environ.get("SIEVE_TEST_MODELS", ""), "stories260K.gguf")
    if not os.path.exists(path):
        pytest.fail(f"stories260K.gguf not found at {path}; set SIEVE_TEST_MODELS")
    return path


def default_model():
    """The default model, fetched (once) by the project's script."""
    src = os.environ.get("SIEVE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    out = subprocess.run(["bash", os.path.join(src, "scripts", "fetch_model.sh")],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        pytest.fail("scripts/fetch_model.sh failed: " + out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1]


class Server:
    def __init__(self, args):
        self.log = tempfile.NamedTemporaryFile(prefix="sieve-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([_bin(), "serve", "--port", "0"] + args,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = None
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"sieve serve exited with {self.proc.returncode}:\n{self.log_text()}")
            m = re.search(r"listening on (http://[0-9.]+:\d+)", self.log_text())
            if m and self.url is None:
                self.url = m.group(1)
            if self.url:
                try:
                    if requests.get(self.url + "/health", timeout=5).status_code == 200:
                        return
                except requests.ConnectionError:
                    pass
            time.sleep(0.05)
        self.stop()
        pytest.fail("sieve serve did not become healthy:\n" + self.log_text())

    def log_text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def metrics(self):
        text = requests.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def wait_idle(self, deadline_s=60):
        """Polls /metrics until nothing runs or waits and no KV page is in use."""
        deadline = time.monotonic() + deadline_s
        m = self.metrics()
        while time.monotonic() < deadline:
            m = self.metrics()
            if (m["sieve:num_requests_running"] == 0 and m["sieve:num_requests_waiting"] == 0
                    and m["sieve:kv_pages_used"] == 0):
                return m
            time.sleep(0.05)
        return m

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _spawn(args):
    srv = Server(args)
    yield srv
    rc = srv.stop()
    text = srv.log_text()
    os.unlink(srv.log.name)
    assert rc == 0, f"sieve serve exited with {rc} after SIGTERM:\n{text[-4000:]}"


@pytest.fixture(scope="session")
def server():
    """stories260K: 8 slots of 256 tokens, small limits so bad inputs are cheap."""
    yield from _spawn(["-m", stories_model(), "-np", "8", "-c", "256", "-t", SERVER_THREADS, "--max-body", "1MiB",
                       "--max-queue", "64"])


@pytest.fixture(scope="session")
def small_kv_server():
    """stories260K with a KV pool far smaller than 8 full sequences: forces preemption."""
    yield from _spawn(["-m", stories_model(), "-np", "8", "-c", "512", "-t", SERVER_THREADS,
                       "--kv-page-size", "4KiB", "--kv-memory", "720KiB"])


@pytest.fixture(scope="session")
def policy_server():
    """stories260K with a default KV policy (snapkv) that requests override."""
    yield from _spawn(["-m", stories_model(), "-np", "8", "-c", "512", "-t", SERVER_THREADS,
                       "--kv-page-size", "4KiB", "--kv-policy", "snapkv:keep=0.25"])


@pytest.fixture(scope="session")
def smollm2_server():
    yield from _spawn(["-m", default_model(), "-np", "2", "-c", "1024", "-t", SERVER_THREADS])
