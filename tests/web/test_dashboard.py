"""The dashboard in headless chromium, against a kvgate that recorded real threads through the
provider simulator: what a user sees is checked against the read API it was drawn from.

KVGATE_SCREENSHOTS=1 also saves the overview and a thread view into docs/ (for the README).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import time
import urllib.parse
from pathlib import Path

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from gwctl import ADMIN_TOKEN, GATEWAY_KEY

REPO = Path(__file__).resolve().parent.parent.parent
KINDS = ["cache_read", "cache_write_5m", "cache_write_1h", "cache_write_no_ttl", "uncached", "output"]


def words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n))


def fmt_int(n) -> str:
    return "—" if n is None else f"{n:,}"


def fmt_pct(r) -> str:
    return "—" if r is None else f"{r * 100:.1f}%"


# -- recording real threads ----------------------------------------------------------------------

@pytest.fixture(scope="session")
def recorded(kvgate, sim):
    gw = kvgate.gateway()
    client = gw.client()

    def ask(model, messages, thread, **kw):
        return client.chat.completions.create(model=model, messages=messages, max_tokens=4,
                                              extra_body={"thread_identifier": thread}, **kw)

    # A thread whose turns show each cause.
    system = {"role": "system", "content": words(1, 1300)}
    q2 = words(2, 800)
    msgs = [system, {"role": "user", "content": "first question"}]
    ask("gpt-4o-mini", msgs, "dash-diag")
    msgs = msgs + [{"role": "assistant", "content": "first answer"}, {"role": "user", "content": q2}]
    ask("gpt-4o-mini", msgs, "dash-diag")
    time.sleep(1.5)  # past the configured 1 s TTL: expired
    msgs = msgs + [{"role": "user", "content": "third question"}]
    ask("gpt-4o-mini", msgs, "dash-diag")
    cut = q2.index(" ", 1950)
    edited = msgs[:3] + [{"role": "user", "content": q2[:cut] + " EDITED" + q2[cut:]}] + msgs[4:]
    ask("gpt-4o-mini", edited, "dash-diag")  # prompt changed at message 3
    last = ask("deepseek-chat", edited, "dash-diag")  # model switch

    # Anthropic writes with both TTLs (breakpoints on content parts).
    sys_parts = [{"type": "text", "text": words(3, 1200), "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    user = {"role": "user", "content": [{"type": "text", "text": words(4, 1200),
                                         "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}
    claude = [{"role": "system", "content": sys_parts}, user]
    ask("claude-sonnet-4-5", claude, "dash-claude")
    ask("claude-sonnet-4-5", claude + [{"role": "assistant", "content": "ok"},
                                       {"role": "user", "content": [{"type": "text", "text": "and then?"}]}], "dash-claude")

    # The built-in engine: writes without a TTL, priced at 0.
    engine_msgs = [{"role": "user", "content": "Name three colours of the rainbow, please."}]
    ask("smollm2", engine_msgs, "dash-engine")
    ask("smollm2", engine_msgs + [{"role": "assistant", "content": "Red, orange, yellow."},
                                  {"role": "user", "content": "And two more?"}], "dash-engine")

    # A 200-turn thread (for the render time) and enough small threads to page.
    long_msgs = [{"role": "system", "content": words(5, 80)}]
    for i in range(200):
        long_msgs.append({"role": "user", "content": f"question {i} " + words(100 + i, 12)})
        ask("deepseek-chat", long_msgs, "dash-long")
    for name in ("alpha-1", "alpha-2", "beta-1"):
        ask("gpt-4o-mini", [{"role": "user", "content": f"hello from {name}"}], name)
    for i in range(55):
        ask("deepseek-chat", [{"role": "user", "content": f"page thread {i}"}], f"page-{i:02d}")

    # One request the upstream fails.
    sim.client.add_faults({"provider": "openai", "status": 500})
    with pytest.raises(Exception):
        ask("gpt-4o-mini", [{"role": "user", "content": "this one fails"}], "dash-fail")

    gw.wait_turns("dash-long", 200, timeout=30)
    gw.wait_turns("dash-fail", 1)
    gw.wait_turns("page-54", 1)
    return {"gw": gw, "last_id": last.id}


# -- browser helpers -----------------------------------------------------------------------------

def base(kvgate) -> str:
    return f"http://127.0.0.1:{kvgate.port}"


def wait(driver, cond, timeout=15, what="condition"):
    try:
        # (A live refresh may replace the elements a condition is reading: it is asked again.)
        return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda d: cond(d))
    except TimeoutException:
        raise AssertionError(f"timed out waiting for {what}; page text:\n{driver.find_element(By.TAG_NAME, 'body').text[:3000]}")


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def assert_clean_console(driver):
    errors = console_errors(driver)
    assert not errors, "browser console errors:\n" + "\n".join(errors)


def signed_in(driver, kvgate):
    """Opens the dashboard with the admin token already in this tab's session storage."""
    driver.get(base(kvgate) + "/#/")
    driver.execute_script("sessionStorage.setItem('kvgate.admin_token', arguments[0])", ADMIN_TOKEN)
    return driver


