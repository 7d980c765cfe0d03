"""The schema layer: every shipped file loads through it, process configs
survive the runner -> JSON -> process round trip, errors are one line, and
the topology layers import only downwards."""
from __future__ import annotations

import subprocess
import sys

import pytest

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
    exp = load_experiment(REPO / "experiments" / "checkpoint-separate.yaml")
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
    """graph imports nothing of the package but wire/errors; the schema of a
    topology file does not need the builder; importing a layer does not
    import the layers above it."""
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
    assert [ln for ln in graph.splitlines() if ln.startswith(("from emulator", "import emulator"))] \
        == ["from emulator.wire import CPU_PORT, MAX_SWITCH_PORTS  # noqa: F401  (re-exported limits)"]
