"""Headless Chromium for the pages nngauge writes (the report, the reproductions' index): load
a page, collect its console errors, dump its DOM or take a screenshot.

Needs Chromium (Debian: ``apt-get install chromium``, which ``make browser`` runs); without it
the tests that use it fail, saying how to get it."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CONSOLE = re.compile(r":CONSOLE|Uncaught|Page load failed", re.IGNORECASE)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        pytest.fail("Chromium is needed for the browser tests of the pages nngauge writes: "
                    "install it with 'make browser' or 'apt-get install chromium' "
                    "(Debian/Ubuntu) so that 'chromium' is on PATH.")
    return found


def run_chromium(page: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--window-size=1280,2000", *flags, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]
