"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, which
scripts/test.sh installs) loads `tensight analyze --format html` and `tensight diff
--format html` pages from file://, takes screenshots, and its DOM is checked: the
sections and the plots' SVG are there (and the diff's charts paint their colours),
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
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from helpers import FIXTURES, run

BUNDLE = FIXTURES / "bundles" / "h200-resnet50"
HOSTILE = FIXTURES / "hostile-html" / "trace.json"
HOSTILE_FASTER = FIXTURES / "hostile-html" / "trace-faster.json"
SECTIONS = ("summary", "roofline", "timeline", "findings", "kernels", "ops", "steps")
# `tensight diff`: the transposed-view workload before and after its fix (H200 bundles).
BEFORE = FIXTURES / "bundles" / "h200-transposed-view-hw"
AFTER = FIXTURES / "bundles" / "h200-transposed-view-fixed"
DIFF_SECTIONS = ("step", "findings", "kernels", "ops")


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


def _render_diff(tmp_path: Path, before: Path, after: Path, name: str) -> Path:
    out = tmp_path / f"{name}.html"
    r = run("diff", before, after, "--format", "html", "-o", out)
    assert r.returncode == 0, r.stderr
    return out


def _pixels(png: Path) -> set[tuple[int, int, int]]:
    """The colours in an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    data = png.read_bytes()
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, prev, seen = zlib.decompress(idat), width * channels, None, set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x] if prev else 0
            c = prev[x - channels] if prev and x >= channels else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        seen.update(tuple(line[i:i + 3]) for i in range(0, stride, channels))
        prev = line
    return seen


def _check_rendered(page: Path, tmp_path: Path, sections: tuple[str, ...] = SECTIONS) -> str:
    """Screenshot and DOM of `page`; the checks every page passes. Returns the DOM."""
    shot = tmp_path / f"{page.stem}.png"
    _browse(page, f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000, "no screenshot"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = _browse(page, "--dump-dom")
    assert 'data-tables="sortable"' in dom, "the page's own script did not run (CSP hash?)"
    assert "PWNED" not in re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    for s in sections:
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


def test_a_diff_page_renders_in_chromium(tmp_path: Path) -> None:
    """`tensight diff --format html` of a planted workload and its fix: the sections, both
    charts (their bars painted in the stylesheet's colours), the resolved finding."""
    page = _render_diff(tmp_path, BEFORE, AFTER, "diff")
    dom = _check_rendered(page, tmp_path, DIFF_SECTIONS)
    assert 'class="plot bars steps"' in dom and dom.count('class="bar busy"') == 2
    assert dom.count('class="bar idle"') == 2 and dom.count('class="mark"') == 2
    assert 'class="plot bars savings"' in dom and 'class="bar after"' in dom
    assert '<span class="stag st-resolved">resolved</span>' in dom
    assert "-307.3 µs" in dom and dom.count('class="sortable"') == 3
    # The charts painted: GPU busy (#3b7dd8), idle (#f2c84b), saving after (#1f5fbf).
    colours = _pixels(tmp_path / "diff.png")
    for rgb in ((0x3b, 0x7d, 0xd8), (0xf2, 0xc8, 0x4b), (0x1f, 0x5f, 0xbf)):
        assert rgb in colours, f"no #{bytes(rgb).hex()} in the screenshot"


def test_markup_in_trace_names_runs_nothing_in_the_diff_page(tmp_path: Path) -> None:
    """The hostile trace against a copy of it whose kernels are twice as fast: its kernel
    and op names (markup) are in the changed tables and the findings, as text only."""
    page = _render_diff(tmp_path, HOSTILE, HOSTILE_FASTER, "hostile-diff")
    dom = _check_rendered(page, tmp_path, DIFF_SECTIONS)
    assert "<img" not in dom
    assert re.search(r"<svg[^>]*onload", dom) is None
    assert dom.count("<script") == 1
    assert dom.count("<svg") == 2, "only the two charts are SVG"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
    assert "&lt;/svg&gt;&lt;svg onload=document.title=" in dom
