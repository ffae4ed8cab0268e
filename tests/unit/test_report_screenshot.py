"""report.html rendered by headless Chromium: a real browser shows tables and plots.

Slow tier (``integration``): needs Debian's ``chromium`` (``scripts/install-system-deps``).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from report_runs import fingerprint, make_run, scale_times

from prefixbench.report import build_summary
from prefixbench.report.write import write_outputs

pytestmark = pytest.mark.integration


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG: (width, height, rows of raw pixels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if ctype == b"IHDR":
            width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif ctype == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_html_screenshot(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium: run scripts/install-system-deps as root")
    factors = {"host-a": 1.0, "host-b": 1.04, "host-c": 3.0}
    fps = {h: fingerprint(h) for h in factors}
    fps["host-b"] = fingerprint("host-b", packages={"aws-neuronx-runtime-lib": "2.34.10.0"})
    run = make_run(tmp_path / "results", tuple(factors), run_id="screenshot",
                   transform=lambda h, c, w, r, b: scale_times(b, factors[h]),
                   fingerprints=fps)
    write_outputs(build_summary(run), run)
    png = Path(os.environ.get("PREFIXBENCH_SCREENSHOT", str(tmp_path / "report.png")))
    profile = tmp_path / "profile"
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={png}",
            "--window-size=1400,2400", (run / "report.html").as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert png.exists(), f"no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
    data = png.read_bytes()
    assert len(data) > 50_000, len(data)
    width, height, rows = png_pixels(data)
    assert (width, height) == (1400, 2400)
    colors: set[bytes] = set()
    nonwhite = 0
    for row in rows[::4]:
        for x in range(0, len(row), 4 * 3):
            px = row[x:x + 3]
            colors.add(px)
            nonwhite += px != b"\xff\xff\xff"
    assert len(colors) > 50, len(colors)
    assert nonwhite > 2000, nonwhite


def test_provenance_and_bottom_line_are_on_the_first_screen(tmp_path: Path) -> None:
    """A laptop's first screen (1366 x 768) shows where the numbers come from and the
    bottom line, measured by the browser's own layout (a script added to a copy of the
    report reads the paragraphs' positions; the report itself has no script)."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium: run scripts/install-system-deps as root")
    run = make_run(tmp_path / "results", ("host-a", "host-b"), run_id="first-screen")
    write_outputs(build_summary(run), run)
    page = (run / "report.html").read_text()
    probe = """<script>
      window.addEventListener("load", () => {
        const out = [];
        for (const p of document.querySelectorAll("p")) {
          const t = p.textContent;
          const tag = t.includes("SIMULATED fleet: not Trainium data") ? "provenance"
                    : t.startsWith("Bottom line.") ? "bottom" : null;
          if (tag) out.push(tag + "=" + Math.ceil(p.getBoundingClientRect().bottom));
        }
        document.body.setAttribute("data-first-screen", out.join(";"));
      });
    </script>"""
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe + "</body>"))
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1366,768",
            "--virtual-time-budget=2000", "--dump-dom", probed.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    match = re.search(r'data-first-screen="([^"]*)"', proc.stdout)
    assert match, proc.stderr[-2000:]
    found = dict(item.split("=") for item in match.group(1).split(";") if item)
    assert set(found) == {"provenance", "bottom"}, found
    assert all(int(v) <= 768 for v in found.values()), found