def goto(driver, kvgate, hash_path, ready_css):
    # A full load each time (a URL that differs only in its fragment would not reload the page).
    driver.get("about:blank")
    driver.get(base(kvgate) + "/#" + hash_path)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ready_css), what=ready_css)


def api(kvgate, path):
    st, _, body = kvgate.gateway().admin_get(path)
    assert st == 200, (path, st, body)
    return body


def no_horizontal_overflow(driver):
    return driver.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1")


# -- tests ---------------------------------------------------------------------------------------

def test_files_are_served_with_caching_and_security_headers(kvgate):
    def get(path, method="GET", headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", kvgate.port, timeout=10)
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body

    st, hdrs, body = get("/")
    assert st == 200 and hdrs["content-type"].startswith("text/html"), (st, hdrs)
    assert b'<script type="module" src="/assets/app.js">' in body
    assert b"<script>" not in body and b"style=" not in body  # no inline script or style
    csp = hdrs["content-security-policy"]
    for rule in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"):
        assert rule in csp, csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert hdrs["x-content-type-options"] == "nosniff"
    assert hdrs["cache-control"] == "no-cache"
    etag = hdrs["etag"]
    assert re.fullmatch(r'"[0-9a-f]{16}"', etag), etag
    st, hdrs304, body = get("/", headers={"If-None-Match": f'W/"nope", {etag}'})
    assert st == 304 and body == b"" and hdrs304["etag"] == etag
    st, hdrs, body = get("/assets/chart.min.js")
    assert st == 200 and hdrs["content-type"].startswith("text/javascript") and b"Chart.js v3" in body
    st, hdrs, _ = get("/assets/app.js", method="HEAD")
    assert st == 200 and hdrs["etag"] != etag
    assert get("/assets/nope.js")[0] == 404
    assert get("/assets/index.html")[0] == 404
    st, hdrs, _ = get("/", method="POST")
    assert st == 405 and hdrs["allow"] == "GET, HEAD"
    # Whether a token is needed is public; nothing else is.
    st, _, body = get("/api/access")
    assert st == 200 and json.loads(body) == {"token_required": True, "warning": None}
    assert get("/api/threads")[0] == 401


def test_token_is_asked_once_and_kept_out_of_urls_and_cookies(browser, kvgate, recorded):
    browser.get(base(kvgate) + "/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(base(kvgate) + "/#/threads")
    wait(browser, lambda d: d.find_element(By.ID, "token-dialog").get_attribute("open") is not None,
         what="the token dialog")
    field = browser.find_element(By.ID, "token-input")
    field.send_keys("wrong-token")
    browser.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    wait(browser, lambda d: "refused" in d.find_element(By.ID, "token-error").text, what="refusal")
    field.clear()
    field.send_keys(ADMIN_TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#threads tbody tr"), what="threads")
    assert browser.execute_script("return sessionStorage.getItem('kvgate.admin_token')") == ADMIN_TOKEN
    assert browser.execute_script("return document.cookie") == ""
    assert ADMIN_TOKEN not in browser.current_url
    # Reloading the tab does not ask again.
    browser.refresh()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#threads tbody tr"), what="threads after reload")
    assert browser.find_element(By.ID, "token-dialog").get_attribute("open") is None
    # The failed sign-in's 401 is the only console error a user could have caused here.
    errors = [e for e in console_errors(browser) if "401" not in e]
    assert not errors, errors


def test_open_api_shows_the_startup_warning(browser, open_kvgate):
    logged = re.search(r"kvgate: warning: (no server\.admin_token[^\n]*)", open_kvgate.stderr_tail(20000))
    assert logged, open_kvgate.stderr_tail()
    browser.get(base(open_kvgate) + "/#/")
    wait(browser, lambda d: d.find_element(By.ID, "banner").is_displayed(), what="the warning banner")
    assert logged.group(1) in browser.find_element(By.ID, "banner").text
    wait(browser, lambda d: d.find_elements(By.ID, "kpi-requests"), what="the overview")
    assert browser.find_element(By.ID, "token-dialog").get_attribute("open") is None
    assert_clean_console(browser)


def test_overview_matches_the_api(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    for window in ("1h", "24h", "7d"):
        goto(browser, kvgate, f"/?window={window}", "#kpi-requests")
        # The same buckets the page drew (a minute may have turned over since it loaded).
        shown = browser.find_element(By.CSS_SELECTOR, ".overview-page").get_attribute("data-since")
        ov = api(kvgate, f"/api/overview?window={window}")
        if ov["since"] != shown:
            goto(browser, kvgate, f"/?window={window}", "#kpi-requests")
            shown = browser.find_element(By.CSS_SELECTOR, ".overview-page").get_attribute("data-since")
        assert ov["since"] == shown, (ov["since"], shown)
        text = browser.find_element(By.CSS_SELECTOR, "#kpi-requests .kpi-value").text
        assert text == fmt_int(ov["totals"]["requests"]), (window, text, ov["totals"])
        assert browser.find_element(By.CSS_SELECTOR, ".segmented a.active").text == window
        assert browser.find_element(By.CSS_SELECTOR, "#kpi-hit .kpi-value").text == fmt_pct(ov["totals"]["hit_ratio"])
        rows = browser.find_elements(By.CSS_SELECTOR, "#by-model tbody tr")
        assert len(rows) == len(ov["by_model"])
        models = {r.find_elements(By.TAG_NAME, "td")[0].text for r in rows}
        assert {"gpt-4o-mini", "claude-sonnet-4-5", "deepseek-chat", "smollm2"} <= models
        series = browser.execute_script(
            "return Chart.getChart(document.getElementById('volume-chart')).data.datasets[3].data")
        assert series == [p["requests"] for p in ov["series"]]
        lossy = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#lossy tbody a")]
        assert "dash-diag" in lossy, lossy
    assert_clean_console(browser)


def test_threads_sort_filter_search_and_pages(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    goto(browser, kvgate, "/threads", "#threads tbody tr")
    ids = lambda: [r.get_attribute("data-thread-id") for r in browser.find_elements(By.CSS_SELECTOR, "#threads tbody tr")]
    first = ids()
    api_first = [t["thread_id"] for t in api(kvgate, "/api/threads?limit=50")["threads"]]
    assert first == api_first
    # Keyset pages: page 2 continues where page 1 ended, no thread twice.
    browser.find_element(By.ID, "next-page").click()
    wait(browser, lambda d: ids() and ids()[0] not in first, what="page 2")
    second = ids()
    assert not set(first) & set(second)
    total = len(api(kvgate, "/api/threads?limit=500")["threads"])
    assert len(first) + len(second) == total
    browser.find_element(By.ID, "prev-page").click()
    wait(browser, lambda d: ids() == first, what="back to page 1")
    # Sort by turns: the 200-turn thread first; again for ascending.
    browser.find_element(By.CSS_SELECTOR, "th[data-sort=turns] button").click()
    wait(browser, lambda d: ids() and ids()[0] == "dash-long", what="sorted by turns")
    browser.find_element(By.CSS_SELECTOR, "th[data-sort=turns] button").click()
    wait(browser, lambda d: ids() and ids()[-1] != "dash-long" and "▲" in d.find_element(By.CSS_SELECTOR, "th[data-sort=turns]").text,
         what="ascending")
    asc = [t["thread_id"] for t in api(kvgate, "/api/threads?sort=turns&order=asc&limit=50")["threads"]]
    assert ids() == asc
    # Search by id prefix, and a model filter.
    search = browser.find_element(By.ID, "thread-search")
    search.send_keys("alpha")
    browser.find_element(By.CSS_SELECTOR, "#thread-filters button[type=submit]").click()
    wait(browser, lambda d: sorted(ids()) == ["alpha-1", "alpha-2"], what="search")
    search.clear()
    model = browser.find_element(By.ID, "thread-model")
    model.send_keys("claude-sonnet-4-5")
    browser.find_element(By.CSS_SELECTOR, "#thread-filters button[type=submit]").click()
    wait(browser, lambda d: ids() == ["dash-claude"], what="model filter")
    assert_clean_console(browser)


def chart_data(driver, canvas_id):
    return driver.execute_script(
        "const c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c.data.datasets.map(d => ({kind: d.kvgateKind || d.label, data: d.data}));", canvas_id)


def open_thread(driver, kvgate, thread_id):
    goto(driver, kvgate, f"/threads/{urllib.parse.quote(thread_id, safe='')}", ".thread-page[data-render-ms]")
    return api(kvgate, f"/api/threads/{urllib.parse.quote(thread_id, safe='')}")


@pytest.mark.parametrize("thread_id", ["dash-diag", "dash-claude", "dash-engine"])
def test_thread_bars_and_table_match_the_api_token_for_token(browser, kvgate, recorded, thread_id):
    signed_in(browser, kvgate)
    data = open_thread(browser, kvgate, thread_id)
    turns = data["turns"]
    bars = {d["kind"]: d["data"] for d in chart_data(browser, "tokens-chart")}
    for kind in KINDS:
        assert bars[kind] == [t["usage"][kind] or 0 for t in turns], kind
    rows = browser.find_elements(By.CSS_SELECTOR, "#turns tbody tr.turn-row")
    assert len(rows) == len(turns)
    for row, t in zip(rows, turns):
        assert row.get_attribute("data-request-id") == t["request_id"]
        for kind in KINDS:
            cell = row.find_element(By.CSS_SELECTOR, f"td[data-kind={kind}]")
            assert cell.text == fmt_int(t["usage"][kind]), (t["request_id"], kind)
    costs = {d["kind"]: d["data"] for d in chart_data(browser, "cost-chart")}
    assert costs["Cache read"] == [t["cost_usd"]["cache_read"] for t in turns]
    assert costs["Cumulative saving"][-1] == pytest.approx(sum(t["cost_usd"]["saved"] for t in turns))
    tok = data["summary"]["tokens"]
    inputs = sum(tok[k] or 0 for k in KINDS if k != "output")
    session = tok["cache_read"] / inputs if inputs else None
    assert browser.find_element(By.CSS_SELECTOR, "#kpi-session-hit .kpi-value").text == fmt_pct(session)
    if thread_id == "dash-claude":
        assert turns[0]["usage"]["cache_write_1h"] > 0 and turns[0]["usage"]["cache_write_5m"] > 0
    if thread_id == "dash-engine":
        assert all(t["usage"]["cache_write_5m"] == 0 for t in turns)
        assert turns[0]["usage"]["cache_write_no_ttl"] > 0
        assert all(t["cost_complete"] and t["cost_usd"]["total"] == 0 for t in turns)
    assert_clean_console(browser)


def test_each_diagnosed_turn_says_why_in_words(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    data = open_thread(browser, kvgate, "dash-diag")
    causes = [(t["cache_diagnosis"] or {}).get("cause") for t in data["turns"]]
    assert causes == [None, None, "expired", "prompt_changed", "model_switch"], causes
    items = browser.find_elements(By.CSS_SELECTOR, "#causes li")
    assert [i.get_attribute("data-turn") for i in items] == ["3", "4", "5"]
    texts = [i.find_element(By.CLASS_NAME, "cause-text").text for i in items]
    expired = data["turns"][2]["cache_diagnosis"]
    assert re.fullmatch(r"expired after \d+ s idle \(TTL 1 s\)", texts[0]), texts[0]
    assert texts[0].startswith(f"expired after {round(expired['idle_seconds'])} s")
    changed = data["turns"][3]["cache_diagnosis"]
    assert changed["message_index"] == 3 and 1900 <= changed["char_offset"] <= 2100, changed
    # Named by its role and 1-based number, with the text around the change.
    assert texts[1].startswith(f"message 4 (user) changed, near character {changed['char_offset']:,}"), texts[1]
    assert changed["excerpt"]["after"] and "EDITED" in changed["excerpt"]["after"], changed
    assert "EDITED" in texts[1], texts[1]
    assert texts[2] == "switched from gpt-4o-mini (openai) to deepseek-chat: prompt caches are per model"
    # The same words in the turn's row, and the row is marked.
    row = browser.find_element(By.ID, "turn-4")
    assert "diagnosed" in row.get_attribute("class")
    assert row.find_element(By.CLASS_NAME, "cause").text == texts[1]
    # The x-axis labels of diagnosed turns are drawn in red.
    colors = browser.execute_script(
        "const c = Chart.getChart(document.getElementById('tokens-chart'));"
        "return [0,1,2,3,4].map(i => c.config.options.scales.x.ticks.color({index: i}));")
    assert [c == "#c0392b" for c in colors] == [False, False, True, True, True]
    assert_clean_console(browser)


def test_a_turn_opens_to_its_full_record(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    data = open_thread(browser, kvgate, "dash-diag")
    browser.find_element(By.ID, "turn-5").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".turn-detail pre.raw-usage"), what="the record")
    rec = api(kvgate, f"/api/requests/{data['turns'][4]['request_id']}")
    raw = json.loads(browser.find_element(By.CSS_SELECTOR, ".turn-detail pre.raw-usage").text)
    assert raw == rec["usage_raw"] and "prompt_cache_hit_tokens" in raw
    detail = browser.find_element(By.CSS_SELECTOR, ".turn-detail").text
    assert rec["response_id"] and rec["response_id"] in detail
    assert recorded["last_id"] == rec["response_id"]  # what the SDK saw as r.id
    assert_clean_console(browser)


def test_a_200_turn_thread_renders_whole(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    # Each a cold start: a fresh page load, then the thread's JSON, then the render (Chart.js's
    # code runs for the first time in that page). The render times are printed and written to
    # $KVGATE_WEB_REPORT for docs/dashboard.md, not asserted: speed is a measurement, and a
    # shared CI machine would make a time limit here fail at random.
    times, charts = [], []
    for _ in range(5):
        data = open_thread(browser, kvgate, "dash-long")
        root = browser.find_element(By.CSS_SELECTOR, ".thread-page")
        assert root.get_attribute("data-turns") == "200"
        times.append(float(root.get_attribute("data-render-ms")))
        charts.append(float(root.get_attribute("data-charts-ms")))
    bars = {d["kind"]: d["data"] for d in chart_data(browser, "tokens-chart")}
    assert bars["cache_read"] == [t["usage"]["cache_read"] or 0 for t in data["turns"]]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#turns tbody tr.turn-row")) == 200
    print(f"\n200-turn thread view render times (ms, after the data arrived): {times}; "
          f"of which the two charts: {charts}")
    report = os.environ.get("KVGATE_WEB_REPORT")
    if report:
        Path(report).write_text(json.dumps({"render_ms_200_turns": times, "charts_ms": charts}))
    assert_clean_console(browser)


def test_requests_log_filters_and_detail(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    goto(browser, kvgate, "/requests", "#requests tbody tr")
    statuses = lambda: [r.get_attribute("data-status") for r in browser.find_elements(By.CSS_SELECTOR, "#requests tbody tr")]
    browser.find_element(By.CSS_SELECTOR, "#req-status option[value=upstream_error]").click()
    browser.find_element(By.CSS_SELECTOR, "#request-filters button[type=submit]").click()
    wait(browser, lambda d: statuses() and set(statuses()) == {"upstream_error"}, what="status filter")
    expected = api(kvgate, "/api/requests?status=upstream_error")["requests"]
    assert len(statuses()) == len(expected)
    browser.find_element(By.CSS_SELECTOR, "#req-status option[value='']").click()
    browser.find_element(By.ID, "req-thread").send_keys("dash-claude")
    browser.find_element(By.CSS_SELECTOR, "#request-filters button[type=submit]").click()
    wait(browser, lambda d: len(statuses()) == 2, what="thread filter")
    browser.find_element(By.ID, "req-thread").clear()
    browser.find_element(By.ID, "req-model").send_keys("smollm2")
    browser.find_element(By.CSS_SELECTOR, "#request-filters button[type=submit]").click()
    wait(browser, lambda d: len(statuses()) == 2 and all(
        r.find_elements(By.TAG_NAME, "td")[2].text == "smollm2"
        for r in d.find_elements(By.CSS_SELECTOR, "#requests tbody tr")), what="model filter")
    # A time range that ended before anything was recorded shows nothing.
    browser.find_element(By.ID, "req-model").clear()
    browser.execute_script("document.getElementById('req-until').value = '2020-01-01T00:00'")
    browser.find_element(By.CSS_SELECTOR, "#request-filters button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.ID, "no-requests"), what="empty range")
    assert "until=2020-01-01T" in urllib.parse.unquote(browser.current_url)
    # Found by the id the SDK got.
    browser.find_element(By.ID, "req-lookup").send_keys(recorded["last_id"])
    browser.find_element(By.CSS_SELECTOR, "#request-lookup button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".detail-card pre.raw-usage"), what="detail")
    assert recorded["last_id"] in browser.find_element(By.CSS_SELECTOR, ".detail-card").text
    assert_clean_console(browser)


def test_monitors_create_edit_and_test_a_channel(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    goto(browser, kvgate, "/monitors", "#new-monitor")
    browser.find_element(By.ID, "new-monitor").click()
    form = browser.find_element(By.ID, "monitor-form")
    form.find_element(By.NAME, "name").send_keys("hit-rate-floor")
    threshold = form.find_element(By.NAME, "threshold")
    threshold.clear()
    threshold.send_keys("0.4")
    pending = form.find_element(By.NAME, "for")
    pending.clear()
    pending.send_keys("2m")
    form.find_element(By.NAME, "resolve_threshold").send_keys("0.5")
    form.find_element(By.CSS_SELECTOR, "input[name=channel][value=ops-hook]").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: "hit-rate-floor" in d.find_element(By.ID, "monitors").text, what="created monitor")
    made = [m for m in api(kvgate, "/api/monitors")["monitors"] if m["name"] == "hit-rate-floor"]
    assert len(made) == 1 and made[0]["threshold"] == 0.4 and made[0]["channels"] == ["ops-hook"]
    assert made[0]["for"] == "120s" and made[0]["resolve_threshold"] == 0.5, made[0]
    row = browser.find_element(By.CSS_SELECTOR, f"#monitors tr[data-monitor-id='{made[0]['id']}']")
    row.find_element(By.CLASS_NAME, "edit").click()
    threshold = browser.find_element(By.CSS_SELECTOR, "#monitor-form input[name=threshold]")
    threshold.clear()
    threshold.send_keys("0.25")
    browser.find_element(By.CSS_SELECTOR, "#monitor-form button[type=submit]").click()
    wait(browser, lambda d: "below 0.25" in d.find_element(By.ID, "monitors").text, what="edited monitor")
    edited = api(kvgate, f"/api/monitors/{made[0]['id']}")
    assert edited["threshold"] == 0.25
    assert edited["for"] == "120s" and edited["resolve_threshold"] == 0.5, edited  # kept by the edit
    browser.find_element(By.CSS_SELECTOR, "li[data-channel=ops-hook] .test-channel").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#alerts tr.alert-test"), what="test alert in history")
    assert any(a["kind"] == "test" for a in api(kvgate, "/api/alerts")["alerts"])
    assert_clean_console(browser)


def test_keys_page_lists_makes_shows_the_secret_once_and_revokes(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    goto(browser, kvgate, "/keys", "#keys tbody tr")
    listed = api(kvgate, "/api/keys")["keys"]
    config_key = [k for k in listed if k["source"] == "config"][0]
    row = browser.find_element(By.CSS_SELECTOR, f"#keys tr[data-key-id='{config_key['id']}']")
    assert "config" in row.text and not row.find_elements(By.CLASS_NAME, "revoke")
    browser.find_element(By.ID, "new-key").click()
    form = browser.find_element(By.ID, "key-form")
    form.find_element(By.NAME, "name").send_keys("dash-team")
    form.find_element(By.NAME, "models").send_keys("gpt-4o-mini, deepseek-chat")
    form.find_element(By.NAME, "max_budget_usd").send_keys("2.5")
    form.find_element(By.NAME, "budget_duration").send_keys("1d")
    form.find_element(By.NAME, "rpm").send_keys("60")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.ID, "key-secret"), what="the new key's secret")
    secret = browser.find_element(By.CSS_SELECTOR, "#key-secret code").text
    assert secret.startswith("sk-kvgate-")
    made = [k for k in api(kvgate, "/api/keys")["keys"] if k["name"] == "dash-team"]
    assert len(made) == 1, made
    made = made[0]
    assert made["models"] == ["gpt-4o-mini", "deepseek-chat"]
    assert made["max_budget_usd"] == 2.5 and made["rpm"] == 60
    assert made["budget_duration"] == "1d"
    row = browser.find_element(By.CSS_SELECTOR, f"#keys tr[data-key-id='{made['id']}']")
    assert "60 rpm" in row.text and "$2.50 left of $2.50 per 1d" in row.text, row.text
    # Shown once: a reload lists the key without it.
    goto(browser, kvgate, "/keys", "#keys tbody tr")
    assert secret not in browser.find_element(By.TAG_NAME, "body").text
    st, _, _ = kvgate.gateway().request("GET", "/v1/models", headers={"Authorization": f"Bearer {secret}"})
    assert st == 200
    row = browser.find_element(By.CSS_SELECTOR, f"#keys tr[data-key-id='{made['id']}']")
    row.find_element(By.CLASS_NAME, "revoke").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: "revoked" in d.find_element(
        By.CSS_SELECTOR, f"#keys tr[data-key-id='{made['id']}']").text, what="revoked key")
    st, _, _ = kvgate.gateway().request("GET", "/v1/models", headers={"Authorization": f"Bearer {secret}"})
    assert st == 401
    assert_clean_console(browser)


def test_engine_page_and_the_prompt_lookup(browser, kvgate, recorded):
    signed_in(browser, kvgate)
    goto(browser, kvgate, "/engine", ".card.engine")
    engine = api(kvgate, "/api/engine")["engines"][0]
    card = browser.find_element(By.CSS_SELECTOR, ".card.engine").text
    # In use: blocks of running requests plus blocks holding cached prefixes, both named.
    holding = engine["used_blocks"] + engine["cached_free_blocks"]
    assert f"{holding:,} of {engine['pool_blocks']:,} blocks" in card, card
    assert f"{engine['used_blocks']:,} by running requests" in card, card
    assert f"{engine['cached_free_blocks']:,} holding cached prefixes" in card, card
    assert "smollm2" in card
    prompt = "Tell me a short story about a lighthouse keeper and a cat. " * 8
    kvgate.gateway().client().completions.create(model="smollm2", prompt=prompt, max_tokens=2)
    box = browser.find_element(By.ID, "lookup-text")
    box.send_keys(prompt)
    browser.find_element(By.CSS_SELECTOR, "#lookup-form button[type=submit]").click()
    wait(browser, lambda d: "prompt tokens are cached" in d.find_element(By.ID, "lookup-result").text, what="lookup")
    st, _, want = kvgate.gateway().request("POST", "/api/engine/lookup", json.dumps({"model": "smollm2", "prompt": prompt}),
                                           {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
    assert st == 200 and want["cached_tokens"] > 0, want
    text = browser.find_element(By.ID, "lookup-result").text
    assert text.startswith(f"{want['cached_tokens']:,} of {want['prompt_tokens']:,} prompt tokens are cached"), text
    assert_clean_console(browser)


def test_new_turns_appear_without_a_reload(browser, kvgate, recorded):
    gw = recorded["gw"]
    client = gw.client()
    msgs = [{"role": "user", "content": "live one"}]
    client.chat.completions.create(model="deepseek-chat", messages=msgs, max_tokens=4,
                                   extra_body={"thread_identifier": "dash-live"})
    gw.wait_turns("dash-live", 1)
    signed_in(browser, kvgate)
    open_thread(browser, kvgate, "dash-live")
    browser.execute_script("window.__noReload = true")
    client.chat.completions.create(model="deepseek-chat", messages=msgs + [{"role": "user", "content": "live two"}],
                                   max_tokens=4, extra_body={"thread_identifier": "dash-live"})
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#turns tr.turn-row")) == 2, timeout=10,
         what="the second turn")
    assert browser.execute_script("return window.__noReload") is True
    assert_clean_console(browser)


ROUTED = """
(() => {
  const real = window.fetch;
  const route = {router: 'cost-aware', strategy: 'cache_aware', target: 'ds-cheap',
    reason: 'the cached prefix is worth less than the price difference',
    candidates: [
      {target: 'ds-cheap', provider: 'ds', model: 'deepseek-chat', eligible: true, why_not: null, est_cached_tokens: 1024, est_cost_usd: 0.0002},
      {target: 'gpt', provider: 'openai', model: 'gpt-4o-mini', eligible: false, why_not: 'circuit open', est_cached_tokens: null, est_cost_usd: null}]};
  const attempts = [
    {target: 'gpt', provider: 'openai', status: 'upstream_error', http_status: 503, error: 'overloaded', latency_ms: 12.5},
    {target: 'ds-cheap', provider: 'ds', status: 'ok', http_status: 200, error: null, latency_ms: 40.1}];
  window.fetch = async (...args) => {
    const res = await real(...args);
    const url = String(args[0]);
    if (!url.startsWith('/api/threads/') && !url.startsWith('/api/requests/')) return res;
    const body = await res.json();
    const patch = (t) => Object.assign(t, {route, attempts,
      cache_diagnosis: {cause: 'routed_away', target: 'ds-cheap', detail: 'moved', expected_cached: 100, cached: 0, idle_seconds: 1}});
    if (body.turns) patch(body.turns[body.turns.length - 1]); else patch(body);
    return new Response(JSON.stringify(body), {status: 200, headers: {'Content-Type': 'application/json'}});
  };
})();
"""


def test_router_decision_and_attempts_are_shown_when_present(browser, kvgate, recorded):
    """The router is not recorded yet: its fields (route, attempts, the routed_away cause) are
    injected into the API's answers in the browser, in the shape the router will record."""
    signed_in(browser, kvgate)
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ROUTED})
    try:
        open_thread(browser, kvgate, "dash-engine")
        last = browser.find_element(By.ID, "turn-2")
        assert "routed → ds-cheap" in last.text and "2 attempts" in last.text
        assert last.find_element(By.CLASS_NAME, "cause").text == "the router moved this thread to ds-cheap"
        last.click()
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".turn-detail .candidates"), what="route detail")
        detail = browser.find_element(By.CSS_SELECTOR, ".turn-detail").text
        assert "Router cost-aware (cache_aware): chose ds-cheap" in detail
        assert "circuit open" in detail and "overloaded" in detail and "HTTP 503" in detail
        assert_clean_console(browser)
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


def test_provider_diagnoses_that_disagree_with_kvgate_are_shown(browser, kvgate, recorded):
    """A Messages client that names another conversation's message makes Anthropic compare with
    that one (system_changed) while kvgate sees its thread's cache read as expected: the
    overview counts and lists the disagreement, the Requests page filters on it, the thread marks
    the turn and its record shows both diagnoses."""
    gw = kvgate.gateway()
    headers = {"x-api-key": GATEWAY_KEY, "content-type": "application/json",
               "anthropic-version": "2023-06-01"}

    def send(thread, system, diagnostics=None):
        body = {"model": "claude-diag", "max_tokens": 4, "system": system,
                "messages": [{"role": "user", "content": "hello"}]}
        if diagnostics:
            body["diagnostics"] = diagnostics
        st, h, answer = gw.request("POST", "/v1/messages", body=json.dumps(body).encode(),
                                   headers={**headers, "x-thread-id": thread})
        assert st == 200, answer
        return gw.wait_request(h["x-request-id"])

    other = send("dash-pd-other", words(40, 1200))
    send("dash-pd", words(41, 1200))
    off = send("dash-pd", words(41, 1200), {"previous_message_id": other["response_id"]})
    assert off["provider_cache_diagnosis"] == {"cache_miss_reason": "system_changed",
                                               "agrees_with_kvgate": False}, off
    signed_in(browser, kvgate)
    goto(browser, kvgate, "/", "#provider-agreement")
    reported = api(kvgate, "/api/requests?provider_diagnosis=reported&limit=200")["requests"]
    disagree = [r for r in reported if r["provider_cache_diagnosis"]["agrees_with_kvgate"] is False]
    assert browser.find_element(By.ID, "disagree-count").text == fmt_int(len(disagree))
    row = browser.find_element(By.CSS_SELECTOR, f"#disagreements tr[data-request-id='{off['request_id']}']")
    assert "system changed" in row.text and "dash-pd" in row.text
    browser.find_element(By.LINK_TEXT, "All disagreements").click()
    rows_css = "#requests tbody tr"
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"{rows_css}[data-request-id='{off['request_id']}']"),
         what="the disagreements filter")
    assert "provider_diagnosis=disagrees" in browser.current_url
    badges = browser.find_elements(By.CSS_SELECTOR, f"{rows_css} .provider-diagnosis")
    assert badges and len(badges) == len(browser.find_elements(By.CSS_SELECTOR, rows_css))
    assert all(b.get_attribute("data-agrees") == "false" and "≠ kvgate" in b.text for b in badges)
    open_thread(browser, kvgate, "dash-pd")
    last = browser.find_element(By.ID, "turn-2")
    assert last.find_element(By.CLASS_NAME, "provider-disagrees").text == "provider: system changed"
    last.click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".turn-detail dl.facts"), what="turn detail")
    assert "system changed — disagrees with kvgate" in browser.find_element(By.CSS_SELECTOR, ".turn-detail").text
    assert_clean_console(browser)


