"""bench/rail_compare.py: the runs it makes of its variants, what it refuses
before the first run, and the table it reads out of the summaries."""
from __future__ import annotations

import importlib.util

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("rail_compare", REPO / "bench" / "rail_compare.py")
rc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rc)
EXP = REPO / "experiments" / "allreduce-rail-64.yaml"


def test_every_variant_under_every_cc_with_the_common_sets_first():
    plan = rc.runs(["ring", "ring-4ch"], ["dcqcn", "hpcc"], ["limits.wall_s=600"])
    assert [(v, c) for v, c, _ in plan] == [("ring", "dcqcn"), ("ring", "hpcc"),
                                            ("ring-4ch", "dcqcn"), ("ring-4ch", "hpcc")]
    assert plan[3][2] == ("limits.wall_s=600", "workload.channels=4", "cc=hpcc",
                          "qos.ecn.enabled=false")
    rc.validate(EXP, plan)          # the shipped 64-GPU file takes all four


def test_bad_runs_are_refused_before_any_starts(tmp_path, capsys):
    out = tmp_path / "out"
    assert rc.main([str(EXP), "--out", str(out), "--variants", "ring,rings"]) == 2
    assert "--variants: 'rings' is none of" in capsys.readouterr().err
    assert rc.main([str(EXP), "--out", str(out), "--set", "workload.channels=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "workload.channels" in err[0]
    assert not out.exists()                                # nothing ran


def test_table_reads_busbw_wrong_and_each_spine_s_bytes():
    def summary(busbw, spine_bytes):
        return {"complete": True,
                "collectives": {"results": [
                    {"size_bytes": 1 << 20, "busbw_GBps": busbw, "wrong": 0, "inplace_wrong": 0},
                    {"size_bytes": 4 << 20, "busbw_GBps": busbw + 1, "wrong": 0,
                     "inplace_wrong": 1}]},
                "ports": [{"node": "spine1", "role": "spine", "tx_bytes": spine_bytes},
                          {"node": "spine1", "role": "spine", "tx_bytes": spine_bytes},
                          {"node": "spine2", "role": "spine", "tx_bytes": 0},
                          {"node": "leaf1", "role": "leaf", "tx_bytes": 10**9}]}
    rows = [("ring", "dcqcn", rc.row_of(summary(10.0, 2_000_000)), 61.2),
            ("ring-4ch", "hpcc", rc.row_of(summary(30.5, 0)), 70.0),
            ("tree", "hpcc", rc.row_of(None), 3.0)]
    assert rows[0][2]["spines"] == {"spine1": 4_000_000, "spine2": 0}
    lines = rc.table(rows).splitlines()
    assert lines[0] == ("| variant | cc | busbw 1 MiB (GB/s) | busbw 4 MiB (GB/s) | #wrong | "
                        "spine1 (MB) | spine2 (MB) | wall (s) |")
    assert lines[2] == "| ring | dcqcn | 10.00 | 11.00 | 1 | 4.0 | 0.0 | 61 |"
    assert lines[3] == "| ring-4ch | hpcc | 30.50 | 31.50 | 1 | 0.0 | 0.0 | 70 |"
    assert lines[4] == "| tree | hpcc | - | - | failed | 0.0 | 0.0 | 3 |"
