"""The evidence bundle's timeline report (probes/report.py, report_svg.py, report_input.py): the HTML page's plots,
the summary text, input checks, CLI.

Each panel's SVG is cut out of the page and parsed as XML, so the assertions are on what a browser would draw:
polyline points in pixels, stroke colours, the text elements.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from probes.report import main, render_html, render_summary, write_report
from probes.report_input import PANEL_KEYS, ReportInputError, load_timeline, validate_timeline
from probes.report_svg import PANEL_COLOURS, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP

SVG = "{http://www.w3.org/2000/svg}"
SECONDS = 20.0
GPU_SKIPPED = "nvidia-smi not found: no NVIDIA GPU on this host"


def _timeline() -> dict[str, Any]:
    """A small timeline: GPU skipped, data in the other four panels, two events."""

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
            "gpu": {
                "title": "GPU",
                "unit": "%",
                "status": "skipped",
                "reason": GPU_SKIPPED,
                "source": "nvidia-smi -lms 200",
                "series": {},
            },
            "cpu": panel(
                "CPU",
                "%",
                {
                    "vmstat us": [[0.0, 10.0], [5.0, 20.0], [10.0, 30.0], [15.0, 40.0], [20.0, 50.0]],
                    "vmstat sy": [[0.0, 5.0], [10.0, 7.0], [20.0, 6.0]],
                },
            ),
            # 0 at t=0, the maximum 400 at t=10, 100 at the window's end
            "io": panel("I/O", "r/s", {"sda r/s": [[0.0, 0.0], [5.0, 200.0], [10.0, 400.0], [20.0, 100.0]]}),
            "latency": panel(
                "Latency",
                "ms",
                {"TTFT mean": [[1.0, 12.0], [2.0, 14.0]], "ITL mean": [[1.0, 20.0], [2.0, 22.0]], "e2e mean": []},
            ),
            "queue": panel("Queue", "requests", {"running": [[0.0, 1.0], [10.0, 3.0]], "waiting": [[0.0, 0.0]]}),
        },
        "events": [{"t_s": 5.0, "label": "py-spy dump 1/2"}, {"t_s": 15.0, "label": "py-spy dump 2/2"}],
        "summary": {
            "requests": 40,
            "prompt_tokens": 1234,
            "generation_tokens": 5120,
            "ttft_p50_ms": 12.3,
            "ttft_p99_ms": 40.1,
            "itl_p50_ms": 20.0,
            "itl_p99_ms": 35.0,
            "e2e_p50_ms": 900.0,
            "e2e_p99_ms": None,
            "preemptions": 0,
        },
        "notes": ["perf: skipped: perf_event_paranoid is 4"],
        "artifacts": {"metrics delta": "metrics/delta.json", "stacks": "stacks/aggregate.txt"},
    }


def _svgs(page: str) -> dict[str, ET.Element]:
    """Each panel's <svg>, parsed as XML (which also proves the markup and its escaping are well formed)."""
    found = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    parsed = [ET.fromstring(s) for s in found]
    return {str(e.get("data-panel")): e for e in parsed}


def _points(polyline: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in str(polyline.get("points")).split())]


def _lines_of(svg: ET.Element, series: str) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}polyline") if e.get("data-series") == series]


