"""The browser tier: Debian's chromium, driven by Playwright, against one local stack (tests/browser/console.toml).

Without chromium (or the playwright package) the tier is skipped, saying why, except in CI (CI=true), where
that is a failure: .ci/run installs chromium when it is missing. `playwright install` is not used: it
downloads its own browser build, and the system's chromium is the one a Debian machine has.
"""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what}: the browser tier must run in CI (.ci/run installs chromium)", pytrace=False)
    pytest.skip(f"{what}: the browser tier is skipped (apt-get install chromium; CI=true makes this a failure)")


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium")
    if path is None:
        missing("no `chromium` on PATH")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is not installed (the dev extra pins it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield browser
        browser.close()
