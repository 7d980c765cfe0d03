"""Generated traffic (``pattern: poisson``): the web-search CDF, Poisson
arrivals at the asked load per host link, determinism, and the one-line
errors of a bad entry."""
from __future__ import annotations

from typing import get_args

import pytest

from emulator.errors import ConfigError
from emulator.experiment.dilation import CAL_FLOW_BYTES, calibration_experiment, with_dilation
from emulator.experiment.flow_sizes import DISTRIBUTIONS, WEBSEARCH, FlowSizeCdf
from emulator.experiment.model import experiment_from_dict
from emulator.experiment.plan import describe_experiment
from emulator.experiment.traffic_gen import (
    generated_summary, host_rate_bps, mean_interarrival_ns, poisson_flows,
)
from emulator.schema.experiment import FlowSizeDistribution, PoissonTrafficSpec
from emulator.topo import load_fabric
from tests.conftest import REPO

WEB = DISTRIBUTIONS["websearch"]
SOURCE = REPO / "experiments" / "unit.yaml"


def entry(**over) -> dict:
    return {"pattern": "poisson", "distribution": "websearch", "load": 0.5, "duration_us": 200,
            "seed": 1, **over}


def experiment(traffic, topology="clos-2x2-h3.yaml", **over):
    return experiment_from_dict({"name": "gen", "topology": f"../topologies/{topology}",
                                 "dilation": 1000, "traffic": traffic, **over}, SOURCE)


def spec(**over) -> PoissonTrafficSpec:
    return PoissonTrafficSpec.model_validate(entry(**over))


# ------------------------------------------------------------------ the CDF

def test_the_websearch_cdf_is_hpccs_file():
    # alibaba-edu/High-Precision-Congestion-Control traffic_gen/WebSearch_distribution.txt
    text = ("0 0\n10000 15\n20000 20\n30000 30\n50000 40\n80000 53\n200000 60\n1000000 70\n"
            "2000000 80\n5000000 90\n10000000 97\n30000000 100\n")
    assert WEBSEARCH == tuple((int(a), float(b)) for a, b in (ln.split() for ln in text.splitlines()))
    assert WEB.mean() == 1_711_250               # custom_rand.py getAvg, by hand: see flow_sizes.py


def test_sizes_are_the_cdf_inverted_linearly():
    assert WEB.size_at(0) == 0 and WEB.size_at(1) == 30_000_000
    assert WEB.size_at(0.15) == 10_000 and WEB.size_at(0.53) == 80_000
    assert WEB.size_at(0.075) == 5_000                           # halfway up the first segment
    assert WEB.size_at(0.465) == pytest.approx(50_000 + 30_000 * 6.5 / 13)


def test_the_clamped_mean_by_hand():
    assert WEB.clamped_mean() == pytest.approx(WEB.mean())
    # capped at 10 kB: 15 % uniform on 0..10 kB (mean 5 kB), 85 % at 10 kB
    assert WEB.clamped_mean(high=10_000) == pytest.approx(0.15 * 5_000 + 0.85 * 10_000)
    # scaled by 0.01 and at least 50 B: the first segment is 0..100 B, half of it below 50 B
    low = 0.15 * (0.5 * 50 + 0.5 * 75)
    rest = sum((y1 - y0) / 100 * (x0 + x1) / 2 * 0.01
               for (x0, y0), (x1, y1) in zip(WEBSEARCH[1:], WEBSEARCH[2:]))
    assert WEB.clamped_mean(0.01, low=50) == pytest.approx(low + rest)


def test_a_cdf_must_rise_from_0_to_100_percent():
    with pytest.raises(ValueError, match="100"):
        FlowSizeCdf("x", ((0, 0), (10, 90)))
    with pytest.raises(ValueError, match="increase"):
        FlowSizeCdf("x", ((0, 0), (10, 50), (10, 100)))


def test_the_schema_names_every_distribution():
    assert set(get_args(FlowSizeDistribution)) == set(DISTRIBUTIONS)


