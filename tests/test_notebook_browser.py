"""The interactive backtest where readers use it: notebook 08 in a real JupyterLab, in headless
Chromium driven by Playwright. Runs every cell, changes a control, and checks that the metrics
table and the figure change with no widget error. Screenshots go to runs/browser/.

Chromium comes from the system (Debian's ``chromium`` package; ``.ci/run`` installs it when
missing): Playwright's own browser download is not used.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "08_interactive_backtest.ipynb"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = ROOT / "runs" / "browser"

try:
    from playwright.sync_api import sync_playwright
except ImportError as exc:  # a Python package we install: its absence is a broken install, not a platform limit
    raise ImportError("the browser test needs Playwright, part of the dev extra: pip install -e '.[dev]' (make test "
                      "installs it); no `playwright install` is needed, the system Chromium is used") from exc

# A platform limit: the machine has no Chromium binary, which pip cannot provide. Slow: a JupyterLab and a browser.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine: apt-get install chromium (as "
                                                          "root; .ci/run does it), or put any chromium on PATH")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyter_lab(tmp_path):
    """A JupyterLab on loopback serving a copy of the notebook; yields its URL with the token."""
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, tmp_path / NOTEBOOK)
    port, token = free_port(), secrets.token_hex(16)
    # Own settings: no "Jupyter news?" toast over the figure, and no request for news or updates.
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = dict(os.environ, PODRACER_SIZE="smoke", OMP_NUM_THREADS="1", JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--ServerApp.open_browser=False",
         "--LabApp.news_url="] + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"),
        start_new_session=True)  # its own process group: the kernels it starts end with it
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp_path / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}"
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)


def shoot(page, tmp_path: Path, name: str) -> None:
    """The whole panel (controls, table, figure) as one image, in tmp_path and runs/browser/."""
    panel = page.locator(".jp-OutputArea-output:has(.widget-dropdown)").first
    panel.scroll_into_view_if_needed()  # the viewport is tall enough for all of it: no clipping by the notebook
    panel.screenshot(path=str(tmp_path / name))
    shutil.copy(tmp_path / name, SHOTS / name)


def test_interactive_backtest_in_jupyterlab(jupyter_lab, tmp_path):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page_errors: list[str] = []
    console_errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.goto(jupyter_lab)
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            idle = "() => document.body.innerText.includes('| Idle')"
            page.wait_for_function(idle, timeout=60_000)  # the kernel is up (a run before that is dropped)
            page.click(".lm-MenuBar-itemLabel:text-is('Run')")
            page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
            try:
                panel = page.wait_for_selector(".widget-vbox .widget-dropdown select", timeout=90_000)
            except Exception:
                page.screenshot(path=str(tmp_path / "07_failure.png"), full_page=True)  # what the reader would see
                shutil.copy(tmp_path / "07_failure.png", SHOTS / "07_failure.png")
                raise
            # Every cell has run (the ones after the panel move a control too) before "before" is read.
            page.wait_for_function(idle, timeout=120_000)
            table = page.locator(".widget-vbox .widget-output table").first
            image = page.locator(".widget-vbox .widget-output img").first
            table.wait_for(timeout=60_000)
            image.wait_for(timeout=60_000)
            before_table, before_image = table.inner_text(), image.get_attribute("src")
            assert "PPO" in before_table and "equal_weight" in before_table, before_table
            shoot(page, tmp_path, "07_before.png")

            panel.select_option("buy_and_hold")  # a control the reader changes
            deadline = time.monotonic() + 60
            while table.inner_text() == before_table:
                assert time.monotonic() < deadline, "the table did not change after the policy changed"
                time.sleep(0.25)
            after_table = table.inner_text()
            page.wait_for_function("(before) => { const i = document.querySelector('.widget-vbox .widget-output img');"
                                   " return i && i.src !== before; }", arg=before_image, timeout=60_000)
            assert "buy_and_hold" in after_table and "PPO" not in after_table, after_table
            shoot(page, tmp_path, "07_after.png")
            text = page.inner_text("body")
        finally:
            browser.close()
    for bad in ("Error displaying widget", "Model not found", "Failed to load model class"):
        assert bad not in text, f"the page shows {bad!r}"
    assert not page_errors, f"uncaught errors in the page: {page_errors}"
    widget_errors = [e for e in console_errors if "widget" in e.lower() or "model" in e.lower()]
    assert not widget_errors, f"widget errors in the console: {widget_errors}"
    print(f"screenshots: {SHOTS / '07_before.png'}, {SHOTS / '07_after.png'} (and in {tmp_path})")
