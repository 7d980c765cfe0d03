"""What a user writes (pytest, with ai-fabric-emulator installed; as root):
with my PFC thresholds, a 5-to-1 incast drops nothing in the lossless class."""
import pytest

MY_FABRIC = {"name": "my-fabric", "clos": {
    "spines": 2, "leaves": 2, "hosts_per_leaf": 3,
    "host_link": {"rate_gbps": 100, "delay_us": 1}, "fabric_link": {"rate_gbps": 100, "delay_us": 1}}}


@pytest.mark.parametrize("xoff_bytes", [20_000, 60_000])
def test_5_to_1_incast_is_lossless(run_experiment, fabric_target, xoff_bytes):
    res = run_experiment({
        "name": "my-incast", "topology": MY_FABRIC, "target": fabric_target, "dilation": 4000,
        "switch": {"buffer_bytes": 300_000},
        "qos": {"pfc": {"enabled": True, "xoff_bytes": xoff_bytes}, "ecn": {"enabled": False}},
        "traffic": [{"src": f"h{i}", "dst": "h1", "size_bytes": 262_144} for i in range(2, 7)]})
    assert res.complete and not res.fell_behind
    assert res.lossless_drops() == 0 and res.retransmissions() == 0
    assert res.pauses(node="leaf1") > 0           # PFC did the work