def test_drawn_sizes_follow_the_cdf():
    fabric = load_fabric(REPO / "topologies/clos-2x2-h3.yaml")
    # 1 B .. 30 kB (x 0.001): tens of thousands of flows in 2 ms at 25 Gbps
    flows = poisson_flows(spec(size_scale=0.001, duration_us=4000), fabric)
    sizes = sorted(f.size_bytes for f in flows)
    assert len(sizes) > 20_000
    for size, percent in WEBSEARCH[1:-1]:
        below = sum(1 for s in sizes if s <= size * 0.001) / len(sizes)
        assert below == pytest.approx(percent / 100, abs=0.012), size
    assert sizes[0] >= 1 and sizes[-1] <= 30_000


# ------------------------------------------------------------ arrivals, load

def test_the_mean_interarrival_is_hpccs():
    # traffic_gen.py: avg_inter_arrival = 1 / (bandwidth * load / 8 / avg) s
    t = spec(load=0.3)
    assert mean_interarrival_ns(t, 25e9) == pytest.approx(1e9 / (25e9 * 0.3 / 8 / 1_711_250))


def test_every_host_link_is_offered_the_load_at_its_own_rate():
    # explicit-3leaf: host links of 100, 100, 200, 50, 50 Gbps
    exp = experiment([entry(load=0.4, size_scale=0.002, duration_us=3000)],
                     topology="explicit-3leaf.yaml")
    g, = generated_summary(exp)
    assert g["flows"] > 20_000 and g["offered_load"] == pytest.approx(0.4, rel=0.04)
    for h in ("h1", "h2", "h3", "h4", "h5"):
        sent = sum(f.size_bytes for f in exp.flows if f.src == h)
        load = sent * 8 / (host_rate_bps(exp.fabric, h) * 3000e-6)
        assert load == pytest.approx(0.4, rel=0.17), h        # 3 sigma at a 50 Gbps host's ~2000 flows
    # ... and the gaps between a host's arrivals are exponential with HPCC's mean
    starts = sorted(f.start_fabric_ns for f in exp.flows if f.src == "h3")
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    mean = mean_interarrival_ns(exp.spec.traffic[0], 200e9)
    assert sum(gaps) / len(gaps) == pytest.approx(mean, rel=0.05)
    assert sum(1 for x in gaps if x > mean) / len(gaps) == pytest.approx(0.368, abs=0.03)   # e^-1


def test_the_load_holds_for_full_size_flows_over_many_of_them():
    # unscaled web search (mean 1.7 MB, heavy-tailed: the sum's relative spread
    # is sqrt(E[S^2] / E[S]^2 / n) = sqrt(6.1 / n), 2.8 % here: within 3 sigma),
    # so a long window (more bytes than an experiment may hold: the generator alone)
    fabric = load_fabric(REPO / "topologies/clos-2x2-h3.yaml")
    flows = poisson_flows(spec(load=0.7, duration_us=1_000_000), fabric)
    sent = sum(f.size_bytes for f in flows)
    assert len(flows) > 7_000
    assert sent * 8 / (6 * 25e9 * 1.0) == pytest.approx(0.7, rel=0.085)
    assert sent / len(flows) == pytest.approx(1_711_250, rel=0.085)


def test_destinations_are_uniform_among_the_other_hosts():
    exp = experiment([entry(size_scale=0.001, duration_us=2000)])
    hosts = [h.name for h in exp.fabric.hosts()]
    for src in hosts:
        dsts = [f.dst for f in exp.flows if f.src == src]
        assert src not in dsts
        for d in set(hosts) - {src}:
            assert dsts.count(d) / len(dsts) == pytest.approx(1 / 5, abs=0.03)