PAGES = [("/", "#kpi-requests"), ("/threads", "#threads tbody tr"), ("/threads/dash-diag", ".thread-page[data-render-ms]"),
         ("/requests", "#requests tbody tr"), ("/monitors", "#new-monitor"), ("/engine", ".card.engine"),
         ("/keys", "#keys tbody tr")]


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_fits_the_screen(browser, kvgate, recorded, width):
    browser.set_window_size(width, 900)
    try:
        signed_in(browser, kvgate)
        inner = browser.execute_script("return window.innerWidth")
        assert abs(inner - width) <= 16, inner
        for path, ready in PAGES:
            goto(browser, kvgate, path, ready)
            assert no_horizontal_overflow(browser), (width, path, browser.execute_script(
                "return document.documentElement.scrollWidth"))
            for canvas in browser.find_elements(By.TAG_NAME, "canvas"):
                w = canvas.size["width"]
                assert 0 < w <= inner, (path, w)
            assert_clean_console(browser)
    finally:
        browser.set_window_size(1280, 900)


def test_the_turns_table_fits_its_card_at_1280_px(browser, kvgate, recorded):
    """The fifteen columns of a thread's turns fit a 1280 px window whole: the Cause column is
    seen without scrolling the table sideways."""
    browser.set_window_size(1280, 900)
    try:
        signed_in(browser, kvgate)
        goto(browser, kvgate, "/threads/dash-diag", ".thread-page[data-render-ms]")
        widths = browser.execute_script("""
            const t = document.getElementById('turns'), box = t.parentElement;
            const cause = [...t.querySelectorAll('th')].pop().getBoundingClientRect();
            return [t.scrollWidth, box.clientWidth, cause.right, box.getBoundingClientRect().right];""")
        table, box, cause_right, box_right = widths
        assert table <= box, widths
        assert cause_right <= box_right + 1, widths
    finally:
        browser.set_window_size(1280, 900)