def _texts(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


def _strokes(svg: ET.Element) -> set[str]:
    return {str(e.get("stroke")) for e in svg.iter() if e.get("stroke")} | {
        str(e.get("fill")) for e in svg.iter() if e.get("fill")
    }


# --- the page ------------------------------------------------------------------------------------------------


def test_page_has_one_svg_per_panel_in_order() -> None:
    page = render_html(_timeline())
    assert re.findall(r'<svg[^>]* data-panel="([a-z]+)"', page) == list(PANEL_KEYS)
    svgs = _svgs(page)
    assert [s.get("data-status") for s in svgs.values()] == [
        "skipped",
        "successful",
        "successful",
        "successful",
        "successful",
    ]
    assert all(s.get("width") == "900" and s.get("height") == "220" for s in svgs.values())


def test_page_title_names_host_and_wall_start() -> None:
    page = render_html(_timeline())
    title = re.search(r"<title>(.*?)</title>", page)
    assert title is not None
    assert title.group(1) == "timeline localhost 2026-11-29T12:00:00.123456+00:00"


def test_series_is_one_polyline_with_a_point_per_sample_in_the_panels_first_colours() -> None:
    svgs = _svgs(render_html(_timeline()))
    (us,) = _lines_of(svgs["cpu"], "vmstat us")
    (sy,) = _lines_of(svgs["cpu"], "vmstat sy")
    assert len(_points(us)) == 5
    assert len(_points(sy)) == 3
    assert us.get("stroke") == PANEL_COLOURS["cpu"][0]
    assert sy.get("stroke") == PANEL_COLOURS["cpu"][1]
    assert float(str(us.get("stroke-width"))) >= 2
    assert us.get("fill") == "none"


def test_values_and_times_are_scaled_to_the_plot_area() -> None:
    svgs = _svgs(render_html(_timeline()))
    (line,) = _lines_of(svgs["io"], "sda r/s")
    (x0, y0), (_, y5), (x10, y10), (x20, y20) = _points(line)
    assert (x0, y0) == (PLOT_LEFT, PLOT_BOTTOM)  # t=0, value 0: the origin
    assert y10 == PLOT_TOP  # the maximum is the top
    assert x10 == pytest.approx((PLOT_LEFT + PLOT_RIGHT) / 2, abs=0.05)
    assert x20 == PLOT_RIGHT  # the window's end is the right edge, whatever the data
    assert y5 == pytest.approx(PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) / 2, abs=0.05)  # 200 of 400: halfway
    assert y20 == pytest.approx(PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) / 4, abs=0.05)


def test_x_axis_is_the_same_on_every_panel_and_y_ticks_carry_the_unit() -> None:
    svgs = _svgs(render_html(_timeline()))
    for svg in svgs.values():
        texts = _texts(svg)
        assert "0 s" in texts
        assert "10 s" in texts
        assert "20 s" in texts
    io_texts = _texts(svgs["io"])
    assert "400 r/s" in io_texts
    assert "0 r/s" in io_texts
    assert "20 requests" not in _texts(svgs["queue"])  # the queue's maximum is 3
    assert "3 requests" in _texts(svgs["queue"])


def test_skipped_panel_shows_its_reason_and_no_lines() -> None:
    gpu = _svgs(render_html(_timeline()))["gpu"]
    assert f"SKIPPED: {GPU_SKIPPED}" in _texts(gpu)
    assert list(gpu.iter(f"{SVG}polyline")) == []
    assert list(gpu.iter(f"{SVG}circle")) == []
    assert not _strokes(gpu) & set(PANEL_COLOURS["gpu"])


def test_failed_panel_with_series_draws_none_of_them() -> None:
    tl = _timeline()
    tl["panels"]["io"].update(status="failed", reason="iostat exited 1")
    io = _svgs(render_html(tl))["io"]
    assert "FAILED: iostat exited 1" in _texts(io)
    assert list(io.iter(f"{SVG}polyline")) == []


def test_empty_series_has_no_colour_anywhere_in_its_panel() -> None:
    tl = _timeline()
    tl["panels"]["latency"]["series"] = {"TTFT mean": [], "ITL mean": [], "e2e mean": []}
    latency = _svgs(render_html(tl))["latency"]
    assert "no samples in the window" in _texts(latency)
    assert "TTFT mean (no samples)" in _texts(latency)
    assert not _strokes(latency) & set(PANEL_COLOURS["latency"])


def test_legend_lists_every_series_with_its_colour() -> None:
    latency = _svgs(render_html(_timeline()))["latency"]
    legend = {str(g.get("data-legend")): g for g in latency.iter(f"{SVG}g") if g.get("data-legend")}
    assert list(legend) == ["TTFT mean", "ITL mean", "e2e mean"]
    swatch = legend["ITL mean"].find(f"{SVG}line")
    assert swatch is not None
    assert swatch.get("stroke") == PANEL_COLOURS["latency"][1]
    assert legend["e2e mean"].find(f"{SVG}line") is None  # empty: named, but no colour


def test_lone_sample_is_a_dot() -> None:
    queue = _svgs(render_html(_timeline()))["queue"]
    dots = [c for c in queue.iter(f"{SVG}circle") if c.get("data-series") == "waiting"]
    assert len(dots) == 1
    assert dots[0].get("fill") == PANEL_COLOURS["queue"][1]
    assert float(str(dots[0].get("cx"))) == PLOT_LEFT