def test_arrivals_fall_in_the_window_and_sizes_in_their_bounds():
    exp = experiment([entry(start_us=50, duration_us=500, size_scale=0.1, min_bytes=1024,
                            max_bytes=65536, op="send")])
    assert exp.flows
    assert all(50_000 <= f.start_fabric_ns < 550_000 for f in exp.flows)
    assert all(1024 <= f.size_bytes <= 65536 and f.op == "send" for f in exp.flows)
    # the clamps move the mean the interarrival is computed from, not the load
    g, = generated_summary(exp)
    assert g["expected_mean_size_bytes"] == pytest.approx(WEB.clamped_mean(0.1, 1024, 65536), abs=0.1)


# ------------------------------------------------------------ determinism

def test_a_seed_gives_the_same_flows_and_another_seed_others():
    a = experiment([entry(seed=7)]).flows
    assert a == experiment([entry(seed=7)]).flows
    assert [(f.src, f.dst, f.size_bytes, f.start_fabric_ns) for f in a] != \
        [(f.src, f.dst, f.size_bytes, f.start_fabric_ns) for f in experiment([entry(seed=8)]).flows]
    # pinned: the generator is the same on every machine and Python
    f0 = poisson_flows(spec(seed=7), load_fabric(REPO / "topologies/clos-2x2-h3.yaml"))[0]
    assert (f0.src, f0.dst) == (a[0].src, a[0].dst) and f0.size_bytes == a[0].size_bytes


def test_flows_are_in_time_order_and_become_ordinary_flows():
    exp = experiment([{"src": "h1", "dst": "h4", "size_bytes": 4096},
                      entry(size_scale=0.01)])
    plain, *gen = exp.flows
    assert (plain.entry, plain.flow_id, plain.src_qpn) == (0, 0, 0x100)
    assert gen and all(f.entry == 1 for f in gen)
    assert [f.flow_id for f in exp.flows] == list(range(len(exp.flows)))
    assert [f.start_fabric_ns for f in gen] == sorted(f.start_fabric_ns for f in gen)
    for h in (h.name for h in exp.fabric.hosts()):        # one QP per flow end, numbered on
        qpns = [f.src_qpn for f in exp.flows if f.src == h] + [f.dst_qpn for f in exp.flows if f.dst == h]
        assert sorted(qpns) == list(range(0x100, 0x100 + len(qpns)))


def test_a_host_added_leaves_the_others_flows_alone():
    few = experiment([entry(hosts=["h1", "h2", "h4"])]).flows
    assert {f.src for f in few} | {f.dst for f in few} <= {"h1", "h2", "h4"}
    more = experiment([entry(hosts=["h1", "h2", "h4", "h5"])]).flows
    # same arrivals and sizes per source; only the destinations are drawn among more hosts
    for src in ("h1", "h2", "h4"):
        assert [(f.start_fabric_ns, f.size_bytes) for f in few if f.src == src] == \
            [(f.start_fabric_ns, f.size_bytes) for f in more if f.src == src]


# ------------------------------------------------------------ what it says

def test_the_plan_and_the_summary_say_what_was_offered():
    exp = with_dilation(experiment([entry(size_scale=0.05, duration_us=2000)]), 1000)
    g, = generated_summary(exp)
    assert g["hosts"] == 6 and g["flows"] == len(exp.flows) and g["load"] == 0.5
    assert g["offered_load_min"] <= g["offered_load"] <= g["offered_load_max"]
    line = next(ln for ln in describe_experiment(exp) if "poisson" in ln)
    assert f"{len(exp.flows)} flows" in line and "offered load" in line


def test_the_calibration_copy_keeps_the_load_on_a_short_window():
    exp = experiment([entry(size_scale=0.5, duration_us=20_000)], dilation="auto")
    cal = calibration_experiment(exp)
    t = cal.spec.traffic[0]
    assert cal is not exp and t.load == 0.5 and t.max_bytes == CAL_FLOW_BYTES
    # 1 MiB offered per 25 Gbps host link at 50 %: 671 us
    assert t.duration_us == pytest.approx((1 << 20) * 8 / 12.5e9 * 1e6)
    assert generated_summary(cal)[0]["offered_load"] == pytest.approx(0.5, rel=0.3)


