"""Headless Chromium's screenshot of a local page and the colours in it (Pillow reads the PNG).

Chromium: `apt-get install -y --no-install-recommends chromium`. Without it a test skips, except under CI (the CI
environment variable set), where Chromium is installed and its absence is a failure."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

WINDOW_WIDTH = 1000
WINDOW_HEIGHT = 2400  # the page is about 1,850 px tall at this width; the test checks the bottom is blank
SCREENSHOT_TIMEOUT_S = 60.0
TERM_GRACE_S = 5.0
# A colour counts as a panel's when every channel is within this of it: antialiasing moves a line's edge pixels
# towards the background, its core pixels stay at the colour.
TOLERANCE = 6
# A line across a panel's 604 px plot area is over 600 px of its colour; a legend swatch is 14 x 2 = 28 px. So 300
# pixels are a drawn line, and a swatch on its own (a panel whose lines were not drawn) is not.
MIN_PIXELS = 300


@dataclass(frozen=True)
class Png:
    width: int
    height: int
    channels: int  # 3 RGB, 4 RGBA
    pixels: bytes  # rows top to bottom, no filter bytes

    def rgb_counts(self) -> Counter[tuple[int, int, int]]:
        c = self.channels
        p = self.pixels
        return Counter(zip(p[0::c], p[1::c], p[2::c], strict=True))

    def row(self, y: int) -> bytes:
        stride = self.width * self.channels
        return self.pixels[y * stride : (y + 1) * stride]


def read_png(data: bytes) -> Png:
    """A screenshot's pixels as RGB rows (Pillow decodes it)."""
    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB")
        return Png(rgb.width, rgb.height, 3, rgb.tobytes())


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        reason = "chromium is not installed: apt-get install -y --no-install-recommends chromium"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {reason}")
        pytest.skip(reason)
    return path


def chromium_argv(profile: Path, size: tuple[int, int], *action: str) -> list[str]:
    """Headless Chromium at a window size with its own profile directory, then `action` (what to do, and the page)."""
    return [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}",
        *action,
    ]


def screenshot(
    html_path: Path, png_path: Path, profile: Path, size: tuple[int, int] = (WINDOW_WIDTH, WINDOW_HEIGHT)
) -> float:
    """Headless Chromium's screenshot of a local page; seconds it took. Terminated, then killed, past the timeout."""
    argv = chromium_argv(profile, size, f"--screenshot={png_path}", html_path.as_uri())
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=SCREENSHOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"chromium took over {SCREENSHOT_TIMEOUT_S:.0f} s: {out.decode(errors='replace')[-2000:]}")
    seconds = time.monotonic() - start
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {out.decode(errors='replace')[-2000:]}"
    assert png_path.is_file(), f"chromium wrote no screenshot: {out.decode(errors='replace')[-2000:]}"
    return seconds


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def pixels_of(counts: Counter[tuple[int, int, int]], hex_colour: str) -> int:
    r, g, b = _rgb(hex_colour)
    return sum(
        n
        for (pr, pg, pb), n in counts.items()
        if abs(pr - r) <= TOLERANCE and abs(pg - g) <= TOLERANCE and abs(pb - b) <= TOLERANCE
    )
