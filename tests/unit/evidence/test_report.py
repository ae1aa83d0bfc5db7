"""The evidence bundle's timeline report: the HTML page and its plots (serving/evidence/capture_report.py,
serving/evidence/plots.py), the summary text (probes/capture/summary.py), input checks
(probes/capture/report_input.py), CLI.

Each panel's SVG (matplotlib's) is cut out of the page and parsed as XML, so the assertions are on what a browser
would draw: a line's path points in pixels, its style's colours, the text elements. serving/evidence/plots.py names the
elements looked for by id: <panel>-line-<i>, -dots-<i>, -legend-<i>, -swatch-<i>, -event-<n>.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from probes.capture.report_input import (
    OPTIONAL_PANEL_KEYS,
    PANEL_KEYS,
    ReportInputError,
    load_timeline,
    validate_timeline,
)
from probes.capture.summary import render_summary, write_summary
from serving.evidence.capture_report import main, render_html, write_report
from serving.evidence.plots import PANEL_COLOURS, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP

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


def _by_id(svg: ET.Element, gid: str) -> ET.Element | None:
    return next((e for e in svg.iter() if e.get("id") == gid), None)


def _path(svg: ET.Element, gid: str) -> ET.Element:
    """The <path> drawn for element `gid` (a series' line, a legend swatch, an event mark)."""
    group = _by_id(svg, gid)
    assert group is not None, f"no element {gid}"
    path = group.find(f"{SVG}path")
    assert path is not None, f"{gid} draws no path"
    return path


def _runs(path: ET.Element) -> list[list[tuple[float, float]]]:
    """A path's subpaths (one per unbroken run of a series) as points in px."""
    runs: list[list[tuple[float, float]]] = []
    tokens = str(path.get("d")).split()
    while tokens:
        op, x, y, *tokens = tokens
        assert op in ("M", "L"), op
        if op == "M":
            runs.append([])
        runs[-1].append((float(x), float(y)))
    return runs


def _style(e: ET.Element) -> dict[str, str]:
    pairs = (kv.split(":", 1) for kv in str(e.get("style", "")).split(";") if kv.strip())
    return {k.strip(): v.strip() for k, v in pairs}


def _series_drawn(svg: ET.Element) -> list[str]:
    """The ids of every series line and dot group in a panel."""
    return [str(e.get("id")) for e in svg.iter() if re.fullmatch(r"[a-z]+-(line|dots)-\d+", str(e.get("id")))]


def _texts(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


def _colours(svg: ET.Element) -> set[str]:
    """Every colour anywhere in the panel's markup: attributes and styles."""
    return set(re.findall(r"#[0-9a-f]{6}\b", ET.tostring(svg, encoding="unicode")))


# --- the page ------------------------------------------------------------------------------------------------


def test_the_kv_cache_panel_is_drawn_after_the_five_when_a_capture_has_it() -> None:
    t = _timeline()
    t["panels"]["cache"] = {
        "title": "KV cache in use (preemptions marked)",
        "unit": "%",
        "status": "successful",
        "source": "vllm:kv_cache_usage_perc",
        "series": {"KV cache used": [[0.0, 5.0], [10.0, 80.0]]},
    }
    validate_timeline(t)
    page = render_html(t)
    assert re.findall(r'<svg[^>]* data-panel="([a-z]+)"', page) == [*PANEL_KEYS, "cache"]
    svg = _svgs(page)["cache"]
    assert svg.get("data-status") == "successful" and PANEL_COLOURS["cache"][0] in _colours(svg)
    assert "  KV cache in use (preemptions marked) (%): successful" in render_summary(t).splitlines()
    t["panels"]["cache"] = {"status": "maybe"}
    with pytest.raises(ReportInputError, match=r"panels\.cache must be an object with a status"):
        validate_timeline(t)


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


def test_series_is_one_line_with_a_point_per_sample_in_the_panels_first_colours() -> None:
    cpu = _svgs(render_html(_timeline()))["cpu"]
    us, sy = _path(cpu, "cpu-line-0"), _path(cpu, "cpu-line-1")  # vmstat us, vmstat sy: timeline.json's order
    assert [len(r) for r in _runs(us)] == [5]
    assert [len(r) for r in _runs(sy)] == [3]
    assert _style(us)["stroke"] == PANEL_COLOURS["cpu"][0]
    assert _style(sy)["stroke"] == PANEL_COLOURS["cpu"][1]
    assert float(_style(us)["stroke-width"]) >= 2
    assert _style(us)["fill"] == "none"
    assert _series_drawn(cpu) == ["cpu-line-0", "cpu-line-1"]


def test_values_and_times_are_scaled_to_the_plot_area() -> None:
    svgs = _svgs(render_html(_timeline()))
    ((x0, y0), (_, y5), (x10, y10), (x20, y20)) = _runs(_path(svgs["io"], "io-line-0"))[0]
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
    assert _series_drawn(gpu) == []
    assert not _colours(gpu) & set(PANEL_COLOURS["gpu"])


def test_failed_panel_with_series_draws_none_of_them() -> None:
    tl = _timeline()
    tl["panels"]["io"].update(status="failed", reason="iostat exited 1")
    io = _svgs(render_html(tl))["io"]
    assert "FAILED: iostat exited 1" in _texts(io)
    assert _series_drawn(io) == []


def test_empty_series_has_no_colour_anywhere_in_its_panel() -> None:
    tl = _timeline()
    tl["panels"]["latency"]["series"] = {"TTFT mean": [], "ITL mean": [], "e2e mean": []}
    latency = _svgs(render_html(tl))["latency"]
    assert "no samples in the window" in _texts(latency)
    assert "TTFT mean (no samples)" in _texts(latency)
    assert not _colours(latency) & set(PANEL_COLOURS["latency"])


def test_legend_lists_every_series_with_its_colour() -> None:
    latency = _svgs(render_html(_timeline()))["latency"]
    legend = [_by_id(latency, f"latency-legend-{i}") for i in range(4)]
    assert ["".join(g.itertext()).strip() if g is not None else None for g in legend] == [
        "TTFT mean",
        "ITL mean",
        "e2e mean (no samples)",
        None,
    ]
    assert _style(_path(latency, "latency-swatch-1"))["stroke"] == PANEL_COLOURS["latency"][1]
    empty = _by_id(latency, "latency-swatch-2")  # empty: named, but no colour
    assert empty is None or empty.find(f"{SVG}path") is None


def test_lone_sample_is_a_dot() -> None:
    queue = _svgs(render_html(_timeline()))["queue"]
    waiting = _by_id(queue, "queue-dots-1")
    assert waiting is not None
    dots = list(waiting.iter(f"{SVG}use"))
    assert len(dots) == 1
    assert _style(dots[0])["fill"] == PANEL_COLOURS["queue"][1]
    assert float(str(dots[0].get("x"))) == PLOT_LEFT
    assert _by_id(queue, "queue-line-1") is None  # one point draws no line


def test_null_value_breaks_the_line_and_samples_outside_the_window_are_dropped() -> None:
    tl = _timeline()
    tl["panels"]["io"]["series"] = {
        "sda r/s": [[-1.0, 9.0], [0.0, 1.0], [1.0, 2.0], [2.0, None], [3.0, 4.0], [4.0, 3.0], [21.0, 99.0]]
    }
    page = render_html(tl)
    runs = _runs(_path(_svgs(page)["io"], "io-line-0"))
    assert [len(r) for r in runs] == [2, 2]
    assert runs[1][0][1] == PLOT_TOP  # 4, not 99, is the maximum
    assert "2 samples outside the window not drawn" in page


def test_events_are_dashed_markers_on_every_panel() -> None:
    svgs = _svgs(render_html(_timeline()))
    for key, svg in svgs.items():
        marks = [m.group(1) for e in svg.iter() if (m := re.fullmatch(rf"{key}-event-(\d+)", str(e.get("id"))))]
        assert marks == ["1", "2"]
        line = _path(svg, f"{key}-event-1")
        ((x_top, _), (x_bottom, _)) = _runs(line)[0]
        assert x_top == x_bottom == pytest.approx(PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) / 4, abs=0.05)
        assert _style(line).get("stroke-dasharray")


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
    legend = _by_id(svgs["cpu"], "cpu-legend-0")
    assert legend is not None
    assert "".join(legend.itertext()).strip() == evil[:25] + "\u2026"  # the legend's 26 characters
    assert [len(r) for r in _runs(_path(svgs["cpu"], "cpu-line-0"))] == [2]


def test_page_is_self_contained() -> None:
    page = render_html(_timeline())
    assert "<script" not in page
    assert "<link" not in page
    assert "@import" not in page
    assert re.findall(r"url\((?!#)", page) == []  # only references inside the page (clip paths)
    # namespace names, not fetched
    namespaces = ["http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"]
    assert re.findall(r"https?://[^\"' ]+", page) == namespaces * len(PANEL_KEYS)


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
    assert list(PANEL_COLOURS) == list(PANEL_KEYS + OPTIONAL_PANEL_KEYS)
    every = [c for palette in PANEL_COLOURS.values() for c in palette]
    assert len(every) == len(set(every))
    for c in every:
        assert re.fullmatch(r"#[0-9a-f]{6}", c), c
        r, g, b = (int(c[i : i + 2], 16) for i in (1, 3, 5))
        assert max(r, g, b) - min(r, g, b) > 20, f"{c} is too close to a grey"
    firsts = [PANEL_COLOURS[k][0] for k in PANEL_KEYS + OPTIONAL_PANEL_KEYS]
    for i, first in enumerate(firsts):  # a screenshot test tells the first colours apart with a tolerance
        for other in firsts[i + 1 :]:
            gap = max(abs(int(first[j : j + 2], 16) - int(other[j : j + 2], 16)) for j in (1, 3, 5))
            assert gap > 40, (first, other)


def test_more_series_than_colours_repeat_dashed() -> None:
    tl = _timeline()
    n = len(PANEL_COLOURS["cpu"]) + 1
    tl["panels"]["cpu"]["series"] = {f"s{i}": [[0.0, float(i)], [1.0, float(i)]] for i in range(n)}
    cpu = _svgs(render_html(tl))["cpu"]
    first, last = _style(_path(cpu, "cpu-line-0")), _style(_path(cpu, f"cpu-line-{n - 1}"))
    assert last["stroke"] == first["stroke"] == PANEL_COLOURS["cpu"][0]
    assert "stroke-dasharray" not in first
    assert last["stroke-dasharray"]


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


def test_write_report_writes_the_page_the_summary_and_the_trace(tmp_path: Path) -> None:
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    html_path, summary_path, trace_path = write_report(tmp_path)
    assert (html_path, summary_path, trace_path) == (
        tmp_path / "timeline.html",
        tmp_path / "summary.txt",
        tmp_path / "trace.json",
    )
    assert html_path.read_text() == render_html(_timeline())
    assert summary_path.read_text() == render_summary(_timeline())
    assert json.loads(trace_path.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.txt", "timeline.html", "timeline.json", "trace.json"]


def test_the_capture_writes_the_summary_only(tmp_path: Path) -> None:
    # In the probe image, which has no matplotlib: the page is drawn on the controller.
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    assert write_summary(tmp_path) == tmp_path / "summary.txt"
    assert (tmp_path / "summary.txt").read_text() == render_summary(_timeline())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.txt", "timeline.json"]


def test_cli_prints_the_three_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [str(tmp_path / n) for n in ("timeline.html", "summary.txt", "trace.json")]


def test_cli_missing_dir_is_one_line_on_stderr_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"python -m serving.evidence.capture_report: {tmp_path / 'nope'}: not a directory\n"


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
