"""The chat page in a real headless browser (Debian's chromium and
chromium-driver, driven by Selenium) against `sieve serve` with an API key on
the default model, SmolLM2-135M-Instruct: the key prompt and a 401 shown in
the page, a streamed answer growing in the DOM, the speed line, a multi-turn
conversation, a server error shown, the KV policy field, and Stop cancelling
a long answer (the UI back to idle, the server's sequence cancelled and its
KV pages returned).

Without chromium, its driver or Selenium the test fails (it is not skipped):
scripts/install_deps.sh installs them. SIEVE_CHROMIUM / SIEVE_CHROMEDRIVER
point at other binaries."""
import json
import os
import re
import shutil

import pytest

KEY = "browser-test-key"
CANCELLED = 'sieve:request_success_total{finished_reason="cancelled"}'
SPEED_RE = re.compile(r"(\d+) tokens · ([\d.]+) tok/s · first token (\d+) ms · prompt (\d+) tokens")


def start_chromium(width=1000, height=750):
    hint = "install Debian's chromium and chromium-driver and PyPI's selenium (scripts/install_deps.sh)"
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.fail(f"the browser test needs Selenium ({e}); {hint}", pytrace=False)
    browser = os.environ.get("SIEVE_CHROMIUM") or shutil.which("chromium")
    driver = os.environ.get("SIEVE_CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        pytest.fail(f"chromium ({browser}) or chromedriver ({driver}) not found; {hint}, or set SIEVE_CHROMIUM and "
                    "SIEVE_CHROMEDRIVER", pytrace=False)
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", f"--window-size={width},{height}"]:
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(options=opts, service=Service(driver))
    except WebDriverException as e:
        pytest.fail(f"chromium did not start headless ({browser}, {driver}): {e.msg}", pytrace=False)


@pytest.fixture(scope="module")
def chat_server():
    """SmolLM2 behind an API key. stories260K would decode a whole 2000-token
    answer in about a second, before a click through WebDriver reliably lands."""
    from conftest import SERVER_THREADS, Server, default_model
    srv = Server(["-m", default_model(), "--api-key", KEY, "-np", "2", "-c", "2048", "-t", SERVER_THREADS])
    yield srv
    assert srv.stop() == 0, srv.log_text()[-4000:]


@pytest.fixture(scope="module")
def browser():
    d = start_chromium()
    yield d
    d.quit()


def wait(d, cond, what, timeout=30):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.02).until(lambda _: cond())
    except TimeoutException:
        pytest.fail(f"timed out after {timeout} s waiting for {what}; page state {state(d)}, model badge "
                    f"{el(d, 'model').text!r}, speed line {el(d, 'speed').text!r}, error "
                    f"{el(d, 'error-text').text!r}", pytrace=False)


def el(d, element_id):
    return d.find_element("id", element_id)


def state(d):
    return d.find_element("tag name", "body").get_attribute("data-state")


def messages(d):
    return d.find_elements("css selector", "#messages .msg")


def last_answer(d):
    answers = d.find_elements("css selector", "#messages .msg.assistant .content")
    return answers[-1].text if answers else ""


def set_field(d, element_id, value):
    if not el(d, "params").is_displayed():
        el(d, "settings-toggle").click()
    field = el(d, element_id)
    field.clear()
    if value:
        field.send_keys(value)


def send(d, text=None):
    """Clicks Send (the busy state is set before the click returns)."""
    if text is not None:
        el(d, "input").clear()
        el(d, "input").send_keys(text)
    el(d, "send").click()


def wait_done(d):
    wait(d, lambda: state(d) == "idle" and (el(d, "speed").get_attribute("data-final") == "1"
                                             or el(d, "error").is_displayed()), "the answer to finish")


def speed(d):
    text = el(d, "speed").text
    m = SPEED_RE.search(text)
    assert m, f"speed line {text!r} lacks tokens, tok/s, first token and prompt tokens"
    n, tps, ttft_ms, prompt = int(m[1]), float(m[2]), int(m[3]), int(m[4])
    assert n > 0 and tps > 0 and ttft_ms >= 0 and prompt > 0, text
    return n, prompt, text


def unexpected_console_errors(d):
    """SEVERE console entries other than the HTTP errors this test provokes (a CSP violation would be one)."""
    out = []
    for entry in d.get_log("browser"):
        if entry["level"] != "SEVERE":
            continue
        if entry["source"] == "network" and re.search(r"status of (400|401)", entry["message"]):
            continue
        out.append(entry["message"])
    return out


