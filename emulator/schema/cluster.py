"""The ``cluster:`` section of an experiment: a fabric spread over several
machines with Mininet's cluster edition (``emulator/net/cluster.py``).

```yaml
cluster:
  servers:                          # the machines; the runner's own is "localhost"
    - {name: a, address: localhost}
    - {name: b, address: 10.0.0.2, user: root}   # reached over ssh as user
  placement: pods                   # pods | switch-bin | {node: server, ...}
  link: ssh                         # how a link between two servers is carried: ssh | gre
  ssh_options: [-i, /root/.ssh/fabric_key]      # added to every ssh command
```

Placement: ``pods`` puts pod k (its leaves and spines) on server k modulo
their number, the super spines round robin, each GPU server with the leaf
of its NIC 0; ``switch-bin`` is Mininet's ``SwitchBinPlacer`` (switches in
even bins, hosts beside their switch); a mapping places nodes by name, and
hosts it leaves out go with their leaf.
"""
from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, model_validator

from emulator.schema.limits import name_problem
from emulator.schema.load import FieldError, StrictSpec

LOCAL = "localhost"


class ClusterServerSpec(StrictSpec):
    name: str
    address: str = Field(min_length=1)       # "localhost": the machine the runner is on
    user: str = Field("root", min_length=1)

    @model_validator(mode="after")
    def _name(self):
        if (why := name_problem(self.name)) is not None:
            raise FieldError("name", why)
        return self


class ClusterSpec(StrictSpec):
    servers: list[ClusterServerSpec] = Field(min_length=2)
    placement: Union[Literal["pods", "switch-bin"], dict[str, str]] = "pods"
    link: Literal["ssh", "gre"] = "ssh"
    ssh_options: list[str] = []

    @model_validator(mode="after")
    def _servers(self):
        names = [s.name for s in self.servers]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise FieldError("servers", f"server {dup!r} named twice")
        if sum(s.address == LOCAL for s in self.servers) > 1:
            raise FieldError("servers", f"only one server can be the runner's own ({LOCAL!r})")
        if isinstance(self.placement, dict):
            bad = next((s for s in self.placement.values() if s not in names), None)
            if bad:
                raise FieldError("placement", f"server {bad!r} is not in servers {names}")
        return self

    def server(self, name: str) -> ClusterServerSpec:
        return next(s for s in self.servers if s.name == name)
