"""The schema layer: every shipped file loads through it, process configs
survive the runner -> JSON -> process round trip, errors are one line, and
the topology layers import only downwards."""
from __future__ import annotations

import subprocess
import sys

import pytest

from emulator.experiment.dilation import with_dilation
from emulator.errors import ConfigError
from emulator.experiment.agents import agent_configs
from emulator.experiment.model import load_experiment
from emulator.experiment.servers import server_configs
from emulator.schema.agent import CollectiveAgentConfig, HostAgentConfig, StorageAgentConfig
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.load import load_json, parse_yaml, read_yaml, validate
from emulator.schema.switch import SwitchConfig
from emulator.schema.topology import FabricSpec
from emulator.topo import load_fabric
from tests.conftest import REPO

TOPOLOGIES = sorted((REPO / "topologies").glob("*.yaml"))
EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: p.name)
def test_every_topology_file_loads(path):
    assert isinstance(validate(FabricSpec, read_yaml(path, "topology file"), path), FabricSpec)
    assert load_fabric(path).hosts()


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_every_experiment_file_loads(path):
    assert isinstance(validate(ExperimentSpec, read_yaml(path, "experiment file"), path),
                      ExperimentSpec)
    exp = load_experiment(path)
    assert exp.flows or exp.workload is not None


def test_host_agent_configs_round_trip_through_json(tmp_path):
    exp = load_experiment(REPO / "experiments" / "multitenant-nic-vs-dpu.yaml")
    for name, cfg in agent_configs(exp, tmp_path, 123).items():
        cfg.write(tmp_path / f"{name}.json")
        assert HostAgentConfig.load(tmp_path / f"{name}.json") == cfg


def test_server_agent_configs_round_trip_through_json(tmp_path):
    exp = with_dilation(load_experiment(REPO / "experiments" / "checkpoint-separate.yaml"),
                        10000)                                          # the file says auto
    kinds = set()
    for name, cfg in server_configs(exp, tmp_path, 0).items():
        cfg.write(tmp_path / f"{name}.json")
        assert type(cfg).load(tmp_path / f"{name}.json") == cfg
        kinds.add(type(cfg))
    assert kinds == {CollectiveAgentConfig, StorageAgentConfig}


@pytest.mark.parametrize("text,field,words", [
    ('{"name": "s1", "device_id": 1, "grpc_port": 1, "ports": []}', None, ()),
    ('{"name": "s1", "device_id": 1, "grpc_port": 1, "ports": [], "colour": 1}', "colour",
     ("unknown field", "device_id")),
    ('{"name": "s1", "device_id": 1, "grpc_port": 1, "ports": [{"port_no": 255, "ifname": "x",'
     ' "rate_bps": 1, "delay_ns": 0}]}', "ports[0].port_no", ("<= 254",)),
    ('{"name": "s1", "device_id": "1", "grpc_port": 1, "ports": []}', "device_id", ("integer",)),
    ('{"name": "s1"', "", ("JSON",)),
])
def test_process_config_errors_are_one_line(tmp_path, text, field, words):
    path = tmp_path / "sw.json"
    path.write_text(text)
    if field is None:
        assert SwitchConfig.load(path).name == "s1"
        return
    with pytest.raises(ConfigError) as e:
        load_json(SwitchConfig, path)
    assert e.value.file == str(path) and e.value.field == field and "\n" not in str(e.value)
    assert all(w in e.value.reason for w in words), e.value.reason


@pytest.mark.parametrize("data", [b"\xff\xfe", None])
def test_unreadable_files_are_one_line(tmp_path, data):
    path = tmp_path / "x.yaml"
    if data is None:
        path.mkdir()                                # a directory, not a file
    else:
        path.write_bytes(data)                      # not UTF-8
    with pytest.raises(ConfigError, match="cannot read topology file") as e:
        load_fabric(path)
    assert "\n" not in str(e.value)


def test_union_errors_name_the_branch_meant():
    with pytest.raises(ConfigError) as e:
        parse_yaml("a: 1\na: 2\n", "f.yaml")
    assert e.value.field == "line 2"
    from emulator.schema.workload import parse_workload
    with pytest.raises(ConfigError) as e:
        parse_workload({"tests": [{"collective": "all_reduce", "sizes": {"min_bytes": 8}}]}, "f")
    assert e.value.field == "workload.tests[0].sizes.max_bytes" and e.value.reason == "required"


def test_topology_layers_import_only_downwards():
    """graph imports nothing of the package but wire and the schema's
    vocabulary; the schema of a topology file does not need the builder;
    importing a layer does not import the layers above it."""
    code = ("import sys; import emulator.topo.{mod}; "
            "print(sorted(m for m in sys.modules if m.startswith('emulator.')))")
    above = {"graph": {"emulator.topo.addressing", "emulator.topo.routes", "emulator.topo.servers",
                       "emulator.topo.build", "emulator.schema.topology"},
             "addressing": {"emulator.topo.build", "emulator.topo.servers"},
             "routes": {"emulator.topo.build", "emulator.topo.servers"}}
    for mod, forbidden in above.items():
        out = subprocess.run([sys.executable, "-c", code.format(mod=mod)], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
        assert not forbidden & set(eval(out)), (mod, out)
    graph = (REPO / "emulator" / "topo" / "graph.py").read_text()
    assert {ln.split()[1] for ln in graph.splitlines() if ln.startswith(("from emulator", "import emulator"))} \
        == {"emulator.wire", "emulator.schema.vocabulary"}


# ---------------------------------------------------------------- limits

TOPO = {"name": "t", "clos": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1,
                              "host_link": {"rate_gbps": 100, "delay_us": 1},
                              "fabric_link": {"rate_gbps": 100, "delay_us": 1}}}