def test_chat_streams_keeps_the_conversation_and_shows_errors(chat_server, browser):
    d = browser
    d.get(chat_server.url + "/")
    assert d.title == "sieve chat"
    # No key yet: the model badge says so and the settings open themselves.
    wait(d, lambda: el(d, "model").text == "API key needed", "the API-key prompt")
    assert el(d, "params").is_displayed()
    send(d, "Hello")
    wait(d, lambda: el(d, "error").is_displayed(), "the 401 to be shown")
    assert "HTTP 401" in el(d, "error-text").text and "API key" in el(d, "error-text").text
    assert el(d, "input").get_attribute("value") == "Hello", "the failed message was not given back"
    assert not messages(d)

    set_field(d, "api-key", KEY)
    el(d, "input").click()  # the key field's change event fires on blur
    wait(d, lambda: "context 2048" in el(d, "model").text, "the model name after the key")
    set_field(d, "max_tokens", "48")
    set_field(d, "seed", "7")
    # Every append to the answer's text node, with the text's length before it.
    d.execute_script("""
        window.appended = [];
        new MutationObserver((records) => {
            for (const r of records) if (r.type === "characterData") window.appended.push(r.oldValue.length);
        }).observe(document.getElementById("messages"),
                   {subtree: true, characterData: true, characterDataOldValue: true});""")
    send(d)
    wait_done(d)
    assert not el(d, "error").is_displayed(), el(d, "error-text").text
    answer = last_answer(d)
    appended = d.execute_script("return window.appended;")
    assert answer.strip(), "no answer text"
    assert len(appended) >= 3 and appended == sorted(appended) and len(set(appended)) == len(appended), \
        f"the answer did not grow chunk by chunk: lengths before each append {appended}"
    n1, p1, text1 = speed(d)
    assert n1 <= 48 and "finish " in text1 and "kv dense" in text1

    # Second turn, sent with Enter: the prompt now holds the first exchange.
    from selenium.webdriver.common.keys import Keys
    el(d, "input").send_keys("What happened next?" + Keys.ENTER)
    wait_done(d)
    _, p2, text2 = speed(d)
    assert p2 > p1 + n1, f"second prompt {p2} tokens: the first turn ({p1} + {n1}) was not sent again"
    # The first turn's prompt came from the server's prefix cache (whole 16-token blocks).
    m = re.search(r"prompt \d+ tokens \((\d+) cached\)", text2)
    assert m and int(m[1]) >= 16 and int(m[1]) % 16 == 0, f"speed line {text2!r}: no cached prompt tokens shown"
    assert [m.get_attribute("class") for m in messages(d)] == ["msg user", "msg assistant"] * 2

    # A request the server refuses: its error object in the page, the turn dropped.
    set_field(d, "kv_policy", "snapkb")
    send(d, "And then?")
    wait_done(d)
    error = el(d, "error-text").text
    assert "HTTP 400" in error and "unknown policy 'snapkb'" in error and "param kv_policy" in error, error
    assert len(messages(d)) == 4
    set_field(d, "kv_policy", "snapkv:keep=0.5")
    send(d)  # the refused text was put back into the input
    wait_done(d)
    assert not el(d, "error").is_displayed(), el(d, "error-text").text
    assert "kv snapkv:keep=0.5" in speed(d)[2]
    assert len(messages(d)) == 6
    assert unexpected_console_errors(d) == []


def test_stop_cancels_the_answer(chat_server, browser):
    d = browser
    d.get(chat_server.url + "/")  # the key is kept for the tab, the settings in localStorage
    wait(d, lambda: "context 2048" in el(d, "model").text, "the model name")
    assert not messages(d)
    set_field(d, "max_tokens", "")  # to the end of the context: 2000 tokens
    set_field(d, "kv_policy", "")
    set_field(d, "extra", json.dumps({"ignore_eos": True}))
    before = chat_server.wait_idle()

    send(d, "Tell me a very long story.")
    wait(d, lambda: len(last_answer(d)) > 0, "the first text of the answer")
    first = len(last_answer(d))
    wait(d, lambda: len(last_answer(d)) > first, "the answer to grow", timeout=10)
    assert state(d) == "busy" and el(d, "stop").is_displayed() and not el(d, "send").is_displayed()
    el(d, "stop").click()
    wait(d, lambda: state(d) == "idle", "the page to go idle after Stop", timeout=10)
    assert el(d, "send").is_displayed() and not el(d, "stop").is_displayed()
    notes = [n.text for n in d.find_elements("css selector", "#messages .msg.assistant .note")]
    assert notes == ["stopped"], notes
    assert el(d, "speed").text.startswith("stopped · ≈"), el(d, "speed").text
    assert not el(d, "error").is_displayed(), el(d, "error-text").text

    m = chat_server.wait_idle()
    assert m["sieve:num_requests_running"] == 0 and m["sieve:num_requests_waiting"] == 0
    assert m["sieve:kv_pages_used"] == 0
    assert m[CANCELLED] == before[CANCELLED] + 1, "the stopped request was not cancelled in the engine"
    n_gen = m["sieve:generation_tokens_total"] - before["sieve:generation_tokens_total"]
    assert n_gen < 1000, f"{n_gen} tokens generated: Stop landed late (the answer could run to ~2000)"

    el(d, "new-chat").click()
    assert not messages(d) and el(d, "speed").text == ""
    assert unexpected_console_errors(d) == []