def test_the_shipped_experiment_is_a_few_hundred_flows_at_half_load():
    from emulator.experiment.model import load_experiment
    exp = load_experiment(REPO / "experiments" / "websearch-dcqcn.yaml")
    g, = generated_summary(exp)
    assert 100 <= g["flows"] <= 400 and g["load"] == 0.5
    assert g["offered_load"] == pytest.approx(0.5, abs=0.1)


# ------------------------------------------------------------ errors

@pytest.mark.parametrize("over,field,words", [
    ({"load": 0}, "traffic[0].load", ("> 0",)),
    ({"load": 1.5}, "traffic[0].load", ("<= 1",)),
    ({"load": "50%"}, "traffic[0].load", ("a number",)),
    ({"distribution": "hadoop"}, "traffic[0].distribution", ("websearch",)),
    ({"duration_us": 0}, "traffic[0].duration_us", ("> 0",)),
    ({"duration_us": None}, "traffic[0].duration_us", ("required",)),
    ({"duration_us": "2ms"}, "traffic[0].duration_us", ("a number",)),
    ({"size_scale": 0}, "traffic[0].size_scale", ("> 0",)),
    ({"seed": -1}, "traffic[0].seed", (">= 0",)),
    ({"seed": 1.5}, "traffic[0].seed", ("integer",)),
    ({"min_bytes": 0}, "traffic[0].min_bytes", ("> 0",)),
    ({"min_bytes": 4096, "max_bytes": 1024}, "traffic[0].max_bytes", (">= min_bytes",)),
    ({"max_bytes": 1 << 40}, "traffic[0].max_bytes", ("2**31",)),
    ({"size_bytes": 4096}, "traffic[0].size_bytes", ("unknown field", "distribution")),
    ({"src": "h1"}, "traffic[0].src", ("unknown field",)),
    ({"expect": "dropped"}, "traffic[0].expect", ("unknown field",)),
    ({"hosts": ["h1"]}, "traffic[0].hosts", ("at least 2",)),
    ({"hosts": ["h1", "h9"]}, "traffic[0].hosts[1]", ("not a host",)),
    ({"hosts": ["h1", "h2", "h1"]}, "traffic[0].hosts[2]", ("twice",)),
    ({"size_scale": 1e-6, "duration_us": 1e6}, "traffic[0].duration_us", ("flows, more than",)),
])
def test_a_bad_entry_is_one_line_naming_its_field(over, field, words):
    t = {k: v for k, v in entry(**over).items() if v is not None}
    with pytest.raises(ConfigError) as e:
        experiment([t])
    assert e.value.field == field and "\n" not in str(e.value), str(e.value)
    assert all(w in e.value.reason for w in words), e.value.reason


def test_a_missing_field_and_an_unknown_pattern():
    with pytest.raises(ConfigError) as e:
        experiment([{"pattern": "poisson", "load": 0.5, "duration_us": 10}])
    assert (e.value.field, e.value.reason) == ("traffic[0].distribution", "required")
    with pytest.raises(ConfigError) as e:
        experiment([{"pattern": "incast", "size_bytes": 1}])
    assert e.value.field == "traffic[0].pattern" and "all-to-all, poisson" in e.value.reason


def test_a_host_alone_on_its_plane_has_nobody_to_send_to():
    with pytest.raises(ConfigError) as e:
        experiment([entry(hosts=["s1n0", "s2n0", "s1st"])],
                   topology="rail-2x4-storage-separate.yaml")
    assert e.value.field == "traffic[0].hosts" and "s1st" in e.value.reason
    # the default, every host: each plane's hosts send among themselves
    exp = experiment([entry(size_scale=0.01)], topology="rail-2x4-storage-separate.yaml")
    plane = {h.name: h.plane for h in exp.fabric.hosts()}
    assert exp.flows and all(plane[f.src] == plane[f.dst] for f in exp.flows)
