import json
import math

import pytest

from harness.store import COLUMNS, ResultError, RunWriter, read_meta, read_rows, read_run, read_samples


def row(case_id="a", status="ok", **extra):
    base = {column: "" for column in COLUMNS}
    base.update(run_id="r", case_id=case_id, op="maxpool2d", strategy="s", backend="numpy", device="cpu",
                dtype="float32", params='{"k": 2}', status=status, median_s=0.5, n_samples=5, bytes=10)
    base.update(extra)
    return base


def test_round_trip_with_samples_and_awkward_text(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a", message='comma, "quote"\nnewline <b>'), [0.1, 0.2])
    writer.append(row("b", status="error", median_s=math.nan), [])
    writer.close()
    meta, rows, samples = read_run(tmp_path)
    assert meta["schema_version"] == 2
    assert list(rows["case_id"]) == ["a", "b"]
    assert rows.loc[0, "message"] == 'comma, "quote"\nnewline <b>'
    assert math.isnan(rows.loc[1, "median_s"])
    assert samples == {"a": [0.1, 0.2]}


def test_a_line_cut_off_mid_write_is_ignored_and_resumable(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a"), [0.1])
    writer.close()
    with open(tmp_path / "rows.csv", "a") as handle:
        handle.write("r,b,maxpool2d,s,num")  # killed mid-write
    with open(tmp_path / "samples.jsonl", "a") as handle:
        handle.write('{"case_id": "b", "samp')
    with pytest.warns(UserWarning, match="unfinished last line"):
        assert list(read_rows(tmp_path)["case_id"]) == ["a"]
    assert read_samples(tmp_path) == {"a": [0.1]}
    writer = RunWriter(tmp_path, {"run_id": "r", "start_time": "later"})  # resuming drops the stub
    writer.append(row("b"), [0.3])
    writer.close()
    assert list(read_rows(tmp_path)["case_id"]) == ["a", "b"]
    assert read_meta(tmp_path)["resumed"] == ["later"]


def test_a_corrupted_line_names_file_and_line(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a"))
    writer.append(row("b"))
    writer.close()
    lines = (tmp_path / "rows.csv").read_text().splitlines(keepends=True)
    lines[2] = "garbage,with,too,few,fields\r\n"
    (tmp_path / "rows.csv").write_text("".join(lines))
    with pytest.raises(ResultError, match=r"rows.csv: line 3: expected \d+ fields, found 5"):
        read_rows(tmp_path)


def test_hand_edited_number_and_status_are_reported(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a", median_s="fast"))
    writer.close()
    with pytest.raises(ResultError, match="line 2: median_s is not a number: 'fast'"):
        read_rows(tmp_path)
    (tmp_path / "rows.csv").unlink()
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a", status="great"))
    writer.close()
    with pytest.raises(ResultError, match="line 2: unknown status 'great'"):
        read_rows(tmp_path)


def test_missing_or_malformed_directories(tmp_path):
    with pytest.raises(ResultError, match="no such directory"):
        read_meta(tmp_path / "absent")
    with pytest.raises(ResultError, match="meta.json: missing"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(ResultError, match="meta.json: line 1: malformed JSON"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(ResultError, match="schema_version 99"):
        read_meta(tmp_path)


def test_unknown_columns_are_refused(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    with pytest.raises(ValueError, match="unknown result columns"):
        writer.append(dict(row(), speed="fast"))
    writer.close()
