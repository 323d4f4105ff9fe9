"""Start a real Jupyter front end (JupyterLab 4 or classic Notebook 6.5) on a free localhost
port, isolated from the user's Jupyter/IPython configuration, and drive it with Playwright
in Debian's Chromium (never a browser downloaded by ``playwright install``).

Used by ``test_panel_browser.py``; ``.ci/browser.sh`` builds one virtualenv per front end
and runs the tests with that environment's Python, which also serves the notebook and runs
the kernel (the environment's own ipykernel).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CGG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
FRONTENDS = ("lab", "notebook6")


def _version(distribution: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def missing(frontend: str) -> Optional[str]:
    """Why `frontend` cannot be tested with this interpreter, or None if it can."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed here (see .ci/browser.sh)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    widgets = _version("ipywidgets") or ""
    if importlib.util.find_spec("ipykernel") is None:
        return "ipykernel is not installed here"
    if frontend == "lab":
        lab = _version("jupyterlab") or ""
        if not lab.startswith("4."):
            return f"needs JupyterLab 4 (found {lab or 'none'})"
        if not widgets.startswith("8."):
            return f"needs ipywidgets 8 (found {widgets or 'none'})"
        return None
    if frontend == "notebook6":
        notebook = _version("notebook") or ""
        extension = _version("widgetsnbextension") or ""
        if not notebook.startswith("6.5"):
            return f"needs classic Notebook 6.5 (found {notebook or 'none'})"
        if not widgets.startswith("7.7") or not extension.startswith("3.6"):
            return (
                f"needs ipywidgets 7.7 + widgetsnbextension 3.6 (found {widgets or 'none'} + "
                f"{extension or 'none'})"
            )
        return None
    return f"unknown front end {frontend!r}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> None:
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell-{index}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": source,
            }
            for index, source in enumerate(cells)
        ],
    }
    path.write_text(json.dumps(notebook, indent=1))


@dataclass
class Server:
    frontend: str
    url: str  # the notebook's page
    process: subprocess.Popen
    log: Path

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def _isolated_env(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # the kernel's `python`
    for name, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
        ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"),
    ):
        (base / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(base / sub)
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    # the kernel imports the tree under test (and tests.fake_pynvml), whichever checkout
    # the environment's editable install points at
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("JUPYTER_PATH", None)
    # no news, no update checks: nothing to fetch, no pop-ups over the notebook
    notification = base / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True, exist_ok=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"checkForUpdates": False, "fetchNews": "false"})
    )
    return env


@contextlib.contextmanager
def serve(frontend: str, notebook: Path, base: Path, timeout: float = 90.0) -> Iterator[Server]:
    """Run the front end's server on a free port, token and password off, no browser."""
    port = free_port()
    root = notebook.parent
    log = base / f"server-{frontend}.log"
    env = _isolated_env(base)
    if frontend == "lab":
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
        ]
        url = f"http://127.0.0.1:{port}/lab/tree/{notebook.name}"
    else:
        command = [
            sys.executable,
            "-m",
            "notebook",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--NotebookApp.port_retries=0",
            "--NotebookApp.token=",
            "--NotebookApp.password=",
            f"--NotebookApp.notebook_dir={root}",
        ]
        url = f"http://127.0.0.1:{port}/notebooks/{notebook.name}"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI machines and containers run as root
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(frontend, url, process, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{frontend} server exited:\n{server.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{frontend} server not up in {timeout:g} s:\n{server.log_tail()}"
                )
            time.sleep(0.25)
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    # the server's own process group: the server and the kernels it started
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(10)


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A Playwright browser context in headless Debian Chromium with a fresh profile
    (``--user-data-dir``: Playwright's persistent context in a new temporary folder)."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="cgg-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1280, "height": 1000},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@contextlib.contextmanager
def notebook_page(
    frontend: str, cells: list[str], base: Path, stem: str, failure: Path, timeout_ms: int
) -> Iterator[object]:
    """A Chromium page on the front end, opened on a new notebook of `cells` (not run yet).
    If the test fails inside, the page is saved to `failure` and the server's log printed;
    on the way out, no error may have been thrown in the page."""
    notebook = base / "work" / f"{stem}.ipynb"
    notebook.parent.mkdir(exist_ok=True)
    write_notebook(notebook, cells)
    problems: list[str] = []
    with serve(frontend, notebook, base) as server, chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(timeout_ms)
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        try:
            page.goto(server.url, wait_until="domcontentloaded")
            yield page
        except Exception:
            page.screenshot(path=str(failure), full_page=True)
            print(server.log_tail())
            raise
    assert not problems, problems
