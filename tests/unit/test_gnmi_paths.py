"""gNMI paths, values and link-state windows of the switch's gNMI server, without a fabric."""
from __future__ import annotations

import pytest
from gnmi import gnmi_pb2 as pb

from emulator.clock import NEVER_NS
from emulator.dataplane.gnmi_server.encode import (decode_value, encoding_problem, notification,
                                                   typed_value)
from emulator.dataplane.gnmi_server.leaves import DOWN, UP, DownWindows
from emulator.dataplane.gnmi_server.paths import (PathError, format_path, join, matches,
                                                  parse_elems, parse_path, select)

IF = "/interfaces/interface[name=leaf1-eth1]/state/counters/in-pkts"
Q = "/qos/interfaces/interface[interface-id=leaf1-eth1]/output/queues/queue[name=3]/state/transmit-pkts"


def test_a_path_reads_and_writes_back_as_gnmic_writes_it():
    p = parse_path(IF)
    assert [e.name for e in p.elem] == ["interfaces", "interface", "state", "counters", "in-pkts"]
    assert dict(p.elem[1].key) == {"name": "leaf1-eth1"}
    assert format_path(p) == IF
    odd = "/a/b[k=x/y\\]z][j=1]/c"            # a key value with '/' and an escaped ']'
    elems = parse_elems(odd)
    assert elems[1] == ("b", (("j", "1"), ("k", "x/y]z")))          # keys sorted
    assert format_path(parse_path(odd)) == "/a/b[j=1][k=x/y\\]z]/c"


@pytest.mark.parametrize("bad, why", [("interfaces", "must start with '/'"),
                                      ("/a//b", "empty element"),
                                      ("/a[k]/b", "without '='"),
                                      ("/a[k=v", "unterminated"),
                                      ("/a[k=v]x", "unexpected 'x'")])
def test_a_malformed_path_is_refused_saying_where(bad, why):
    with pytest.raises(PathError, match=why):
        parse_elems(bad)


def test_wildcards_missing_keys_and_ellipsis_select_leaves():
    leaf = parse_elems(Q)
    for pattern, hit in [("/qos", True), ("/qos/interfaces/interface", True),
                         ("/qos/interfaces/interface[interface-id=*]/output", True),
                         ("/qos/interfaces/interface[interface-id=leaf1-eth2]", False),
                         ("/qos/*/interface/output/queues/queue[name=3]", True),
                         ("/qos/.../transmit-pkts", True), ("/.../queue[name=4]", False),
                         ("/interfaces", False), (Q + "/more", False)]:
        assert matches(parse_elems(pattern), leaf) is hit, pattern


def test_select_names_the_unknown_path_and_what_is_served():
    leaves = [parse_elems(IF), parse_elems(Q)]
    assert select(parse_elems("/interfaces"), leaves) == [0]
    assert select(parse_elems("/"), leaves) == [0, 1]
    with pytest.raises(PathError, match=r"unknown path /interfaces/interface\[name=x\].*serves"):
        select(parse_elems("/interfaces/interface[name=x]"), leaves)


def test_a_prefix_joins_its_path_and_only_openconfig_is_served():
    assert join(parse_path("/interfaces"), parse_path("/interface/state")) == \
        parse_elems("/interfaces/interface/state")
    with pytest.raises(PathError, match="origin 'cli'"):
        join(None, pb.Path(origin="cli", elem=[pb.PathElem(name="show")]))
    with pytest.raises(PathError, match="deprecated"):
        join(None, pb.Path(element=["interfaces"]))


def test_values_follow_rfc_7951_in_json_ietf_and_typed_fields_in_proto():
    assert typed_value(12345678901234, pb.JSON_IETF).json_ietf_val == b'"12345678901234"'
    assert typed_value(UP, pb.JSON_IETF).json_ietf_val == b'"UP"'
    assert typed_value(7, pb.PROTO).uint_val == 7 and typed_value(DOWN, pb.PROTO).string_val == DOWN
    for enc in (pb.JSON_IETF, pb.PROTO):
        assert [decode_value(typed_value(v, enc)) for v in (0, 99, UP)] == [0, 99, UP]
    assert encoding_problem(pb.JSON) == "encoding JSON is not supported: ask for JSON_IETF or PROTO"
    assert encoding_problem(pb.PROTO) is None
    n = notification(5, [parse_path(IF)], [3], pb.PROTO)
    assert n.timestamp == 5 and n.update[0].val.uint_val == 3


