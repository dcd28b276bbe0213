"""Drives the operators' console (/ui/) in headless Chromium with Selenium (tests/it/console.rs).

The sidecar, its upstream and three held writes are set up by the Rust test; this script is
the operator. It exits non-zero on the first failed check, saying which. Environment:

  ADMIN_URL, DATA_URL   the sidecar's admin listener and data plane
  ALICE, BOB            two named admin tokens (escrow.approvals_required = 2)
  ESCROWS               {"approve": id, "reject": id, "expired": id}
  AXE                   axe-core's axe.min.js (npm), run in the page on every view
  SCREENSHOTS           a directory to save one PNG per view into (optional)
"""

import json
import shutil
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

ADMIN = os.environ["ADMIN_URL"]
DATA = os.environ["DATA_URL"]
ALICE, BOB = os.environ["ALICE"], os.environ["BOB"]
IDS = json.loads(os.environ["ESCROWS"])
AXE = open(os.environ["AXE"], encoding="utf-8").read()
SHOTS = os.environ.get("SCREENSHOTS") or None


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        raise SystemExit(1)
    print(f"ok: {what}", flush=True)


def admin_call(method, path, token, body=None):
    """The admin API directly (what the console must agree with)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(ADMIN + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


PROFILE = tempfile.mkdtemp(prefix="palisade-console-")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1280,900",
        f"--user-data-dir={PROFILE}",
    ):
        opts.add_argument(flag)
    # The system's chromedriver: Selenium Manager must not download one.
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


d = browser()
wait = WebDriverWait(d, 10)


def by_id(i):
    return wait.until(EC.presence_of_element_located((By.ID, i)))


def text_of(i):
    return d.find_element(By.ID, i).text


def axe(view):
    """axe-core in the page: no serious or critical violation."""
    d.execute_script(AXE)
    found = d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact,"
        " nodes: v.nodes.map(n => n.target.join(' '))}))))"
        ".catch(e => done([{id: 'axe-error', impact: 'critical', nodes: [String(e)]}]));"
    )
    bad = [v for v in found if v["impact"] in ("serious", "critical")]
    check(not bad, f"axe-core: no serious violation on {view} ({bad or [v['id'] for v in found]})")


def shot(name):
    """The whole page (up to 2000 px tall), for docs/console/."""
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        tall = d.execute_script("return document.documentElement.scrollHeight")
        d.set_window_size(1280, max(700, min(int(tall) + 160, 2000)))
        d.save_screenshot(os.path.join(SHOTS, f"console-{name}.png"))
        d.set_window_size(1280, 900)


def sign_in(token, name):
    d.get(ADMIN + "/ui/")
    field = by_id("token")
    wait.until(EC.visibility_of(field))
    field.send_keys(token)
    field.send_keys(Keys.ENTER)
    wait.until(EC.text_to_be_present_in_element((By.ID, "who"), f"Signed in as {name}"))


def sign_out():
    d.find_element(By.ID, "logout").click()
    wait.until(EC.visibility_of_element_located((By.ID, "token")))


def open_escrow(eid):
    d.get(f"{ADMIN}/ui/#/escrow/{eid}")
    by_id("approve")


try:
    # The page itself: served with a strict CSP, and it loads nothing else.
    with urllib.request.urlopen(ADMIN + "/ui/", timeout=10) as r:
        csp = r.headers["Content-Security-Policy"]
    check("script-src 'self'" in csp and "unsafe-inline" not in csp, f"strict CSP ({csp})")

    # A wrong token is refused at the login form.
    d.get(ADMIN + "/ui/")
    by_id("token").send_keys("not-a-token")
    d.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "login-error"), "refused"))
    check(d.find_element(By.ID, "view").get_attribute("hidden") is not None,
          "a refused token shows nothing")
    axe("the login form")
    shot("login")

    # ---- alice: the held writes, the diff, the first approval --------------------------
    sign_in(ALICE, "alice")
    wait.until(lambda _: len(d.find_elements(By.CSS_SELECTOR, "#escrows tr[data-escrow-id]")) == 3)
    rows = {r.get_attribute("data-escrow-id"): r.text
            for r in d.find_elements(By.CSS_SELECTOR, "#escrows tr[data-escrow-id]")}
    check(all(i in rows for i in IDS.values()), "the three held writes are listed")
    check("PUT /items/1" in rows[IDS["approve"]] and "0 of 2" in rows[IDS["approve"]],
          f"a row shows the operation and the approvals so far against those required ({rows[IDS['approve']]!r})")
    check("expired" in rows[IDS["expired"]], "the expired lease shows as expired in the list")
    check("rule: large-counts" in rows[IDS["approve"]] and "rule:" not in rows[IDS["reject"]],
          f"a row held by an operator's rule names it ({rows[IDS['approve']]!r})")
    axe("the held writes")
    shot("held-writes")

    open_escrow(IDS["approve"])
    wait.until(EC.text_to_be_present_in_element((By.ID, "lease-left"), "left"))
    first = text_of("lease-left")
    time.sleep(1.2)
    check(text_of("lease-left") != first, f"the lease window counts down ({first!r} → {text_of('lease-left')!r})")
    check(json.loads(text_of("request-body")) == {"qty": 1150}, "the request body is shown")
    check(json.loads(text_of("pre-image")) == {"ok": True}, "the pre-image is shown beside it")
    diff = {tuple(td.text for td in tr.find_elements(By.TAG_NAME, "td"))[:2]
            for tr in d.find_elements(By.CSS_SELECTOR, "#diff tbody tr")}
    check(diff == {("/ok", "removed"), ("/qty", "added")}, f"the JSON diff ({diff})")
    check("Passes" in text_of("input-check"), "the contract's input check is shown")
    check(os.environ["CONTRACT"] in d.find_element(By.TAG_NAME, "main").text, "the contract's digest is shown")
    facts = d.find_element(By.CSS_SELECTOR, "dl.facts").text
    check("Request (as sent)\nPUT /items/1" in facts
          and "Operation (for a freeze or a budget)\nPUT /items/{id}" in facts
          and "Resource (for a freeze)\nhttps://erp.example.com/items/1" in facts,
          f"the request as sent and the operation and resource a freeze names, each labelled ({facts!r})")
    check("Held by\nthe operator rule large-counts: quantities over 1000 need a second look" in facts,
          f"the rule that held it and why ({facts!r})")
    page = d.find_element(By.TAG_NAME, "main").text
    check("alice" not in page.split("Approvals")[1].split("\n")[0], "no approval yet")
    axe("a held write")
    shot("held-write")

    # Every control is reached by the keyboard alone.
    d.find_element(By.TAG_NAME, "body").click()
    reached = set()
    for _ in range(40):
        d.switch_to.active_element.send_keys(Keys.TAB)
        reached.add(d.switch_to.active_element.get_attribute("id"))
    check({"reason", "approve", "reject"} <= reached, f"keyboard reaches reason, approve, reject ({reached})")

    d.find_element(By.ID, "reason").send_keys("qty matches the warehouse count")
    d.find_element(By.ID, "approve").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "Approval recorded: 1 of 2"))
    by_id("approve")
    check(not d.find_element(By.ID, "approve").is_enabled(),
          "alice cannot approve twice from the console")
    # … nor through the API: the same name twice counts once.
    status, doc = admin_call("POST", f"/admin/v1/escrow/{IDS['approve']}/approve", ALICE, {})
    check(status == 409 and doc.get("code") == "ERR_APPROVAL_REPEATED" and "counts once" in doc.get("detail", ""),
          f"the same name twice is refused (409 ERR_APPROVAL_REPEATED, got {status})")
    status, doc = admin_call("GET", f"/admin/v1/escrow/{IDS['approve']}", ALICE)
    check(doc["state"] == "held" and doc["approvals"] == ["alice"], "still held, one approval")
    sign_out()

    # ---- bob: the second approval releases it ------------------------------------------
    sign_in(BOB, "bob")
    open_escrow(IDS["approve"])
    check("1 of 2 (alice)" in d.find_element(By.TAG_NAME, "main").text, "bob sees alice's approval")
    d.find_element(By.ID, "approve").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "The write is released"))
    status, doc = admin_call("GET", f"/admin/v1/escrow/{IDS['approve']}", BOB)
    check(doc["state"] == "released" and doc["upstream_status"] == 200, "released, once, upstream 200")

    # ---- markup in a body is text, and runs nothing; reject it with a reason -----------
    open_escrow(IDS["reject"])
    body = json.loads(text_of("request-body"))
    check("<script>" in body["note"] and "onerror" in body["note"], "markup is shown as text")
    check(d.find_elements(By.CSS_SELECTOR, "main script, main img") == [], "no element was made from it")
    check(d.execute_script("return window.__pwned === undefined"), "the planted global stays unset")
    d.find_element(By.ID, "reason").send_keys("markup in the note; ask the agent")
    d.find_element(By.ID, "reject").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "The write is rejected"))
    check(d.execute_script("return window.__pwned === undefined"), "still unset after the decision")

    # ---- an expired lease cannot be approved --------------------------------------------
    open_escrow(IDS["expired"])
    wait.until(EC.text_to_be_present_in_element((By.ID, "lease-left"), "expired"))
    check(not d.find_element(By.ID, "approve").is_enabled(), "approve is disabled when the lease expired")
    check("no longer be approved" in text_of("decision"), "and the page says why")
    status, doc = admin_call("POST", f"/admin/v1/escrow/{IDS['expired']}/approve", BOB, {})
    check(status == 409 and doc["state"] == "refused" and doc.get("code") == "ERR_LEASE_EXPIRED"
          and "approvals" not in doc,
          f"the API refuses to release it, recording no approval ({status} {doc.get('state')} {doc.get('code')})")
    shot("expired")

    # ---- a refusal shows as a drift event within a second ------------------------------
    d.get(ADMIN + "/ui/#/drift")
    wait.until(EC.text_to_be_present_in_element((By.ID, "drift-live"), "Live"))
    before = len(d.find_elements(By.CSS_SELECTOR, "#drift-table tbody tr[data-code=ERR_LEASE_REQUIRED]"))
    sent = time.monotonic()
    req = urllib.request.Request(DATA + "/items/9", data=b'{"qty":1}', method="PUT",
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=5)
        check(False, "a write without a lease is refused")
    except urllib.error.HTTPError as e:
        check(e.code == 428, f"a write without a lease is refused ({e.code})")
    WebDriverWait(d, 5, poll_frequency=0.02).until(lambda _: len(d.find_elements(
        By.CSS_SELECTOR, "#drift-table tbody tr[data-code=ERR_LEASE_REQUIRED]")) > before)
    took = time.monotonic() - sent
    check(took < 1.0, f"the drift event appeared within a second ({took * 1000:.0f} ms)")
    row = d.find_element(By.CSS_SELECTOR, "#drift-table tbody tr[data-code=ERR_LEASE_REQUIRED]")
    check("blocked" in row.text and "PUT" in row.text, f"it says what was blocked ({row.text!r})")
    Select(d.find_element(By.ID, "drift-category")).select_by_value("lease")
    visible = [r for r in d.find_elements(By.CSS_SELECTOR, "#drift-table tbody tr") if r.is_displayed()]
    check(visible and all(r.get_attribute("data-category") == "lease" for r in visible),
          "filtering by category")
    axe("drift events")
    shot("drift")

    # ---- fences, the log, freezes and budgets, RCNS -------------------------------------
    d.get(ADMIN + "/ui/#/fences")
    by_id("fence-key").send_keys("/items/1")
    d.find_element(By.CSS_SELECTOR, "#view form button").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "fence-result"), "https://erp.example.com/items/1"))
    check("Epoch\n1" in text_of("fence-result"), f"the released write's epoch ({text_of('fence-result')!r})")
    axe("fences")
    shot("fences")

    d.get(ADMIN + "/ui/#/log")
    wait.until(lambda _: text_of("log-verified") not in ("", "Verifying…"))
    check("Signature verified" in text_of("log-verified"),
          f"the checkpoint's signature verifies in the browser ({text_of('log-verified')!r})")
    axe("the receipt log")
    # One more entry (a freeze), then the log again: consistent with the one seen before.
    d.get(ADMIN + "/ui/#/stop")
    by_id("freeze-reason")
    Select(d.find_element(By.ID, "freeze-scope")).select_by_value("operation")
    d.find_element(By.ID, "freeze-value").send_keys("DELETE /items/{id}")
    d.find_element(By.ID, "freeze-reason").send_keys("no deletes during the stock count")
    d.find_element(By.CSS_SELECTOR, "#view form button[type=submit]").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "freezes"), "no deletes during the stock count"))
    check("bob" in text_of("freezes"), "the freeze names who made it")
    axe("freezes and budgets")
    shot("freezes")
    d.get(ADMIN + "/ui/#/log")
    wait.until(lambda _: text_of("log-verified") not in ("", "Verifying…"))
    check("Consistent with the checkpoint seen before" in text_of("log-verified"),
          f"the newer checkpoint is consistent with the older ({text_of('log-verified')!r})")
    shot("log")

    d.get(ADMIN + "/ui/#/rcns")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#view h1")))
    axe("RCNS contracts")

    # ---- operator rules and the candidate (SPEC §15) -----------------------------------
    d.get(ADMIN + "/ui/#/rules")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#rules tr[data-rule]")))
    rule = d.find_element(By.CSS_SELECTOR, '#rules tr[data-rule="large-counts"]').text
    check("PUT /items/{id}" in rule and "hold" in rule and "need a second look" in rule,
          f"the rules page lists the rule, its scope, action and reason ({rule!r})")
    check("hold 1" in rule, f"and what it decided so far ({rule!r})")
    axe("operator rules")
    shot("rules")
    d.get(ADMIN + "/ui/#/shadow")
    wait.until(EC.presence_of_element_located((By.ID, "shadow-none")))
    check("No candidate" in text_of("shadow-none"), "the candidate page says when there is none")
    axe("the candidate")

    # Signing out forgets the token.
    sign_out()
    check(d.execute_script("return sessionStorage.getItem('palisade.token')") is None,
          "signing out forgets the token")
    print("console: all checks passed", flush=True)
finally:
    d.quit()
    shutil.rmtree(PROFILE, ignore_errors=True)