def test_null_value_breaks_the_line_and_samples_outside_the_window_are_dropped() -> None:
    tl = _timeline()
    tl["panels"]["io"]["series"] = {
        "sda r/s": [[-1.0, 9.0], [0.0, 1.0], [1.0, 2.0], [2.0, None], [3.0, 4.0], [4.0, 3.0], [21.0, 99.0]]
    }
    page = render_html(tl)
    lines = _lines_of(_svgs(page)["io"], "sda r/s")
    assert [len(_points(e)) for e in lines] == [2, 2]
    assert lines[1].get("points", "").split()[0].split(",")[1] == f"{PLOT_TOP:.1f}"  # 4, not 99, is the maximum
    assert "2 samples outside the window not drawn" in page


def test_events_are_dashed_markers_on_every_panel() -> None:
    svgs = _svgs(render_html(_timeline()))
    for svg in svgs.values():
        markers = [g for g in svg.iter(f"{SVG}g") if g.get("data-event")]
        assert [m.get("data-event") for m in markers] == ["1", "2"]
        line = markers[0].find(f"{SVG}line")
        assert line is not None
        assert float(str(line.get("x1"))) == pytest.approx(PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) / 4, abs=0.05)
        assert line.get("stroke-dasharray")


def test_text_is_escaped() -> None:
    tl = _timeline()
    evil = '<script>alert("x")</script> & co'
    tl["host"] = evil
    tl["panels"]["cpu"]["series"] = {evil: [[0.0, 1.0], [1.0, 2.0]]}
    tl["panels"]["gpu"]["reason"] = evil
    tl["events"] = [{"t_s": 1.0, "label": evil}]
    tl["notes"] = [evil]
    tl["artifacts"] = {evil: "a/b.txt"}
    page = render_html(tl)
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in page
    svgs = _svgs(page)  # still well-formed XML
    (line,) = _lines_of(svgs["cpu"], evil)
    assert len(_points(line)) == 2


def test_page_is_self_contained() -> None:
    page = render_html(_timeline())
    assert "<script" not in page
    assert "<link" not in page
    assert "@import" not in page
    assert "url(" not in page
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * len(
        PANEL_KEYS
    )  # a name, not fetched


def test_artifacts_link_only_inside_the_bundle() -> None:
    tl = _timeline()
    tl["artifacts"] = {"ok": "stacks/aggregate.txt", "abs": "/etc/passwd", "js": "javascript:alert(1)", "up": "../x"}
    page = render_html(tl)
    assert '<a href="stacks/aggregate.txt">' in page
    assert 'href="/etc/passwd"' not in page
    assert 'href="javascript' not in page
    assert 'href="../x"' not in page
    assert "/etc/passwd" in page  # still listed, as text


def test_summary_table_is_in_the_page() -> None:
    page = render_html(_timeline())
    assert '<tr><td>prompt tokens</td><td class="num">1,234</td><td>tokens</td></tr>' in page
    assert '<tr><td>e2e p99</td><td class="num">n/a</td><td>ms</td></tr>' in page


def test_palettes_are_distinct_colours_and_not_grey() -> None:
    assert list(PANEL_COLOURS) == list(PANEL_KEYS)
    every = [c for palette in PANEL_COLOURS.values() for c in palette]
    assert len(every) == len(set(every))
    for c in every:
        assert re.fullmatch(r"#[0-9a-f]{6}", c), c
        r, g, b = (int(c[i : i + 2], 16) for i in (1, 3, 5))
        assert max(r, g, b) - min(r, g, b) > 20, f"{c} is too close to a grey"
    firsts = [PANEL_COLOURS[k][0] for k in PANEL_KEYS]
    for i, first in enumerate(firsts):  # a screenshot test tells the first colours apart with a tolerance
        for other in firsts[i + 1 :]:
            gap = max(abs(int(first[j : j + 2], 16) - int(other[j : j + 2], 16)) for j in (1, 3, 5))
            assert gap > 40, (first, other)


def test_more_series_than_colours_repeat_dashed() -> None:
    tl = _timeline()
    n = len(PANEL_COLOURS["cpu"]) + 1
    tl["panels"]["cpu"]["series"] = {f"s{i}": [[0.0, float(i)], [1.0, float(i)]] for i in range(n)}
    cpu = _svgs(render_html(tl))["cpu"]
    first, last = _lines_of(cpu, "s0")[0], _lines_of(cpu, f"s{n - 1}")[0]
    assert last.get("stroke") == first.get("stroke") == PANEL_COLOURS["cpu"][0]
    assert first.get("stroke-dasharray") is None
    assert last.get("stroke-dasharray")


