#!/usr/bin/env python3
"""Screenshots of the chat page (GET /) in use, for docs/serving.md: starts
`sieve serve` on a model, drives the page in headless Chromium like a person
(types, sends, opens the settings), and writes two PNGs:

    chat-page.png           a two-turn conversation, streamed, with the speed line
    chat-page-settings.png  the settings panel: system prompt, sampling, KV policy

    python3 eval/chat_screenshot.py                    # SmolLM2 (scripts/fetch_model.sh), into docs/images/
    python3 eval/chat_screenshot.py -m MODEL.gguf -o /tmp/shots --width 1200 --height 800

Needs what the browser test needs: Debian's chromium and chromium-driver and
PyPI's selenium (scripts/install_deps.sh), and a built sieve (build/sieve,
or --sieve). Answers are sampled with fixed seeds, so a rerun on the same
build and model gives the same text; the timings differ.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_model():
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch_model.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("scripts/fetch_model.sh failed:\n" + out.stderr)
    return out.stdout.strip().splitlines()[-1]


def start_server(sieve, model, log):
    proc = subprocess.Popen([sieve, "serve", "-m", model, "--port", "0", "-np", "2", "-c", "2048"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"sieve serve exited with {proc.returncode}; log: {log.name}")
        with open(log.name, errors="replace") as f:
            m = re.search(r"listening on (http://[0-9.]+:\d+)", f.read())
        url = url or (m and m.group(1))
        if url:
            try:
                if urllib.request.urlopen(url + "/health", timeout=5).status == 200:
                    return proc, url
            except OSError:
                pass
        time.sleep(0.1)
    proc.terminate()
    sys.exit(f"sieve serve did not become healthy; log: {log.name}")


def start_chromium(width, height):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        sys.exit("needs selenium (pip install selenium; scripts/install_deps.sh installs it)")
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver:
        sys.exit("needs Debian's chromium and chromium-driver (scripts/install_deps.sh installs them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--force-device-scale-factor=1", f"--window-size={width},{height}"]:
        opts.add_argument(arg)
    d = webdriver.Chrome(options=opts, service=Service(driver))
    # --window-size counts the window's frame; this makes the page itself width x height.
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return d


def ask(d, text, timeout=120):
    """Types a message, sends it with Enter, and waits for the answer to finish."""
    from selenium.webdriver.common.keys import Keys
    d.find_element("id", "input").send_keys(text + Keys.ENTER)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.find_element("tag name", "body").get_attribute("data-state") == "idle":
            error = d.find_element("id", "error-text").text
            if error:
                sys.exit("the page shows an error: " + error)
            return
        time.sleep(0.1)
    sys.exit(f"no answer within {timeout} s")


def fill(d, values):
    for element_id, value in values.items():
        field = d.find_element("id", element_id)
        field.clear()
        field.send_keys(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", help="GGUF model (default: SmolLM2-135M-Instruct via scripts/fetch_model.sh)")
    ap.add_argument("--sieve", default=os.path.join(ROOT, "build", "sieve"), help="the sieve binary")
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "docs", "images"), help="output folder")
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--height", type=int, default=640)
    args = ap.parse_args()
    model = args.model or default_model()
    os.makedirs(args.out, exist_ok=True)

    log = tempfile.NamedTemporaryFile(prefix="sieve-serve-", suffix=".log", delete=False)
    proc, url = start_server(args.sieve, model, log)
    d = None
    try:
        d = start_chromium(args.width, args.height)
        d.get(url + "/")
        d.execute_script("localStorage.clear(); sessionStorage.clear();")
        d.get(url + "/")

        # 1. A conversation: settings closed, the speed line of the last answer.
        d.find_element("id", "settings-toggle").click()
        fill(d, {"temperature": "0.3", "seed": "3", "max_tokens": "200"})
        d.find_element("id", "settings-toggle").click()
        ask(d, "What is the capital of Japan?")
        ask(d, "Name three famous places to visit there.")
        shot = os.path.join(args.out, "chat-page.png")
        d.save_screenshot(shot)
        print(shot)

        # 2. The settings panel, after a new chat with a system prompt and a KV policy.
        d.find_element("id", "new-chat").click()
        d.find_element("id", "settings-toggle").click()
        fill(d, {"system": "You are a helpful assistant who answers in one or two sentences.",
                 "temperature": "0.7", "top_p": "0.9", "top_k": "40", "seed": "42", "max_tokens": "96",
                 "kv_policy": "h2o:budget=64"})
        ask(d, "Why is the sky blue?")
        d.execute_script("document.getElementById('params').scrollTop = 0;")
        shot = os.path.join(args.out, "chat-page-settings.png")
        d.save_screenshot(shot)
        print(shot)
    finally:
        if d is not None:
            d.quit()
        proc.terminate()
        proc.wait(timeout=30)
        os.unlink(log.name)


if __name__ == "__main__":
    main()