def _experiment(**over):
    return {"name": "x", "topology": TOPO, "traffic": [{"src": "h1", "dst": "h2", "size_bytes": 1000}], **over}


@pytest.mark.parametrize("over,field,words", [
    ({"traffic": [{"src": "h1", "dst": "h2", "size_bytes": 10 ** 20}]}, "traffic[0].size_bytes", ("2**31",)),
    ({"traffic": [{"src": "h1", "dst": "h2", "size_bytes": 1000, "start_us": 1e20}]}, "traffic[0].start_us",
     ("a day",)),
    ({"limits": {"wall_s": 1e9}}, "limits.wall_s", ("at most 86400",)),
    ({"workload": {"tests": [{"collective": "all_reduce", "sizes": [10 ** 18]}]}}, "workload.tests[0].sizes[0]",
     ("this machine",)),
    ({"storage": {"block_bytes": 1 << 31, "blocks": 4096}}, "storage.blocks", ("disk",)),
])
def test_values_past_the_machine_are_refused(over, field, words):
    with pytest.raises(ConfigError) as e:
        validate(ExperimentSpec, _experiment(**over), "x.yaml")
    assert e.value.field == field and "\n" not in str(e.value), str(e.value)
    assert all(w in e.value.reason for w in words), e.value.reason


@pytest.mark.parametrize("path,value,words", [
    (("clos", "host_link", "rate_gbps"), 1e9, ("100 Tbit/s",)),
    (("clos", "host_link", "rate_gbps"), 1e-9, ("1 kbit/s",)),
    (("clos", "fabric_link", "delay_us"), 1e7, ("at most",)),
])
def test_link_rates_and_delays_have_sane_ranges(path, value, words):
    import copy
    data = copy.deepcopy(TOPO)
    data[path[0]][path[1]][path[2]] = value
    with pytest.raises(ConfigError) as e:
        validate(FabricSpec, data, "t.yaml")
    assert e.value.field == ".".join(path) and all(w in e.value.reason for w in words), str(e.value)


def test_server_counts_are_bounded_before_expansion():
    data = {"name": "t", "servers": {"count": 10 ** 9, "gpus_per_server": 1,
                                     "nic_link": {"rate_gbps": 100, "delay_us": 1}},
            "rail_optimized": {"spines": 1, "fabric_link": {"rate_gbps": 100, "delay_us": 1}}}
    with pytest.raises(ConfigError, match="servers.count: must be at most 64262"):
        validate(FabricSpec, data, "t.yaml")
    data["servers"].update(count=1000, gpus_per_server=100)
    with pytest.raises(ConfigError, match="servers.gpus_per_server: 1000 servers x 100 NICs"):
        validate(FabricSpec, data, "t.yaml")


def test_flows_together_must_fit_memory(monkeypatch):
    from emulator.experiment.model import experiment_from_dict
    from emulator.schema import limits
    monkeypatch.setattr(limits, "physical_memory_bytes", lambda: 8 << 20)   # an 8 MiB machine
    ok = _experiment(traffic=[{"src": "h1", "dst": "h2", "size_bytes": 1 << 20}])
    monkeypatch.setattr(limits, "NODE_MEMORY_BYTES", 1)
    experiment_from_dict(ok, "x.yaml")
    many = _experiment(traffic=[{"src": "h1", "dst": "h2", "size_bytes": 1 << 20}] * 3)
    with pytest.raises(ConfigError, match=r"traffic: 3 flows need 6.0 MiB .* 4.0 MiB"):
        experiment_from_dict(many, "x.yaml")
    monkeypatch.setattr(limits, "NODE_MEMORY_BYTES", 2 << 20)
    with pytest.raises(ConfigError, match="topology: 5 switches and hosts"):
        experiment_from_dict(ok, "x.yaml")


@pytest.mark.parametrize("data,field,words", [
    (b"name: t\n# caf\xe9\n", "line 2", ("not UTF-8", "0xe9")),
    (b"name: t\n\x00\n", "line 2", ("U+0000",)),
    ("name: t\n".encode("utf-16"), "line 1", ("not UTF-8",)),
])
def test_non_utf8_yaml_names_the_line(tmp_path, data, field, words):
    path = tmp_path / "x.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as e:
        read_yaml(path, "experiment file")
    assert e.value.field == field and "\n" not in str(e.value) and all(w in e.value.reason for w in words)


def test_the_wall_limit_grows_with_the_dilation_beyond_its_reference():
    from emulator.experiment.dilation import with_dilation
    from emulator.experiment.model import load_experiment
    from tests.conftest import REPO
    exp = load_experiment(REPO / "experiments" / "demo.yaml")
    for d, want in ((2000, 1.0), (10000, 1.0), (32000, 3.2)):
        assert with_dilation(exp, d).wall_limit_s == exp.spec.limits.wall_s * want
