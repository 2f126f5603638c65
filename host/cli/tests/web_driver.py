"""Drives the owner's page (`bx serve --web`) in a real headless Chromium, by Selenium.

Run by host/cli/tests/suite/web.rs, which makes the calls that wait and checks what the
daemon and the log did. Commands come as JSON lines on stdin, each answered by one JSON
line on stdout:
  {"cmd": "login", "token": T}            log in with the token, typed into the form
  {"cmd": "inert", "id": A}               what the browser made of approval A's block
  {"cmd": "approve", "id": A, "typed": X, "scope": S}   type X into A's form, approve
  {"cmd": "refuse", "id": A, "reason": R} refuse A with a reason
  {"cmd": "revoke", "session": S, "answer": A}  revoke a scoped answer on S's page
  {"cmd": "picture", "session": S}       the columns of S's picture, by their classes
  {"cmd": "cross_site", "attacker": URL}  open a page of another origin that posts a form
  {"cmd": "shot", "path": P, "url": U}    a screenshot of page U
"""

import json
import sys

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = sys.argv[1].rstrip("/")
# Every wait for the browser ends: a page that never loads fails the step.
WAIT = 60


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1280,1600", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(WAIT)
    return driver


def submit(d, button):
    """Clicks a form's button and waits until the page it led to has replaced this one.

    The old page is gone once its root element cannot be asked about: Chromium says so
    as a stale element or, mid-navigation, as an inspector error; either ends the wait.
    """
    old = d.find_element(By.TAG_NAME, "html")
    button.click()

    def replaced(_d):
        try:
            old.is_enabled()
            return False
        except WebDriverException:
            return True

    WebDriverWait(d, WAIT).until(replaced)


def outcome(d):
    WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.ID, "outcome") or d.find_elements(By.TAG_NAME, "pre"))
    found = d.find_elements(By.ID, "outcome")
    if found:
        return {"text": found[0].text, "ok": "done" in (found[0].get_attribute("class") or "")}
    return {"text": d.find_element(By.TAG_NAME, "body").text, "ok": False}


def section(d, approval):
    d.get(BASE + "/")
    return WebDriverWait(d, WAIT).until(lambda d: d.find_element(By.ID, "approval-" + approval))


def run(d, c):
    cmd = c["cmd"]
    if cmd == "login":
        d.get(BASE + "/login")
        d.find_element(By.ID, "token").send_keys(c["token"])
        submit(d, d.find_element(By.CSS_SELECTOR, "#login button"))
        WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.ID, "waiting") or d.find_elements(By.ID, "wrong-token"))
        return {"logged_in": bool(d.find_elements(By.ID, "waiting")), "url": d.current_url}
    if cmd == "inert":
        block = section(d, c["id"]).find_element(By.CSS_SELECTOR, "pre.block")
        return {
            "block": block.text,
            "scripts": len(d.find_elements(By.TAG_NAME, "script")),
            "images": len(d.find_elements(By.TAG_NAME, "img")),
            "onerror": len(d.find_elements(By.CSS_SELECTOR, "[onerror]")),
            "javascript_links": len(d.find_elements(By.CSS_SELECTOR, "a[href^='javascript']")),
            "links_in_block": len(block.find_elements(By.TAG_NAME, "a")),
            "title": d.title,
            # Right-to-left letters are shown in the order they are in, as at the terminal.
            "bidi": d.execute_script("return getComputedStyle(arguments[0]).unicodeBidi", block),
            # What the hostile arguments' script would have set, had it run.
            "pwned": d.execute_script("return window.bxPwned === undefined ? null : window.bxPwned"),
        }
    if cmd == "approve":
        form = section(d, c["id"]).find_element(By.CSS_SELECTOR, "form.approve")
        form.find_element(By.NAME, "typed").send_keys(c["typed"])
        if c.get("scope"):
            Select(form.find_element(By.NAME, "scope")).select_by_value(c["scope"])
        submit(d, form.find_element(By.TAG_NAME, "button"))
        return outcome(d)
    if cmd == "refuse":
        form = section(d, c["id"]).find_element(By.CSS_SELECTOR, "form.refuse")
        form.find_element(By.NAME, "reason").send_keys(c["reason"])
        submit(d, form.find_element(By.TAG_NAME, "button"))
        return outcome(d)
    if cmd == "revoke":
        d.get(BASE + "/session/" + c["session"])
        rows = d.find_elements(By.CSS_SELECTOR, "#scopes tr.scope")
        row = next(r for r in rows if r.find_element(By.TAG_NAME, "code").text == c["answer"])
        submit(d, row.find_element(By.CSS_SELECTOR, "form.revoke button"))
        result = outcome(d)
        d.get(BASE + "/session/" + c["session"])
        result["scopes_left"] = len(d.find_elements(By.CSS_SELECTOR, "#scopes tr.scope"))
        return result
    if cmd == "picture":
        d.get(BASE + "/session/" + c["session"])
        calls = []
        for g in d.find_elements(By.CSS_SELECTOR, "#picture g.call"):
            rects = g.find_elements(By.TAG_NAME, "rect")
            calls.append({
                "confidentiality": rects[0].get_attribute("class"),
                "integrity": rects[1].get_attribute("class"),
                "outcome": rects[2].get_attribute("class"),
            })
        return {"calls": calls, "taint": d.find_element(By.ID, "taint").text}
    if cmd == "cross_site":
        d.get(c["attacker"])
        WebDriverWait(d, WAIT).until(lambda d: d.current_url.startswith(BASE))
        return {"url": d.current_url, "text": d.find_element(By.TAG_NAME, "body").text}
    if cmd == "shot":
        d.get(BASE + c["url"])
        d.save_screenshot(c["path"])
        return {"saved": c["path"]}
    raise ValueError(f"unknown command {cmd!r}")


def main():
    d = browser()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                reply = run(d, json.loads(line))
            except Exception as e:  # the test reads the failure, with the page it was on
                reply = {"error": f"{type(e).__name__}: {e}", "url": d.current_url}
            print(json.dumps(reply), flush=True)
    finally:
        d.quit()


if __name__ == "__main__":
    main()