@pytest.mark.skipif(not os.environ.get("KVGATE_SCREENSHOTS"), reason="KVGATE_SCREENSHOTS not set")
def test_save_screenshots(browser, kvgate, recorded):
    """Spreads real traffic over about four minutes first, so the last hour's chart has more
    than one populated minute, then saves the overview and a thread view into docs/."""
    client = recorded["gw"].client()
    system = {"role": "system", "content": words(9, 1300)}
    for minute in range(5):
        for i in range(3 + minute):
            msgs = [system] + [{"role": "user", "content": f"turn {k}"} for k in range(i + 1)]
            model = ["gpt-4o-mini", "deepseek-chat"][(minute + i) % 2]
            client.chat.completions.create(model=model, messages=msgs, max_tokens=4,
                                           extra_body={"thread_identifier": f"shot-{minute}-{i % 2}"})
        if minute < 4:
            time.sleep(55)
    signed_in(browser, kvgate)
    browser.set_window_size(1280, 1000)
    goto(browser, kvgate, "/?window=1h", "#kpi-requests")
    time.sleep(0.3)
    browser.save_screenshot(str(REPO / "docs" / "dashboard-overview.png"))
    browser.set_window_size(1280, 1400)
    open_thread(browser, kvgate, "dash-diag")
    time.sleep(0.3)
    browser.save_screenshot(str(REPO / "docs" / "dashboard-thread.png"))
    browser.set_window_size(1280, 900)
