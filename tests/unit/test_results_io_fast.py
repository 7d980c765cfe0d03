"""results_io's column-at-a-time paths (raw logs read, result CSVs written,
a CSV's last time) give what a row at a time, a cell at a time gives."""
from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest

from emulator.experiment import results_io
from emulator.experiment.results_io import (_fmt, _fmt_time, last_time_ns, read_raw_columns,
                                            read_raw_csv, write_csv)

COLUMNS = ("time_ns", "flow_id", "src", "rate_gbps", "note")


def cell_by_cell(path: Path, columns, rows) -> None:
    """The reference: every cell through its formatter, a row at a time."""
    fmts = [_fmt_time if c == "time_ns" else _fmt for c in columns]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            values = r if isinstance(r, tuple) else [r[c] for c in columns]
            w.writerow([f(v) for f, v in zip(fmts, values)])


def awkward_rows(n: int, seed: int = 7) -> list[tuple]:
    """Times on and between 0.1 ns steps (ties of the rounding too), integral
    ones, huge ones; rates small, large and past 1e15; ids ints or ""; texts
    with commas and quotes."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        t = rnd.choice([rnd.uniform(0, 1e7), rnd.randrange(10**9) / 10, rnd.randrange(10**8) / 20,
                        i + 0.05, i + 0.25, float(i), 1e17 + i * 1e3, 123456789012.35])
        rate = rnd.choice([rnd.uniform(0, 400), rnd.random() * 1e-9, 2e15 + i, 0.0, 100.0])
        fid = rnd.choice([i, ""])
        rows.append((t, fid, f"h{i % 7}", rate, rnd.choice(["a", "b,c", 'q"x', ""])))
    return rows


@pytest.mark.parametrize("as_dicts", [False, True])
def test_write_csv_writes_every_cell_as_its_formatter_does(tmp_path, monkeypatch, as_dicts):
    monkeypatch.setattr(results_io, "WRITE_CHUNK_ROWS", 97)   # rows across chunks
    rows = awkward_rows(1000)
    if as_dicts:
        rows = [dict(zip(COLUMNS, r)) for r in rows]
    cell_by_cell(tmp_path / "ref.csv", COLUMNS, rows)
    write_csv(tmp_path / "got.csv", COLUMNS, iter(rows))
    assert (tmp_path / "got.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()


def test_write_csv_columns_of_mixed_or_odd_cells_go_cell_by_cell(tmp_path):
    """Ints and floats in a column, bools, None, negative and integer times:
    each as its formatter writes it (no column-wide shortcut applies)."""
    rows = [(-0.04, 1, True, 3, None), (7, 2.5, False, 4.0, 1.25), (3.0, "", "x", 1e16, 2),
            (2**60, 3, "", -1.5e-7, "y")]
    cell_by_cell(tmp_path / "ref.csv", COLUMNS, rows)
    write_csv(tmp_path / "got.csv", COLUMNS, rows)
    assert (tmp_path / "got.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()


def test_write_csv_times_of_zero_either_sign(tmp_path):
    rows = [(-0.0, 1, "a", 1.0, ""), (0.0, 2, "b", 2.0, ""), (0.04, 3, "c", 3.0, "")]
    cell_by_cell(tmp_path / "ref.csv", COLUMNS, rows)
    write_csv(tmp_path / "got.csv", COLUMNS, rows)
    assert (tmp_path / "got.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()


def test_write_csv_of_no_rows_is_its_header(tmp_path):
    write_csv(tmp_path / "x.csv", COLUMNS, [])
    assert (tmp_path / "x.csv").read_bytes() == ",".join(COLUMNS).encode() + b"\r\n"


def row_at_a_time(path: Path, kind: str) -> list[dict]:
    """The reference reading: the csv module, then each row's cells converted."""
    cols = results_io.RAW_COLUMNS[kind]
    rows = list(csv.reader(path.read_text().splitlines()))
    order = [n for n, _ in cols]
    first = [c.strip() for c in rows[0]] if rows else []
    index = {n: i for i, n in enumerate(order)}
    if first and first[0] and not results_io._numeric(first[0]):
        if all(n in first for n in order):
            index = {n: first.index(n) for n in order}
        rows = rows[1:]
    out = []
    for r in rows:
        try:
            out.append({n: results_io._converter(k)(r[index[n]]) for n, k in cols})
        except (IndexError, ValueError):
            continue
    return out


@pytest.mark.parametrize("lines", [
    ["t_ns,flow_id,acked_bytes", "10,1,100", "", "12,1,200", "13,2"],        # short and empty lines
    ["5,1,100", " 6 , 2 , 300 ", "7,1,1e3", "8,1,7.0"],              # blanks; _int's float fallback
    ["acked_bytes,t_ns,flow_id", "100,10,1", "oops,11,1", "300,12,2"],      # reordered; a bad cell
    ["9,1,100", "10,1,20"],
    [],
])
def test_raw_logs_read_as_columns_as_a_row_at_a_time(tmp_path, lines):
    p = tmp_path / "h1.flows.csv"
    p.write_text("".join(line + "\n" for line in lines))
    want = row_at_a_time(p, "flows")
    assert read_raw_csv(p, "flows") == want
    cols = read_raw_columns(p, "flows")
    assert list(cols) == ["t_ns", "flow_id", "acked_bytes"]
    assert [dict(zip(cols, v)) for v in zip(*cols.values())] == want


def test_raw_log_with_quotes_is_read_by_the_csv_module(tmp_path):
    p = tmp_path / "s1.events.csv"
    p.write_text('1,2,3,"drop:random,loss",4.5\n2,2,3,ecn_mark,100\n')
    assert read_raw_csv(p, "events") == row_at_a_time(p, "events")
    assert read_raw_csv(p, "events")[0]["event"] == "drop:random,loss"


def test_a_missing_raw_log_reads_as_empty_columns(tmp_path):
    assert read_raw_columns(tmp_path / "none.csv", "qdepth") == {
        "t_ns": [], "port": [], "priority": [], "depth_bytes": []}
    assert read_raw_csv(tmp_path / "none.csv", "qdepth") == []


@pytest.mark.parametrize("n", [0, 1, 5, 4000])
def test_last_time_ns_is_the_latest_of_a_time_sorted_csv(tmp_path, monkeypatch, n):
    monkeypatch.setattr(results_io, "TAIL_BYTES", 200)     # a tail that starts mid-line
    rows = sorted(awkward_rows(n, seed=n), key=lambda r: r[0])
    write_csv(tmp_path / "x.csv", COLUMNS, rows)
    times = [r["time_ns"] for r in results_io.read_result_csv(tmp_path / "x.csv")]
    assert last_time_ns(tmp_path / "x.csv") == (max(times) if times else None)


def test_last_time_ns_of_no_file_or_no_time_column(tmp_path):
    assert last_time_ns(tmp_path / "none.csv") is None
    write_csv(tmp_path / "x.csv", ("a", "b"), [(1, 2)])
    assert last_time_ns(tmp_path / "x.csv") is None