# --- summary.txt ---------------------------------------------------------------------------------------------


def test_summary_text_has_window_figures_panels_notes_artifacts() -> None:
    text = render_summary(_timeline())
    lines = text.splitlines()
    assert lines[0] == "evidence timeline: host localhost, container refdeploy-vllm"
    assert lines[1] == "window: 2026-11-29T12:00:00.123456+00:00 -> 2026-11-29T12:00:20.123456+00:00 (20 s)"
    assert "  prompt tokens      1,234  tokens" in lines
    assert "  TTFT p99            40.1  ms" in lines
    assert "  e2e p99              n/a  ms" in lines
    assert "  preemptions            0" in lines
    assert f"  GPU (%): skipped: {GPU_SKIPPED}" in lines
    assert "    source: nvidia-smi -lms 200" in lines
    assert "  I/O (r/s): successful" in lines
    assert "    sda r/s  4  0.0   150.0  400.0" in lines  # n, min, median, max
    assert "    e2e mean   0     -       -     -" in lines
    assert "  1. 5 s: py-spy dump 1/2" in lines
    assert "  perf: skipped: perf_event_paranoid is 4" in lines
    assert "  metrics delta  metrics/delta.json" in lines


def test_summary_text_figure_values_line_up() -> None:
    lines = render_summary(_timeline()).splitlines()
    start = lines.index("summary:") + 1
    header, *rows = lines[start : lines.index("", start)]
    end = header.index("value") + len("value")  # values are right-aligned under their heading
    values = [row[:end].split("  ")[-1].strip() for row in rows]
    assert values == ["40", "1,234", "5,120", "12.3", "40.1", "20.0", "35.0", "900.0", "n/a", "0"]
    assert all(row[end : end + 1] in ("", " ") for row in rows)


# --- input ---------------------------------------------------------------------------------------------------


def test_load_timeline_round_trips(tmp_path: Path) -> None:
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    assert load_timeline(tmp_path / "timeline.json") == _timeline()


@pytest.mark.parametrize("missing", PANEL_KEYS)
def test_load_timeline_names_a_missing_panel(tmp_path: Path, missing: str) -> None:
    tl = _timeline()
    del tl["panels"][missing]
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(tl))
    with pytest.raises(ReportInputError, match=rf"missing panel 'panels\.{missing}'"):
        load_timeline(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.update(schema_version=2), "schema_version is 2"),
        (lambda t: t.pop("schema_version"), "schema_version is None"),
        (lambda t: t.pop("panels"), "missing key 'panels'"),
        (lambda t: t["window"].update(seconds=0), "window.seconds is 0"),
        (lambda t: t["panels"]["cpu"].update(status="ok"), "panels.cpu.status is 'ok'"),
        (lambda t: t["panels"]["io"]["series"]["sda r/s"].append([1.0]), r"panels.io.series\['sda r/s'\]\[4\]"),
        (lambda t: t["panels"].update(disk={}), "unknown panel 'disk'"),
    ],
)
def test_validate_timeline_says_what_is_wrong(change: Any, message: str) -> None:
    tl = copy.deepcopy(_timeline())
    change(tl)
    with pytest.raises(ReportInputError, match=message):
        validate_timeline(tl)


def test_load_timeline_rejects_non_json(tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    path.write_text("{not json")
    with pytest.raises(ReportInputError, match="not JSON"):
        load_timeline(path)


# --- bundle and CLI ------------------------------------------------------------------------------------------


def test_write_report_writes_both_files(tmp_path: Path) -> None:
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    html_path, summary_path = write_report(tmp_path)
    assert (html_path, summary_path) == (tmp_path / "timeline.html", tmp_path / "summary.txt")
    assert html_path.read_text() == render_html(_timeline())
    assert summary_path.read_text() == render_summary(_timeline())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.txt", "timeline.html", "timeline.json"]


def test_cli_prints_the_two_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [str(tmp_path / "timeline.html"), str(tmp_path / "summary.txt")]


def test_cli_missing_dir_is_one_line_on_stderr_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"python -m probes.report: {tmp_path / 'nope'}: not a directory\n"


def test_cli_bad_timeline_is_exit_2_naming_the_panel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tl = _timeline()
    del tl["panels"]["queue"]
    (tmp_path / "timeline.json").write_text(json.dumps(tl))
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "missing panel 'panels.queue'" in err
    assert not (tmp_path / "timeline.html").exists()


def test_cli_without_argument_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
