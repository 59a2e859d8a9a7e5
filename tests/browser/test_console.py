"""The web console in a real headless browser (issue 29), against one local stack: every action by keyboard.

A chat that delegates twice, its two delegate lanes filling while they work; times and latencies; a payload
expanded; the sessions list, live, filtered and paged; a second session canceled; a question answered; the inspector
opening a strict a2a-sdk 1.x agent and chatting with it; on each view a basic accessibility check (every
control labelled, every text's contrast ratio computed in the page). Screenshots go to docs/img/ with
FLIGHTDECK_SCREENSHOTS=docs/img, else under .pytest_cache/console-screenshots/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from flightdeck.local.stack import LocalStack
from tests.browser.conftest import IN_CI
from tests.support import a2a1

REPO = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("console.toml")
TOKEN = "fdp_user_LOCAL-ONLY-console-user-token-0123456789abcdef"
CLOCK = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
# Waits end when the page draws what is awaited; the bound only matters on a loaded machine.
WAIT_MS = 60_000
SHOTS = Path(os.environ.get("FLIGHTDECK_SCREENSHOTS") or REPO / ".pytest_cache" / "console-screenshots")

# Every step added to a lane, in the order the page drew it (a MutationObserver): [lane, kind, batch].
RECORD_STEPS = """
window.__steps = [];
let batch = 0;
document.addEventListener("DOMContentLoaded", () => new MutationObserver((records) => {
  batch += 1;
  for (const r of records) for (const n of r.addedNodes) {
    if (n.nodeType === 1 && n.matches("li.step")) window.__steps.push([n.closest("[data-lane]").dataset.lane, n.dataset.kind, batch]);
  }
}).observe(document.getElementById("main"), { childList: true, subtree: true }));
"""

# Labels on every visible control; the contrast ratio (WCAG 2.x) of every visible text against its background.
ACCESSIBILITY = """
() => {
  const problems = [];
  let controls = 0, texts = 0;
  for (const el of document.querySelectorAll("input, select, textarea, button")) {
    if (!el.getClientRects().length) continue;
    controls += 1;
    const labelled = [...(el.labels || [])].map((l) => l.textContent).join(" ").trim()
      || el.getAttribute("aria-label") || (el.tagName === "BUTTON" ? el.textContent.trim() : "");
    if (!labelled) problems.push(`no label: ${el.outerHTML.slice(0, 80)}`);
  }
  const rgba = (s) => s.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  for (const el of document.querySelectorAll("body *")) {
    if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const style = getComputedStyle(el);
    if (!el.getClientRects().length || style.visibility === "hidden") continue;
    texts += 1;
    const [a, b] = [lum(rgba(style.color).slice(0, 3)), lum(background(el))].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const needed = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
    if (ratio < needed) problems.push(`contrast ${ratio.toFixed(2)} < ${needed}: ${el.tagName} "${el.textContent.trim().slice(0, 40)}"`);
  }
  return { controls, texts, problems };
}
"""


@pytest.fixture(scope="module")
def echo_agent() -> Iterator[str | None]:
    """The strict a2a-sdk 1.x echo agent's base URL; None where its venv is missing outside CI."""
    if not a2a1.STAMP.exists() and not IN_CI:
        yield None
        return
    proc = subprocess.Popen(
        [a2a1.python(), str(REPO / "tests" / "support" / "a2a1_server.py"), "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def stack(echo_agent, tmp_path_factory) -> Iterator[LocalStack]:
    config = tmp_path_factory.mktemp("console") / "console.toml"
    config.write_text(CONFIG.read_text().replace("{A2A_URL}", echo_agent or "http://127.0.0.1:9"))
    with LocalStack(config, relay=None) as local:
        yield local


@pytest.fixture(scope="module")
def page(chromium, stack):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(RECORD_STEPS)
    page.goto(stack.console_url)
    page.focus("#token")
    page.keyboard.type(TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('Token kept')")
    yield page
    context.close()
    assert errors == [], errors


def accessible(page: Any) -> None:
    found = page.evaluate(ACCESSIBILITY)
    assert found["controls"] > 3 and found["texts"] > 5 and found["problems"] == [], found


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"console-{name}.png"), full_page=True)
    assert (SHOTS / f"console-{name}.png").stat().st_size > 10_000


def send_new(page: Any, text: str) -> str:
    """A new session's first message, typed and sent with Ctrl+Enter; its id (the page opens its timeline)."""
    page.evaluate("location.hash = '#/sessions'")
    page.wait_for_selector("#new-message")
    page.focus("#new-message")
    page.keyboard.type(text)
    page.keyboard.press("Control+Enter")
    page.wait_for_url(re.compile(r"#/session/"))
    return page.url.split("#/session/")[1]


def wait_drawn(page: Any, selector: str) -> Any:
    """The element, once drawn; if it never is, a failure that says what the page drew instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        return page.wait_for_selector(selector, timeout=WAIT_MS)
    except PlaywrightTimeout:
        lanes = {
            key: [s["kind"] for s in steps(page, key)]
            for key in page.eval_on_selector_all("[data-lane]", "els => els.map(e => e.dataset.lane)")
        }
        raise AssertionError(f"{selector} not drawn; lanes {lanes}; status {page.inner_text('#status')!r}") from None


def steps(page: Any, lane: str) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        f"[data-lane='{lane}'] li.step",
        "els => els.map(e => ({kind: e.dataset.kind, at: e.dataset.at, latency: e.dataset.latency,"
        " clock: e.querySelector('time')?.textContent, text: e.textContent}))",
    )


def test_a_chat_that_delegates_twice_fills_both_lanes_while_they_work(page, stack):
    session = send_new(page, "@worker list three owls @worker name two rivers")
    wait_drawn(page, "#session-status.idle")
    lanes = page.eval_on_selector_all("[data-lane]", "els => els.map(e => [e.dataset.lane, e.dataset.agent])")
    assert lanes[0] == ["self", "orchestrator"] and [agent for _, agent in lanes[1:]] == ["worker", "worker"], lanes
    for key, _ in lanes[1:]:
        wait_drawn(page, f"[data-lane='{key}'] li[data-kind='idle']")
    drawn = page.evaluate("window.__steps")
    for key, _ in lanes[1:]:
        # Live: the delegate's message was drawn while it still worked (before its idle, in an earlier read).
        batches = {kind: batch for lane, kind, batch in drawn if lane == key}
        assert batches["message"] < batches["idle"], drawn
        assert [s["kind"] for s in steps(page, key)] == ["message", "thinking", "answer", "idle"]
    mine = steps(page, "self")
    kinds = [s["kind"] for s in mine]
    assert kinds[:4] == ["message", "thinking", "delegating", "delegating"] and kinds[-2:] == ["answer", "idle"], kinds
    assert kinds.count("callback_accepted") == 2

    # Every step has its time (UTC, ms); results their latency; thinks their duration and tokens.
    for key, _ in lanes:
        shown = steps(page, key)
        assert all(CLOCK.match(s["clock"]) and ISO.match(s["at"]) for s in shown), shown
    results = [s for s in mine if s["kind"] == "callback_accepted"]
    assert all(int(s["latency"]) >= 0 and "latency" in s["text"] for s in results), results
    # A result is recorded after its dispatch; a delegate's session starts after it (UTC ISO strings sort).
    dispatched = min(s["at"] for s in mine if s["kind"] == "delegating")
    assert all(s["at"] >= dispatched for s in results)
    assert all(steps(page, key)[0]["at"] >= dispatched for key, _ in lanes[1:])
    thinks = [s for s in mine if s["kind"] == "thinking"]
    assert all("took" in s["text"] and "tokens" in s["text"] for s in thinks), thinks

    # A payload, expanded by keyboard: the event as the API sent it.
    worker_lane = lanes[1][0]
    summary = f"[data-lane='{worker_lane}'] li[data-kind='answer'] summary"
    page.focus(summary)
    page.keyboard.press("Enter")
    payload = json.loads(page.inner_text(f"[data-lane='{worker_lane}'] li[data-kind='answer'] details[open] pre"))
    assert payload["kind"] == "answer" and payload["session_id"] == worker_lane and ISO.match(payload["at"])
    accessible(page)
    shot(page, "timeline")

    # The list: first message, status, agent, times, turns, delegations; the filter.
    page.focus("nav a[data-view='sessions']")
    page.keyboard.press("Enter")
    row = page.wait_for_selector(f"tr[data-session='{session}']")
    cells = row.eval_on_selector_all("td", "tds => tds.map(t => t.textContent)")
    assert cells[0] == "@worker list three owls @worker name two rivers" and cells[1:3] == ["idle", "orchestrator"]
    assert all(re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$", c) for c in cells[3:5]) and cells[5:] == ["1", "2"]
    page.focus("#filter")
    page.keyboard.type("no such words")
    page.wait_for_selector("td:has-text('Nothing matches the filter')")
    page.fill("#filter", "")
    page.focus("#filter")
    page.keyboard.type("rivers")
    page.wait_for_selector(f"tr[data-session='{session}']")
    assert page.is_disabled("#next-page") and page.is_disabled("#prev-page")
    page.fill("#filter", "")
    # Live: a session started elsewhere (here with curl's request) shows up without a reload.
    started = requests.post(
        f"{stack.urls['orchestrator']}/api/chat",
        json={"content": "started elsewhere"},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    ).json()["session_id"]
    page.wait_for_selector(f"tr[data-session='{started}'] td:has-text('started elsewhere')", timeout=WAIT_MS)
    accessible(page)
    shot(page, "sessions")


def test_a_second_session_is_canceled_from_its_timeline(page, stack):
    session = send_new(page, "@slowpoke take all the time you need")
    wait_drawn(page, "[data-lane='self'] li[data-kind='delegating']")
    # The delegate's lane, drawn while it thinks (20 s).
    wait_drawn(page, "[data-agent='slowpoke'] li[data-kind='message']")
    page.focus("#cancel")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('Canceled at think')", timeout=WAIT_MS)
    wait_drawn(page, "[data-lane='self'] li[data-kind='idle']")
    # The delegation it waited on, canceled in turn.
    [canceled] = [s for s in steps(page, "self") if s["kind"] == "canceled"]
    assert "slowpoke" in canceled["text"] and int(canceled["latency"]) >= 0
    answer = requests.get(
        f"{stack.urls['orchestrator']}/api/sessions/{session}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    ).json()
    assert answer["status"] == "idle", answer
    # Nothing to cancel any more: said so, not an error.
    page.focus("#cancel")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('Nothing to cancel')")


def test_a_question_is_answered_from_the_page(page):
    send_new(page, "?ask which year? summarise")
    page.wait_for_selector("#question-form:not([hidden])", timeout=WAIT_MS)
    assert "which year?" in page.inner_text("#question-text")
    page.focus("#answer")
    page.keyboard.type("2024")
    page.keyboard.press("Enter")
    done = wait_drawn(page, "[data-lane='self'] li[data-kind='answer']:has-text('told')")
    assert 'told "2024"' in done.inner_text()
    assert page.is_hidden("#question-form")


def test_the_list_pages(page, stack):
    # Six sessions by now (the tests above made four): five a page, then one.
    for text in ("one more", "and another"):
        answer = requests.post(
            f"{stack.urls['orchestrator']}/api/chat",
            json={"content": text},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        assert answer.status_code == 202, answer.text
    page.focus("nav a[data-view='sessions']")
    page.keyboard.press("Enter")
    page.wait_for_selector("tr[data-session] td:has-text('and another')")
    page.focus("#page-size")
    page.keyboard.press("ArrowUp")  # 20 -> 5
    assert page.input_value("#page-size") == "5"
    page.wait_for_function("() => document.querySelectorAll('tr[data-session]').length === 5")
    first_page = page.eval_on_selector_all("tr[data-session]", "rows => rows.map(r => r.dataset.session)")
    page.focus("#next-page")
    page.keyboard.press("Enter")
    page.wait_for_selector("#page-label:has-text('page 2')")
    page.wait_for_function("() => document.querySelectorAll('tr[data-session]').length === 1")
    [last] = page.eval_on_selector_all("tr[data-session]", "rows => rows.map(r => r.dataset.session)")
    assert last not in first_page and page.is_disabled("#next-page")
    page.focus("#prev-page")
    page.keyboard.press("Enter")
    page.wait_for_selector("#page-label:has-text('page 1')")
    page.wait_for_function("() => document.querySelectorAll('tr[data-session]').length === 5")


def test_the_inspector_opens_an_a2a_sdk_agent_and_chats_with_it(page, echo_agent):
    if echo_agent is None:
        pytest.skip("no .venv-a2a1 (./dev.sh makes it): the a2a-sdk 1.x agent is not started outside CI")
    page.focus("nav a[data-view='inspector']")
    page.keyboard.press("Enter")
    page.focus("#card-url")
    page.keyboard.type(f"{echo_agent}/.well-known/agent-card.json")
    page.keyboard.press("Enter")
    page.wait_for_selector("#card-version", timeout=WAIT_MS)
    assert page.inner_text("#card-verdict h3") == "echo1"
    assert page.is_visible("text=The card is valid.")
    assert page.inner_text("#card-version") == f"Talks A2A v1.0 at {echo_agent}/a2a"
    page.focus("#inspector-message")
    page.keyboard.type("hello there")
    page.keyboard.press("Enter")
    reply = page.wait_for_selector("#transcript .reply", timeout=WAIT_MS)
    assert reply.inner_text() == "echo: hello there"
    page.focus("#raw-details summary")
    page.keyboard.press("Enter")
    raw = page.inner_text("#raw-rpc")
    assert "→ SendMessage" in raw and "← HTTP 200" in raw and '"jsonrpc": "2.0"' in raw
    page.focus("#card-details summary")
    page.keyboard.press("Enter")
    assert json.loads(page.inner_text("#card-json"))["name"] == "echo1"
    accessible(page)
    shot(page, "inspector")
    # Outside the allowlist: refused, said on the page.
    page.fill("#card-url", "http://169.254.169.254/latest/meta-data")
    page.focus("#card-url")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status.error:has-text('url_not_allowed')")


def test_another_agent_of_the_file_and_an_answer_drawn_as_it_is_written(page, stack):
    """Last: it leaves for another origin (the writer's console), whose slow think streams its answer."""
    page.focus("#agent-picker")
    page.keyboard.press("End")  # the file's last agent: writer
    page.wait_for_url(f"{stack.urls['writer']}/console/")
    page.wait_for_selector("#agent-picker option[value='writer'][selected]", state="attached")
    page.focus("#token")  # another origin: its own sessionStorage
    page.keyboard.type(TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('Token kept')")
    # A first think starts before any stream watches its session: it is not streamed. The page's stream
    # marks the session watched (docs/STREAMING.md), so the follow-up's think streams its text.
    send_new(page, "tell the story of the owl")
    wait_drawn(page, "[data-lane='self'] li[data-kind='answer']")
    page.focus("#follow-up")
    page.keyboard.type("and now the story of the river in many words")
    page.keyboard.press("Enter")
    wait_drawn(page, "[data-lane='self'] li[data-kind='writing']")
    done = wait_drawn(page, "[data-lane='self'] li[data-kind='answer']:has-text('river')")
    assert "the story of the river" in done.inner_text()
    assert page.query_selector("li[data-kind='writing']") is None  # the stored answer took its place
    kinds = [kind for lane, kind, _ in page.evaluate("window.__steps") if lane == "self"]
    assert kinds.index("writing") < len(kinds) - 1 - kinds[::-1].index("answer"), kinds