def test_down_windows_merge_and_give_each_change_at_its_time():
    w = DownWindows([(100, 200), (150, 300), (500, NEVER_NS)])
    assert [w.status(t) for t in (99, 100, 299, 300, 499, 500, 10**15)] == \
        [UP, DOWN, DOWN, UP, UP, DOWN, DOWN]
    assert w.changes(0, 1000) == [(100, DOWN), (300, UP), (500, DOWN)]
    assert w.changes(100, 499) == [(300, UP)]              # (after, until]
    assert [w.next_change_ns(t) for t in (0, 100, 300, 500)] == [100, 300, 500, NEVER_NS]


def test_the_reports_telemetry_figures_read_telemetry_csv(tmp_path):
    from emulator.report.rundata import RunData
    from emulator.report.telemetry_fig import rates, telemetry_figures
    from emulator.rundir import RunDir
    assert rates([(0, 0), (10_000, 125_000), (20_000, 125_000)]) == [(10_000, 100.0), (20_000, 0.0)]
    rd = RunDir(tmp_path)
    q = "/qos/interfaces/interface[interface-id=leaf1-eth1]/output/queues/queue[name=3]/state"
    rd.file(RunDir.TELEMETRY_CSV).write_text(
        "fabric_ns,switch,path,value\n"
        "0,leaf1,/interfaces/interface[name=leaf1-eth1]/state/oper-status,UP\n"
        "0,leaf1,/interfaces/interface[name=leaf1-eth1]/state/counters/out-octets,0\n"
        f"0,leaf1,{q}/fabric-emu/depth-octets,0\n"
        "5000,leaf1,/interfaces/interface[name=leaf1-eth1]/state/oper-status,DOWN\n"
        "10000,leaf1,/interfaces/interface[name=leaf1-eth1]/state/counters/out-octets,125000\n"
        f"10000,leaf1,{q}/fabric-emu/depth-octets,3000\n")
    rate, depth = telemetry_figures(RunData(rd, {}, fabric=None), [])   # reads only rd
    (line, marks) = rate["data"]
    assert (line["name"], line["x"], line["y"]) == ("leaf1 leaf1-eth1", [10.0], [100.0])
    assert marks["x"] == [5.0] and marks["text"] == ["leaf1 leaf1-eth1 DOWN"]
    assert (depth["data"][0]["name"], depth["data"][0]["y"]) == ("leaf1 leaf1-eth1 q3", [0.0, 3.0])


@pytest.mark.parametrize("change, why", [
    ({}, None),
    ({"telemetry": {}}, None),                                    # off: nothing to refuse
    ({"time": "dilated", "dilation": 1000}, "needs virtual time"),
    ({"target": "bmv2"}, "needs the embedded target"),
])
def test_telemetry_is_refused_where_its_samples_could_not_be_exact(tmp_path, change, why):
    from emulator.errors import ConfigError
    from emulator.experiment.model import experiment_from_dict
    from emulator.experiment.telemetry import telemetry_collector, telemetry_problem
    from tests.conftest import REPO
    data = {"name": "t", "topology": str(REPO / "topologies" / "clos-2x2.yaml"), "time": "virtual",
            "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 1000}], "telemetry": {"sample_us": 5}}
    data.update(change)
    exp = experiment_from_dict(data, tmp_path / "t.yaml")
    target = data.get("target", "embedded")
    assert (telemetry_problem(exp, target) is None) == (why is None)
    if why is None:
        assert (telemetry_collector(exp, target) is None) == (exp.spec.telemetry.sample_us is None)
    else:
        with pytest.raises(ConfigError, match=f"t.yaml: telemetry.sample_us: {why}"):
            telemetry_collector(exp, target)


def test_telemetry_paths_are_planned_per_switch_and_one_that_selects_nothing_is_refused(tmp_path):
    from emulator.errors import ConfigError
    from emulator.experiment.model import experiment_from_dict
    from emulator.experiment.telemetry import subscription_plan
    from tests.conftest import REPO

    def exp(paths):
        return experiment_from_dict({
            "name": "t", "topology": str(REPO / "topologies" / "clos-2x2.yaml"), "time": "virtual",
            "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 1000}],
            "telemetry": {"sample_us": 5, "paths": paths}}, tmp_path / "t.yaml")
    plan = subscription_plan(exp(["/interfaces/interface[name=leaf1-eth1]/state", "/qos"]))
    assert plan == {"leaf1": ["/interfaces/interface[name=leaf1-eth1]/state", "/qos"],
                    "leaf2": ["/qos"], "spine1": ["/qos"], "spine2": ["/qos"]}
    with pytest.raises(ConfigError, match=r"t.yaml: telemetry.paths: /qos/nope selects no leaf"):
        subscription_plan(exp(["/qos", "/qos/nope"]))
    with pytest.raises(ConfigError, match=r"telemetry.paths: path '/a\[k': key without '='"):
        subscription_plan(exp(["/a[k"]))
