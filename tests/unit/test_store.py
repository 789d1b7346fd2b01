"""Result files: round trips, validation with one-line errors, atomic writes, the
row-by-row writer with resume, and the per-directory lock."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from harness.reports.synthetic import make_rows
from harness.results.environment import Environment
from harness.results.schema import SchemaError, column_names
from harness.results.store import (
    RunMeta,
    atomic_write_text,
    find_result_csvs,
    load_run,
    read_meta,
    read_rows,
    rows_to_csv_text,
    run_dir,
    write_meta,
    write_rows,
    write_run,
)
from harness.results.writer import LOCK_NAME, DirLock, RowWriter, StoreLockedError


def _same(a, b) -> bool:
    da, db = a.to_dict(), b.to_dict()
    return all(
        (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        or x == y
        for x, y in ((da[k], db[k]) for k in da)
    )


@pytest.fixture(scope="module")
def rows():
    rs = make_rows(shapes=((2048, 2048, 128),), ms=(1, 16), modes=("graph", "cold"), seed=4)
    return [replace(rs[0], clock_dropped=True, tags="a;b", error='has "quotes", commas')] + rs[1:]


def test_round_trip_keeps_every_field(tmp_path, rows):
    path = write_rows(tmp_path / "m.csv", rows)
    back = read_rows(path)
    assert len(back) == len(rows)
    assert all(_same(a, b) for a, b in zip(rows, back, strict=True))
    assert back[0].samples() == pytest.approx(rows[0].samples())
    assert path.read_text().splitlines()[0].split(",") == column_names()
    cpu = make_rows(ms=(1,), cpu=True)
    back = read_rows(write_rows(tmp_path / "c.csv", cpu))
    assert all(_same(a, b) for a, b in zip(cpu, back, strict=True))


def _bad(tmp_path, text: str):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SchemaError) as exc:
        read_rows(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_malformed_files_give_one_line_errors(tmp_path, rows):
    good = rows_to_csv_text(rows[1:3])  # no quoted cells: split on commas
    header, first, second = good.splitlines()
    cols = header.split(",")
    i_tflops = cols.index("tflops")
    i_version = cols.index("schema_version")

    with pytest.raises(SchemaError, match="not found") as exc:
        read_rows(tmp_path / "nope.csv")
    assert str(tmp_path / "nope.csv") in str(exc.value)
    assert "empty file" in _bad(tmp_path, "")
    no_col = "\n".join(",".join(c for j, c in enumerate(line.split(",")) if j != i_tflops)
                       for line in (header, first)) + "\n"
    assert "missing column 'tflops'" in _bad(tmp_path, no_col)

    def with_cell(index, value):
        cells = first.split(",")
        cells[index] = value
        return f"{header}\n{','.join(cells)}\n"

    msg = _bad(tmp_path, with_cell(i_tflops, "fast"))
    assert "'tflops'" in msg and "fast" in msg and ":2:" in msg
    assert "schema_version 7" in _bad(tmp_path, with_cell(i_version, "7"))
    assert "'status'" in _bad(tmp_path, with_cell(cols.index("status"), "great"))
    assert "'n_samples'" in _bad(tmp_path, with_cell(cols.index("n_samples"), "x"))
    assert "'clock_dropped'" in _bad(tmp_path, with_cell(cols.index("clock_dropped"), "maybe"))
    short = f"{header}\n{','.join(first.split(',')[:5])}\n"
    assert f"field {cols[5]!r} is missing" in _bad(tmp_path, short)
    assert "extra value" in _bad(tmp_path, f"{header}\n{first},surplus\n")
    assert "duplicate row" in _bad(tmp_path, f"{header}\n{first}\n{first}\n")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(SchemaError, match="UTF-8"):
        read_rows(tmp_path / "bin.csv")
    assert len(read_rows(_write(tmp_path / "ok.csv", f"{header}\n{first}\n\n{second}\n"))) == 2


def _write(path, text):
    path.write_text(text)
    return path


def test_meta_round_trip_and_validation(tmp_path):
    env = Environment(arch="sm90", gpu_name="NVIDIA H200", torch="2.11.0", cuda="13.0",
                      extra={"nvcc": "13.0"})
    meta = RunMeta(matrix="production", commit="abc", arch="sm90", environment=env,
                   ceilings={"copy_gbps": 4300.0, "fp16_tflops": 790.0},
                   settings={"preset": "default"})
    back = read_meta(write_meta(tmp_path / "m.json", meta))
    assert back.environment == env and back.environment.extra == {"nvcc": "13.0"}
    assert back.ceilings == meta.ceilings and back.matrix == "production" and back.created
    for text, field in [('{"schema_version": 1}', "'matrix'"),
                        ('{"schema_version": 2, "matrix": "m"}', "schema_version 2"),
                        ('{"schema_version": 1, "matrix": "m", "ceilings": {"copy": "x"}}',
                         "ceilings.copy"),
                        ('{"schema_version": 1, "matrix": "m", "environment": []}',
                         "'environment'"),
                        ('{"schema_version": 1, "matrix": ', "malformed JSON")]:
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(SchemaError) as exc:
            read_meta(tmp_path / "bad.json")
        msg = str(exc.value)
        assert field in msg and "bad.json" in msg and "\n" not in msg


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = atomic_write_text(tmp_path / "f.csv", "old\n")
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_row_writer_flushes_each_row_and_resumes(tmp_path, rows):
    path = run_dir(tmp_path, "c0ffee", "sm90") / "synthetic.csv"
    meta = RunMeta(matrix="synthetic", commit="c0ffee", arch="sm90")
    with RowWriter(path, meta=meta) as out:
        for i, row in enumerate(rows[:3]):
            out.write(row)
            assert [r.key for r in read_rows(path)] == [r.key for r in rows[: i + 1]]  # on disk now
        with pytest.raises(ValueError, match="already written"):
            out.write(rows[0])
    assert read_meta(path.with_suffix(".json")).matrix == "synthetic"
    with pytest.raises(FileExistsError):
        RowWriter(path, meta=meta).open()
    with open(path, "a") as fh:  # a crash in the middle of the next row
        fh.write("synthetic,M16-N2048,nat")
    with RowWriter(path, meta=meta, mode="resume") as out:
        assert out.dropped_torn_line
        assert out.done_keys == {r.key for r in rows[:3]}
        for row in rows[3:]:
            if row.key not in out.done_keys:
                out.write(row)
    assert [r.key for r in read_rows(path)] == [r.key for r in rows]
    with RowWriter(path, meta=meta, mode="overwrite") as out:
        assert out.done_keys == frozenset()
        out.write(rows[1])
    assert [r.key for r in read_rows(path)] == [rows[1].key]


def test_lock_blocks_a_second_writer_in_process_and_across_processes(tmp_path, rows):
    path = tmp_path / "run" / "synthetic.csv"
    with RowWriter(path) as out:
        out.write(rows[0])
        lock = tmp_path / "run" / LOCK_NAME
        assert lock.is_file() and f"pid {os.getpid()}" in lock.read_text()
        with pytest.raises(StoreLockedError) as exc:
            RowWriter(path, mode="resume").open()
        assert f"pid {os.getpid()}" in str(exc.value) and "\n" not in str(exc.value)
        code = textwrap.dedent(f"""
            from harness.results.writer import DirLock, StoreLockedError
            try:
                DirLock({str(tmp_path / 'run')!r}).acquire()
            except StoreLockedError as e:
                print(e); raise SystemExit(3)
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert proc.returncode == 3 and "being written by another harness process" in proc.stdout
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    with DirLock(tmp_path / "run") as again:
        assert again.held


