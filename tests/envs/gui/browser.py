"""Drive the rubric builder in headless Chromium (Debian's ``chromium`` and ``chromium-driver``) with
Selenium: start the app with the CLI, find widgets by their Streamlit keys (``.st-key-<key>``).

Also a script: ``python -m tests.envs.gui.browser docs/gui_first_responder_dag.png`` writes docs/gui.md's
screenshot of first_responder's DAG view.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
"""The repository."""
REQUIRE_ENV = "RUBRIC_GRPO_REQUIRE_BROWSER"
"""Set (CI does): a missing browser fails the test instead of skipping it."""


def browser_paths() -> tuple[str, str] | None:
    """Chromium and chromedriver, or None when either is missing."""
    chromium = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
    )
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    return (chromium, driver) if chromium and driver else None


@contextmanager
def running_app(workdir: Path, file: str | None = None, timeout_s: float = 40.0) -> Iterator[str]:
    """``rubric-grpo gui [file] --dir workdir`` in a subprocess; yields its URL, stops it after."""
    script = Path(sys.executable).with_name("rubric-grpo")  # the console script pip installed
    cli = [str(script)] if script.exists() else [sys.executable, "-c", "from train.cli import main; main()"]
    cmd = [*cli, "gui", *([file] if file else []), "--dir", str(workdir)]
    log = open(workdir.parent / "gui-server.log", "w+b")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    try:
        url = _wait_ready(proc, log, timeout_s)
        yield url
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _wait_ready(proc: subprocess.Popen[bytes], log: Any, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"rubric-grpo gui exited: {log.read().decode(errors='replace')[-2000:]}")
        log.seek(0)
        found = re.search(rb"rubric builder: (http://[\d.]+:\d+)", log.read())
        if found:
            url = found.group(1).decode()
            with suppress(OSError):
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    return url
        time.sleep(0.2)
    raise RuntimeError(f"rubric-grpo gui did not answer within {timeout_s} s (url {url})")


def make_driver(width: int = 1600, height: int = 1200) -> Any:
    """Headless Chromium through chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = browser_paths()
    if paths is None:
        raise RuntimeError("chromium and chromedriver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)


class App:
    """The app in a browser tab: widgets by Streamlit key."""

    def __init__(self, driver: Any, url: str, timeout_s: float = 20.0) -> None:
        self.driver = driver
        self.timeout_s = timeout_s
        driver.get(url)
        self.wait_for(".st-key-section")
        self.idle()

    def wait_for(self, css: str) -> Any:
        """The first element matching ``css`` once it exists."""
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, self.timeout_s).until(
            ec.presence_of_element_located(("css selector", css))
        )

    def idle(self) -> None:
        """Wait until the script run the last action triggered has finished."""
        time.sleep(0.3)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            status = self.driver.execute_script(
                "const e = document.querySelector('[data-testid=\"stStatusWidget\"]'); return e ? e.innerText : '';"
            )
            if "Running" not in str(status) and "Stop" not in str(status):
                return
            time.sleep(0.1)
        raise TimeoutError("the app kept running")

    def section(self, name: str) -> None:
        """Choose a section in the sidebar."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            for label in self.driver.find_elements("css selector", ".st-key-section label"):
                if label.text.strip() == name:
                    label.click()
                    self.idle()
                    return
            time.sleep(0.1)
        raise LookupError(f"no section {name!r}")

    def type(self, key: str, text: str) -> None:
        """Replace a text input's or text area's content and commit it."""
        from selenium.webdriver.common.keys import Keys

        box = self.wait_for(f".st-key-{key} input, .st-key-{key} textarea")
        self.driver.execute_script(
            "arguments[0].scrollIntoView({block: 'center'});", box
        )  # not under the toolbar
        box.click()
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE)
        box.send_keys(text)
        if box.tag_name == "textarea":
            box.send_keys(Keys.CONTROL, Keys.ENTER)
        else:
            box.send_keys(Keys.ENTER)
        self.idle()

    def pick(self, key: str, *options: str) -> None:
        """Choose options in a multiselect or a selectbox: type to filter, click the option."""
        from selenium.webdriver.common.keys import Keys

        for option in options:
            box = self.wait_for(f".st-key-{key} input")
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
            box.click()
            box.send_keys(option)
            deadline = time.monotonic() + self.timeout_s
            while True:
                choices = [
                    e
                    for e in self.driver.find_elements("css selector", '[role="option"]')
                    if e.text.strip() == option
                ]
                if choices:
                    choices[0].click()
                    break
                if time.monotonic() > deadline:
                    raise LookupError(f"{key}: no option {option!r}")
                time.sleep(0.1)
            self.idle()
            multi = f'.st-key-{key}[data-testid="stMultiSelect"], .st-key-{key} [data-testid="stMultiSelect"]'
            if self.driver.find_elements("css selector", multi):  # its list stays open; a selectbox's
                self.driver.switch_to.active_element.send_keys(Keys.ESCAPE)  # Escape would clear it
                self.idle()

    def click(self, key: str) -> None:
        """Press a button."""
        button = self.wait_for(f".st-key-{key} button")
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
        button.click()
        self.idle()

    def wait_text(self, needle: str, css: str = "section.stMain, [data-testid='stMain']") -> str:
        """The text of ``css`` once it contains ``needle`` (a rerun may still be drawing)."""
        deadline = time.monotonic() + self.timeout_s
        text = ""
        while time.monotonic() < deadline:
            with suppress(Exception):  # an element replaced while it is read
                text = str(self.driver.find_element("css selector", css).text)
                if needle in text:
                    return text
            time.sleep(0.2)
        raise AssertionError(f"{needle!r} did not appear; the page says: {text[-1500:]}")

    def column_text(self, key: str) -> str:
        """The visible text of the column that holds widget ``key`` (what is shown next to it)."""
        return str(
            self.driver.execute_script(
                "const e = document.querySelector(arguments[0]);"
                "const c = e && e.closest('[data-testid=\"stColumn\"]'); return c ? c.innerText : '';",
                f".st-key-{key}",
            )
        )

    def text(self) -> str:
        """The main area's visible text."""
        return str(self.driver.find_element("css selector", "section.stMain, [data-testid='stMain']").text)


def dag_screenshot(out: Path, width: int = 1700, height: int = 1760) -> None:
    """Open first_responder in the app, show the DAG section, save a screenshot to ``out``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(ROOT / "configs" / "rubrics", work / "rubrics")
        with running_app(work, "rubrics/first_responder.yaml") as url:
            driver = make_driver(width, height)
            try:
                app = App(driver, url)
                app.section("DAG & paths")
                app.wait_for('img[alt="rubric DAG"]')
                time.sleep(0.5)
                driver.save_screenshot(str(out))
            finally:
                driver.quit()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/gui_first_responder_dag.png")
    dag_screenshot(target)
    print(f"wrote {target}")
