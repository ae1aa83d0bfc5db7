"""The timeline page as a browser draws it: headless Chromium screenshots timeline.html; each panel's colour is there.

Each panel draws its series in colours no other panel uses (serving.evidence.plots.PANEL_COLOURS), and everything else
on the page is grey, black or white; so a panel's first colour found in enough pixels proves that panel's lines were
drawn. A second page, the same but with the latency series emptied, proves the check can fail. Pillow reads the PNG.

Chromium: `apt-get install -y --no-install-recommends chromium`. Without it the tests skip, except under CI (the CI
environment variable set), where Chromium is installed and its absence is a failure.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from probes.capture.report_input import PANEL_KEYS
from serving.evidence.capture_report import render_html
from serving.evidence.plots import PANEL_COLOURS
from tests.helpers.screenshots import (
    MIN_PIXELS,
    SCREENSHOT_TIMEOUT_S,
    WINDOW_HEIGHT,
    WINDOW_WIDTH,
    Png,
    chromium_argv,
    pixels_of,
    read_png,
    screenshot,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0


SECONDS = 20.0


# --- the screenshot ------------------------------------------------------------------------------------------


def _wave(mean: float, amplitude: float, phase: float, n: int = 100) -> list[list[float]]:
    return [[i * SECONDS / (n - 1), mean + amplitude * math.sin(i / 8 + phase)] for i in range(n)]


def _timeline() -> dict[str, Any]:
    def panel(title: str, unit: str, series: dict[str, list[list[float]]]) -> dict[str, Any]:
        return {
            "title": title,
            "unit": unit,
            "status": "successful",
            "reason": None,
            "source": "test",
            "series": series,
        }

    return {
        "schema_version": 1,
        "host": "localhost",
        "container": "refdeploy-vllm",
        "window": {
            "start_wall": "2026-11-29T12:00:00.123456+00:00",
            "end_wall": "2026-11-29T12:00:20.123456+00:00",
            "start_mono_s": 12345.678,
            "end_mono_s": 12365.678,
            "seconds": SECONDS,
        },
        "panels": {
            "gpu": panel("GPU", "%", {"gpu0 util %": _wave(50, 45, 0), "gpu1 util %": _wave(30, 20, 1)}),
            "cpu": panel("CPU", "%", {"vmstat us": _wave(40, 30, 0), "vmstat sy": _wave(10, 5, 2)}),
            "io": panel("I/O", "r/s", {"sda r/s": _wave(800, 700, 0)}),
            "latency": panel("Latency", "ms", {"TTFT mean": _wave(20, 10, 0), "e2e mean": _wave(900, 300, 2)}),
            "queue": panel("Queue", "requests", {"running": _wave(8, 7, 0), "waiting": _wave(3, 3, 1)}),
        },
        "events": [{"t_s": 3.2, "label": "py-spy dump 1/2"}, {"t_s": 12.5, "label": "py-spy dump 2/2"}],
        "summary": {"requests": 40, "prompt_tokens": 1234, "generation_tokens": 5120, "ttft_p50_ms": 12.3},
        "notes": ["perf: skipped: perf_event_paranoid is 4"],
        "artifacts": {"metrics delta": "metrics/delta.json"},
    }


def _shoot(timeline: dict[str, Any], directory: Path) -> tuple[Png, float]:
    directory.mkdir()
    page = directory / "timeline.html"
    page.write_text(render_html(timeline), encoding="utf-8")
    png_path = directory / "screenshot.png"
    seconds = screenshot(page, png_path, directory / "chromium-profile")
    return read_png(png_path.read_bytes()), seconds


def test_every_panel_is_drawn_in_its_own_colour(tmp_path: Path) -> None:
    png, seconds = _shoot(_timeline(), tmp_path / "all")
    print(f"chromium screenshot: {seconds:.2f} s")
    assert (png.width, png.height) == (WINDOW_WIDTH, WINDOW_HEIGHT)
    white = bytes([255] * png.width * png.channels)
    assert png.row(0) == white  # the page's background: the decoder reads what Chromium wrote
    assert all(png.row(y) == white for y in range(png.height - 50, png.height)), "the page is taller than the window"
    counts = png.rgb_counts()
    found = {key: pixels_of(counts, PANEL_COLOURS[key][0]) for key in PANEL_KEYS}
    assert all(n >= MIN_PIXELS for n in found.values()), f"pixels in each panel's first colour: {found}"


def test_a_panel_without_lines_has_none_of_its_colour(tmp_path: Path) -> None:
    timeline = _timeline()
    latency = timeline["panels"]["latency"]
    latency["series"] = {name: [] for name in latency["series"]}  # still successful: nothing sampled
    png, _ = _shoot(timeline, tmp_path / "no-latency")
    counts = png.rgb_counts()
    found = {key: pixels_of(counts, PANEL_COLOURS[key][0]) for key in PANEL_KEYS}
    assert found["latency"] == 0, f"pixels in each panel's first colour: {found}"
    assert all(n >= MIN_PIXELS for key, n in found.items() if key != "latency"), found


def _with_requests(timeline: dict[str, Any], spans: list[dict[str, Any]], status: str = "successful") -> None:
    timeline["panels"]["requests"] = {
        "title": "Requests the capture sent",
        "unit": "requests",
        "status": status,
        "reason": None if status == "successful" else "no request was sent in the window",
        "source": "test",
        "series": {"in flight": []},
        "spans": spans,
    }


def test_the_request_lane_draws_each_request_as_a_bar_with_its_first_token(tmp_path: Path) -> None:
    timeline = _timeline()
    # Two clients, each request about 1 s long: 4 bars of about 30 px each on a 604 px plot of 20 s.
    spans = [
        {"id": f"capture-{i}", "lane": i % 2, "start_s": 2.0 + 2.5 * i, "first_token_s": 2.2 + 2.5 * i,
         "end_s": 3.2 + 2.5 * i, "ok": True}
        for i in range(4)
    ]  # fmt: skip
    _with_requests(timeline, spans)
    html = render_html(timeline)
    assert all(f'id="requests-bar-{i}"' in html and f'id="requests-first-{i}"' in html for i in range(4))
    png, _ = _shoot(timeline, tmp_path / "lane")
    bar, first, failed = PANEL_COLOURS["requests"]
    counts = png.rgb_counts()
    assert pixels_of(counts, bar) >= MIN_PIXELS, pixels_of(counts, bar)
    assert pixels_of(counts, first) >= 4 * 10, pixels_of(counts, first)  # a tick of about 18 x 2 px per request
    # The failure colour only in its legend swatch (about 17 x 6 px); a failed request's bar would add hundreds.
    assert pixels_of(counts, failed) < 150, pixels_of(counts, failed)
    print(f"request lane pixels: bars {pixels_of(counts, bar)}, first tokens {pixels_of(counts, first)}")


def test_a_lane_with_no_request_draws_no_bar(tmp_path: Path) -> None:
    timeline = _timeline()
    _with_requests(timeline, [], status="failed")
    png, _ = _shoot(timeline, tmp_path / "empty-lane")
    assert pixels_of(png.rgb_counts(), PANEL_COLOURS["requests"][0]) == 0


# --- the bench page (serving/bench/page.py) ------------------------------------------------------------------

FIRST_SCREEN = (1400, 900)  # a laptop's browser window: what an SRE sees before scrolling
NARROW = (1000, 900)
VERDICT_OK = "#1a7f37"
# A plot here is scaled to its grid cell (900 px to about 670 at this window), its 2 px lines to 1.5 px, so fewer of
# a line's pixels keep its exact colour: a CDF across the plot keeps about 280 (measured: 279 and 300), a legend
# swatch alone (14 x 2 px, scaled) about 20. 150 tells a drawn line from a swatch.
BENCH_MIN_PIXELS = 150  # page.py's _CSS: the OK verdict's background
# Measured in the page by Chromium itself: the page's width against the window's, where the answer and the plots
# sit. Appended to a copy of the page (report.html has no scripts); --dump-dom prints the DOM the script wrote to.
_MEASURE = """<script>
const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const figs = [...document.querySelectorAll('#plots figure')];
document.body.setAttribute('data-layout', JSON.stringify({
  window: [innerWidth, innerHeight], scroll_width: document.documentElement.scrollWidth,
  answer: box(document.getElementById('answer')), verdict: box(document.querySelector('.verdict')),
  figures: figs.map(box), widest: Math.max(...[...document.body.querySelectorAll('*')].map(e => box(e)[2])),
}));
</script>"""


def bench_page(tmp_path: Path) -> Path:
    """A bench's report.html as make bench writes it, over real `vllm bench serve` results (tests/unit/test_br_export's
    bench: c1 and c4, two measured runs each), one run flagged so the page has a run left out of its pool."""
    from serving.bench import report as bench_report
    from tests.helpers.bench_dirs import bench_dir, flag

    d = bench_dir(tmp_path)
    flag(d, "c4-m1")
    bench_report.write_report(d)
    return d / bench_report.REPORT_HTML


def layout(page: Path, size: tuple[int, int], directory: Path) -> dict[str, Any]:
    """The page's layout at a window size, as Chromium laid it out."""
    directory.mkdir()
    probe = directory / "measured.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    argv = chromium_argv(directory / "chromium-profile", size, "--dump-dom", probe.as_uri())
    proc = subprocess.run(argv, capture_output=True, timeout=SCREENSHOT_TIMEOUT_S, start_new_session=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    found = re.search(r'data-layout="([^"]*)"', proc.stdout.decode())
    assert found, "the page's measuring script wrote nothing: " + proc.stdout.decode()[-500:]
    got: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    # The viewport: the window's width; its height less the browser's own bars (headless Chromium 156 keeps 143 px
    # of a 900 px window), so the first screen judged below is what a browser window of that size shows.
    assert got["window"][0] == size[0] and got["window"][1] <= size[1], got["window"]
    return got


def test_the_bench_page_opens_with_the_answer_then_plots_side_by_side(tmp_path: Path) -> None:
    page = bench_page(tmp_path / "bench")
    text = page.read_text()
    assert text.index('id="answer"') < text.index('id="plots"') < text.index('id="report-text"')
    assert "left out of the pool: c4-m1: " in text and "1 of 2" in text  # the flagged run, named, not pooled
    got = layout(page, FIRST_SCREEN, tmp_path / "wide")
    width, height = got["window"]
    assert got["scroll_width"] <= width and got["widest"] <= width, got  # nothing wider than the page
    assert got["verdict"][1] < 120 and got["answer"][3] <= height, got  # the answer, whole, on the first screen
    figures = got["figures"]
    assert len(figures) >= 5 and all(f[2] <= width for f in figures), figures
    assert min(f[1] for f in figures) >= got["answer"][3], "a plot above the answer"
    first_row = [f for f in figures if f[1] == figures[0][1]]
    assert len(first_row) == 2 and first_row[0][0] < first_row[1][0], figures  # two plots side by side
    assert figures[0][3] <= height, "no plot on the first screen"
    # Narrower: one plot a row, still nothing wider than the window.
    narrow = layout(page, NARROW, tmp_path / "narrow")
    assert narrow["scroll_width"] <= NARROW[0] and narrow["widest"] <= NARROW[0], narrow
    assert len({f[0] for f in narrow["figures"]}) == 1, narrow["figures"]
    # The first screen as a browser draws it: the verdict's colour at the top, a plot's lines in each half.
    png_path = tmp_path / "first-screen.png"
    shutil.copy(page, tmp_path / "report.html")
    screenshot(tmp_path / "report.html", png_path, tmp_path / "shot-profile", FIRST_SCREEN)
    png = read_png(png_path.read_bytes())
    top = Png(png.width, 160, 3, png.pixels[: png.width * 3 * 160])
    assert pixels_of(top.rgb_counts(), VERDICT_OK) >= 200, pixels_of(top.rgb_counts(), VERDICT_OK)
    half = png.width // 2
    left = Counter(px for y in range(png.height) for px in _row_pixels(png.row(y)[: half * 3]))
    right = Counter(px for y in range(png.height) for px in _row_pixels(png.row(y)[half * 3 :]))
    # The first row: concurrency 1's e2e CDF (reds) on the left, its TTFT CDF (oranges) on the right. Its two runs
    # are the same recorded result, so the second run's line (the palette's second colour) covers the first's.
    drawn = {
        "left, e2e CDF": pixels_of(left, PANEL_COLOURS["latency"][1]),
        "right, TTFT CDF": pixels_of(right, PANEL_COLOURS["io"][1]),
    }
    assert all(n >= BENCH_MIN_PIXELS for n in drawn.values()), drawn


def test_the_layout_check_sees_a_line_wider_than_the_page(tmp_path: Path) -> None:
    """The check above can fail: the same page with one unwrapped line of 400 characters overflows the window."""
    page = bench_page(tmp_path / "bench")
    wide = tmp_path / "wide.html"
    line = '<pre style="white-space:pre">' + "x" * 400 + "</pre>"
    wide.write_text(page.read_text().replace('<section id="answer">', line + '<section id="answer">'))
    got = layout(wide, FIRST_SCREEN, tmp_path / "measured")
    assert got["scroll_width"] > FIRST_SCREEN[0], got


def _row_pixels(row: bytes) -> list[tuple[int, int, int]]:
    return list(zip(row[0::3], row[1::3], row[2::3], strict=True))
