"""The Python API: one experiment, built in Python, run over a grid of PFC and
ECN settings; one line per run, and sweep.csv. As root:

    sudo .venv/bin/python examples/incast_sweep.py [OUT_DIR]
"""
import sys

import emulator as fe

exp = fe.load_experiment("experiments/incast-pfc.yaml", set={"dilation": 4000})
rows = fe.sweep(exp, {"qos.pfc.xoff_bytes": [20_000, 80_000], "qos.ecn.enabled": [False, True]},
                out=sys.argv[1] if len(sys.argv) > 1 else "results/incast-sweep")
print(f"{'xoff':>7} {'ecn':>5} {'behind':>6} {'p50 us':>8} {'p99 us':>8} {'lossless drops':>14} "
      f"{'pauses':>7} {'marks':>6}")
for r in rows:
    print(f"{r['qos.pfc.xoff_bytes']:>7} {str(r['qos.ecn.enabled']):>5} {str(r['fell_behind']):>6} "
          f"{r['fct_p50_us']:>8.1f} {r['fct_p99_us']:>8.1f} {r['lossless_drops']:>14} "
          f"{r['pauses']:>7} {r['ecn_marks']:>6}")

with fe.Fabric(exp, dilation=10000) as fab:           # a live fabric: look, change, look
    print("h1 -> h6 ping:", fab.ping("h1", "h6"))
    print("leaf1 routes:", len(fab.table_entries("leaf1", "ipv4_lpm")))
    fab.set_qos({"ecn": {"enabled": True, "kmin_bytes": 20_000}})
    print("leaf1 ecn_config entries:", len(fab.table_entries("leaf1", "ecn_config")))
