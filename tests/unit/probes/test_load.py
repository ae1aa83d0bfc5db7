"""The capture's client (probes/senders/load.py): what it sends, and the figures and series it makes of what came back.

Sending to a real server is tested against the real CPU deployment (tests/integration/test_probes_capture.py,
`make capture WORKLOAD=smoke`); here, the parts that decide.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.capture import bundle as capture
from probes.senders import load


def _spec(**kw: object) -> load.LoadSpec:
    base: dict[str, object] = {"workload": "smoke", "model": "tiny", "input_len": 32, "output_len": 4,
                               "concurrency": 2, "seed": 7, "timeout_s": 30.0}  # fmt: skip
    return load.LoadSpec.from_json({**base, **kw})


def test_prompts_are_the_seeds_the_same_every_time_and_their_own_per_request() -> None:
    a = load.prompt_ids(7, 0, 32)
    assert a == load.prompt_ids(7, 0, 32)
    assert len(a) == 32 and all(load.TOKEN_LOW <= t < load.TOKEN_HIGH for t in a)
    assert a != load.prompt_ids(7, 1, 32) and a != load.prompt_ids(8, 0, 32)


def test_the_request_decodes_exactly_the_workloads_output_length_streamed() -> None:
    body = load.request_body(_spec(), 3)
    assert body["prompt"] == load.prompt_ids(7, 3, 32)
    assert (body["max_tokens"], body["ignore_eos"], body["stream"]) == (4, True, True)
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "tiny" and body["temperature"] == 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"concurrency": 0}, "at least 1"),
        ({"timeout_s": 0}, "timeout_s positive"),
        ({"colour": "red"}, None),  # unknown keys are ignored: the argv is the product's own
    ],
)
def test_a_spec_is_checked(change: dict[str, object], message: str | None) -> None:
    if message is None:
        assert _spec(**change).concurrency == 2
    else:
        with pytest.raises(load.LoadInputError, match=message):
            _spec(**change)


def test_an_unreadable_key_file_stops_the_client_before_it_sends(tmp_path: Path) -> None:
    with pytest.raises(load.LoadInputError, match=r"cannot be read .* the capture sends no request"):
        load.Load(_spec(api_key_file=str(tmp_path / "absent")))
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    assert load.Load(_spec(api_key_file=str(key))).key == "sk-test"


def _rec(i: int, t0: float, tokens: list[float], ok: bool = True) -> load.RequestRecord:
    return load.RequestRecord(
        id=f"capture-{i}", index=i, client=i % 2, t0_mono_s=t0, status=200 if ok else 500,
        first_token_mono_s=tokens[0] if tokens else None, token_mono_s=tokens,
        end_mono_s=(tokens[-1] if tokens else t0) + 0.001, error=None if ok else "HTTP 500: boom",
    )  # fmt: skip


def test_figures_use_the_benchs_denominators_and_count_failures_and_bursts() -> None:
    recs = [
        _rec(0, 100.0, [100.010, 100.020, 100.030, 100.040]),  # TTFT 10 ms, TPOT 10 ms (30 ms over 3 tokens)
        _rec(1, 100.0, [100.030, 100.0302, 100.0304, 100.0306]),  # TTFT 30 ms, one burst (0.6 ms)
        _rec(2, 101.0, [], ok=False),
    ]
    f = load.figures(recs)
    assert (f["sent"], f["completed"], f["failed"], f["one_burst"]) == (3, 2, 1, 1)
    assert f["ttft_ms_p50"] == pytest.approx(20.0)
    assert f["tpot_ms_p50"] == pytest.approx((10.0 + 0.2) / 2)


def test_tpot_counts_the_servers_tokens_where_a_chunk_carried_two() -> None:
    # 5 tokens in 4 chunks (the last chunk carried two): 40 ms from the first to the last over 4 tokens after it.
    rec = _rec(0, 100.0, [100.010, 100.020, 100.030, 100.050])
    rec.completion_tokens = 5
    assert load.figures([rec])["tpot_ms_p50"] == pytest.approx(10.0)


def test_in_flight_is_a_step_at_every_start_and_end() -> None:
    recs = [_rec(0, 10.5, [10.6, 10.9]), _rec(1, 10.7, [10.8, 11.2])]
    # Ends are the last token + 1 ms: 10.901 and 11.201.
    assert load.in_flight_series(recs, 10.0) == [
        (0.0, 0), (0.5, 0), (0.5, 1), (0.7, 1), (0.7, 2), (0.901, 2), (0.901, 1), (1.201, 1), (1.201, 0),
    ]  # fmt: skip


def test_records_round_trip_through_the_bundle_without_the_key(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-secret")
    spec = _spec(api_key_file=str(key))
    recs = [_rec(0, 100.0, [100.01, 100.02])]
    result = load.write_records(tmp_path, spec, recs, sent=1)
    assert load.read_records(tmp_path) == recs
    text = (tmp_path / load.SUMMARY_FILE).read_text() + (tmp_path / load.REQUESTS_FILE).read_text()
    assert "sk-secret" not in text and str(key) not in text
    assert result["spec"]["api_key"] is True and result["sent"] == 1
    assert json.loads((tmp_path / load.REQUESTS_FILE).read_text())["ok"] is True


def test_a_bad_workload_argument_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = capture.main(["--out", str(tmp_path / "b"), "--seconds", "1", "--workload-json", '{"workload": "x"}'])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("capture: --workload-json:")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("text", ['{"profiler": "torch"}', "[1]", "{not json"])
def test_bad_engine_labels_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    rc = capture.main(["--out", str(tmp_path / "b"), "--seconds", "1", "--engine-json", text])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("capture: --engine-json:"), err
    assert not (tmp_path / "b").exists()