def test_lock_of_a_dead_holder_is_free(tmp_path):
    code = textwrap.dedent(f"""
        import os
        from harness.results.writer import DirLock
        DirLock({str(tmp_path)!r}).acquire()
        os._exit(0)  # dies holding it, the lock file stays behind
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (tmp_path / LOCK_NAME).exists()
    with DirLock(tmp_path) as lock:
        assert lock.held


def test_load_run_from_csv_json_and_directories(tmp_path, rows):
    env = Environment(arch="sm90", gpu_name="NVIDIA H200", commit="c" * 40)
    d = run_dir(tmp_path / "results", "c" * 40, "sm90")
    write_run(d, rows, RunMeta(matrix="synthetic", commit="c" * 40, arch="sm90", environment=env))
    other = [replace(r, matrix="smoke") for r in rows[:2]]
    write_run(d, other, RunMeta(matrix="smoke", commit="c" * 40, arch="sm90", environment=env))
    run = load_run(d)
    assert run.matrices == ["smoke", "synthetic"] and len(run.rows) == len(rows) + 2
    assert run.environment.gpu_name == "NVIDIA H200" and run.label == "c" * 12
    assert len(load_run(d / "smoke.json").rows) == 2
    assert len(load_run(d / "synthetic.csv").rows) == len(rows)
    write_run(d / "candidate-baseline", rows, RunMeta(matrix="synthetic"))  # derived, not a run
    assert find_result_csvs(tmp_path / "results") == sorted(d.glob("*.csv"))  # one directory below
    write_run(run_dir(tmp_path / "results", "d" * 40, "sm90"), rows, RunMeta(matrix="synthetic"))
    with pytest.raises(SchemaError, match="2 directories"):
        load_run(tmp_path / "results")
    with pytest.raises(SchemaError, match="no such"):
        load_run(tmp_path / "missing")
    with pytest.raises(ValueError, match="commit"):
        run_dir(tmp_path, "../etc", "sm90")
