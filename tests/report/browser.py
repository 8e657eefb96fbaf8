"""Headless Chromium for the HTML report's tests: a screenshot, and every request the page made.

Debian's ``chromium`` (``.ci/run`` installs it when missing). The browser's NetLog records
each URL request with its initiator: the page's own (initiator ``null``, a ``file://``
isolation key) are told apart from the browser's background traffic, which the flags
below mostly switch off and the host-resolver rule sends nowhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import HANG_S

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(page: Path, png: Path, window: tuple[int, int] = (1400, 1000)) -> list[str]:
    """Open ``page`` in a fresh profile, write its screenshot to ``png``; the URLs of the
    non-file requests the page itself made (none, for a self-contained page)."""
    with tempfile.TemporaryDirectory(prefix="kc-chromium-") as profile:
        netlog = Path(profile) / "netlog.json"
        subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={profile}/data",
                f"--log-net-log={netlog}",
                f"--screenshot={png}",
                f"--window-size={window[0]},{window[1]}",
                Path(page).resolve().as_uri(),
            ],
            capture_output=True,
            timeout=HANG_S,
            check=True,
        )
        return page_requests(json.loads(netlog.read_text()))


def page_requests(netlog: dict) -> list[str]:
    """URLs of the requests a ``file://`` page started (not the browser's own)."""
    types = {v: k for k, v in netlog["constants"]["logEventTypes"].items()}
    urls = []
    for event in netlog["events"]:
        params = event.get("params") or {}
        if types.get(event["type"]) != "URL_REQUEST_START_JOB" or "url" not in params:
            continue
        from_page = params.get("initiator") == "null" or str(
            params.get("network_isolation_key", "")
        ).startswith("file://")
        if from_page and not params["url"].startswith(("file:", "data:")):
            urls.append(params["url"])
    return urls


def distinct_colours(png: Path) -> int:
    """How many colours the screenshot holds (a blank page: one)."""
    from PIL import Image  # a dependency of matplotlib, which the report extra brings

    with Image.open(png) as im:
        return len(im.convert("RGB").getcolors(maxcolors=1 << 24) or [])
