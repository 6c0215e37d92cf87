"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, which
scripts/test.sh installs) loads `tensight analyze --format html` pages from file://,
takes screenshots, and its DOM is checked: the sections and both plots' SVG are there,
the page's own script ran (it marks <html data-tables="sortable">), and no script planted
in a trace's names did (each would set document.title to PWNED or add an element). The
page's Content-Security-Policy would block a planted script even if escaping failed, so
the DOM checks (no <img>, no onload element, one <script>) are what catch an escaping bug.

Skipped, with the reason, only where Chromium is missing and apt-get is unavailable to
install it; with apt-get present a missing browser is a failure of the test setup.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import FIXTURES, run

BUNDLE = FIXTURES / "bundles" / "h200-resnet50"
HOSTILE = FIXTURES / "hostile-html" / "trace.json"
SECTIONS = ("summary", "roofline", "timeline", "findings", "kernels", "ops", "steps")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get") is None:
        pytest.skip("headless Chromium is not installed and apt-get is not available to "
                    "install it (on Debian: apt-get install -y chromium); browser test skipped")
    pytest.fail("chromium is not installed: run `apt-get install -y chromium` "
                "(scripts/test.sh installs it)")


def _browse(page: Path, *args: str) -> str:
    """Run headless Chromium on file://page with `args`; its stdout."""
    with tempfile.TemporaryDirectory() as profile:
        r = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,2400",
             "--virtual-time-budget=3000", *args, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _render(tmp_path: Path, source: Path, name: str) -> Path:
    out = tmp_path / f"{name}.html"
    r = run("analyze", source, "--format", "html", "-o", out)
    assert r.returncode == 0, r.stderr
    return out


def _check_rendered(page: Path, tmp_path: Path) -> str:
    """Screenshot and DOM of `page`; the checks every page passes. Returns the DOM."""
    shot = tmp_path / f"{page.stem}.png"
    _browse(page, f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000, "no screenshot"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = _browse(page, "--dump-dom")
    assert 'data-tables="sortable"' in dom, "the page's own script did not run (CSP hash?)"
    assert "PWNED" not in re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    for s in SECTIONS:
        assert f'<section id="{s}"' in dom, f"no {s} section in the DOM"
    return dom


def test_the_pages_script_is_the_one_its_policy_allows(tmp_path: Path) -> None:
    """The Content-Security-Policy names the inline script by its SHA-256: nothing else runs."""
    html = _render(tmp_path, BUNDLE, "bundle").read_text()
    policy = re.search(r"script-src 'sha256-([A-Za-z0-9+/=]+)'", html)
    assert policy, "no script hash in the page's policy"
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert digest == policy.group(1)
    assert "default-src 'none'" in html


def test_a_bundle_report_renders_in_chromium(tmp_path: Path) -> None:
    dom = _check_rendered(_render(tmp_path, BUNDLE, "bundle"), tmp_path)
    assert 'class="plot roofline"' in dom and "<circle" in dom, "no roofline plot"
    assert 'class="plot timeline"' in dom and 'class="span kernel"' in dom, "no timeline"
    assert '<article class="finding"' in dom
    assert 'class="sortable"' in dom


def test_markup_in_trace_names_runs_nothing_in_chromium(tmp_path: Path) -> None:
    page = _render(tmp_path, HOSTILE, "hostile")
    dom = _check_rendered(page, tmp_path)
    # Planted elements would be in the DOM had they been parsed as markup.
    assert "<img" not in dom
    assert re.search(r"<svg[^>]*onload", dom) is None
    assert dom.count("<script") == 1
    assert dom.count("<svg") == 2, "only the two plots are SVG"
    # The names are there, as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
