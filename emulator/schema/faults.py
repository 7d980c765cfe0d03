"""Scripted link faults: the experiment's ``faults:`` section, and the faults
of one link end as its process applies them.

```yaml
faults:
  - {kind: link_down, at_us: 100, link: "leaf1:spine1"}            # both directions
  - {kind: link_up, at_us: 300, link: "leaf1:spine1"}
  - {kind: link_flap, at_us: 500, link: "h1:leaf1", period_us: 40, count: 3}
  - {kind: link_degrade, at_us: 0, link: "h1:leaf1", rate_fraction: 0.5, until_us: 800}
  - {kind: random_loss, link: "leaf1:spine1", rate: 0.01, priority: 3, direction: a_to_b}
  - {kind: bit_errors, link: "h2:leaf1", ber: 1.0e-6, from_us: 0, until_us: 2000}
  - {kind: switch_down, switch: spine1, at_us: 50}                # a modelled reboot
  - {kind: switch_up, switch: spine1, at_us: 200}
  - {kind: pfc_storm, host: h1, priority: 3, at_us: 200, until_us: 5000}
  - {kind: cpu_stall, host: h2, at_us: 100, duration_us: 300}
```

``link`` names the two nodes a link joins, ``"A:B"``; ``direction`` is
``both``, ``a_to_b`` (A sends, B receives) or ``b_to_a``. Every fault acts
at the sending end of a direction, on a frame when its serialization ends
(when its last bit enters the wire): a down direction loses it, a loss
drops it, a bit error flips one of its bits; a degrade slows the sender's
serializer. A ``pfc_storm`` names a host: its NIC sends the PAUSE frames; a ``cpu_stall``
names a host that stops taking what its NIC receives. Times are fabric µs from the run's start. What each does and
what the run reports: docs/faults.md. Checked against the fabric by
``emulator.experiment.faults`` (the link exists, the times are in order).

``EndFaults`` is the process side: the faults of one sending end, in fabric
ns, in the switch port's ``PortConfig`` or the NIC's ``NicConfig``.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Discriminator, Field, PositiveInt, Tag, field_validator, model_validator

from emulator.schema.limits import FabricUs
from emulator.schema.load import FieldError, StrictSpec
from emulator.wire import NUM_PRIORITIES

Direction = Literal["both", "a_to_b", "b_to_a"]
FaultPriority = Annotated[int, Field(ge=0, le=NUM_PRIORITIES - 1)]
DEFAULT_FAULT_SEED = 1


def _until_after(fault, start: str):
    """``fault``, refused unless its ``until_us`` (None: the run's end) is after ``start``."""
    t0 = getattr(fault, start)
    if fault.until_us is not None and fault.until_us <= t0:
        raise FieldError("until_us", f"must be after {start} ({t0:g}) (got {fault.until_us:g})")
    return fault


class _LinkFault(StrictSpec):
    link: str
    direction: Direction = "both"

    @field_validator("link")
    @classmethod
    def _two_nodes(cls, v: str) -> str:
        a, sep, b = v.partition(":")
        if not sep or not a.strip() or not b.strip() or ":" in b:
            raise ValueError("must name the two nodes a link joins, as 'A:B'")
        if a.strip() == b.strip():
            raise ValueError(f"names {a.strip()!r} twice: a link joins two nodes")
        return f"{a.strip()}:{b.strip()}"

    @property
    def ends(self) -> tuple[str, str]:
        a, _, b = self.link.partition(":")
        return a, b

    def senders(self) -> list[tuple[str, str]]:
        """The directions this fault acts on, as (sender, receiver)."""
        a, b = self.ends
        return {"both": [(a, b), (b, a)], "a_to_b": [(a, b)], "b_to_a": [(b, a)]}[self.direction]


class _Window(_LinkFault):
    """A fault in force from ``from_us`` until ``until_us`` (None: the run's end)."""
    from_us: FabricUs = 0.0
    until_us: Optional[FabricUs] = None

    @model_validator(mode="after")
    def _ordered(self):
        return _until_after(self, "from_us")


class LinkDown(_LinkFault):
    kind: Literal["link_down"]
    at_us: FabricUs


class LinkUp(_LinkFault):
    kind: Literal["link_up"]
    at_us: FabricUs


class LinkFlap(_LinkFault):
    """``count`` times down then up from ``at_us``: ``period_us`` split in
    halves, or ``down_us`` then ``up_us``."""
    kind: Literal["link_flap"]
    at_us: FabricUs
    count: PositiveInt
    period_us: Optional[float] = Field(None, gt=0, allow_inf_nan=False)
    down_us: Optional[float] = Field(None, gt=0, allow_inf_nan=False)
    up_us: Optional[float] = Field(None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_form(self):
        halves = self.down_us is not None, self.up_us is not None
        if self.period_us is not None and any(halves):
            raise FieldError("period_us", "give period_us or down_us and up_us, not both")
        if self.period_us is None and not all(halves):
            raise FieldError("down_us" if not halves[0] else "up_us",
                             "required (or give period_us: down for its first half, up for the second)")
        return self

    def times_us(self) -> tuple[float, float]:
        """(down, up) of one cycle."""
        if self.period_us is not None:
            return self.period_us / 2, self.period_us / 2
        return self.down_us, self.up_us       # type: ignore[return-value]


class LinkDegrade(_LinkFault):
    """The sender's serializer runs at ``rate_fraction`` x the link's rate
    from ``at_us`` until ``until_us`` (None: the run's end)."""
    kind: Literal["link_degrade"]
    at_us: FabricUs
    rate_fraction: float = Field(gt=0, le=1, allow_inf_nan=False)
    until_us: Optional[FabricUs] = None

    @model_validator(mode="after")
    def _ordered(self):
        return _until_after(self, "at_us")


class RandomLoss(_Window):
    """Each frame (of ``priority``; None: every frame, PFC's too) lost with
    probability ``rate``, drawn from a generator seeded by ``seed``, the
    link and the direction."""
    kind: Literal["random_loss"]
    rate: float = Field(ge=0, le=1, allow_inf_nan=False)
    priority: Optional[FaultPriority] = None
    seed: int = Field(DEFAULT_FAULT_SEED, ge=0)


class PfcStorm(StrictSpec):
    """Host ``host``'s NIC sends PAUSE on ``priority`` from ``at_us`` until
    ``until_us`` (None: the run's end) whatever its receive buffer holds, as
    a stuck NIC does: 802.1Qbb frames of the most quanta (0xFFFF), each sent
    again before the last runs out; at ``until_us`` it stops (the pause in
    force runs out by itself)."""
    kind: Literal["pfc_storm"]
    host: str
    priority: FaultPriority = 3
    at_us: FabricUs
    until_us: Optional[FabricUs] = None

    @model_validator(mode="after")
    def _ordered(self):
        return _until_after(self, "at_us")

    def senders(self) -> list[tuple[str, str]]:
        return []              # not a link fault: compiled per host (experiment/faults.py)


class CpuStall(StrictSpec):
    """Host ``host`` stops taking what its NIC receives from ``at_us`` for
    ``duration_us``: the NIC holds the data packets, pauses the data class
    once it holds ``xoff_bytes`` and, when the host takes them at the end,
    resumes it (``nic/rx_stall.py``)."""
    kind: Literal["cpu_stall"]
    host: str
    at_us: FabricUs
    duration_us: float = Field(gt=0, allow_inf_nan=False)
    xoff_bytes: PositiveInt = 65_536

    def senders(self) -> list[tuple[str, str]]:
        return []              # not a link fault: compiled per host (experiment/faults.py)


class BitErrors(_Window):
    """Each bit flipped with probability ``ber``: a frame of L bytes is hit
    with probability 1-(1-ber)^(8L), one bit of it flipped."""
    kind: Literal["bit_errors"]
    ber: float = Field(gt=0, le=1, allow_inf_nan=False)
    seed: int = Field(DEFAULT_FAULT_SEED, ge=0)


class SwitchDown(StrictSpec):
    """The switch goes dark at ``at_us`` (a modelled reboot): every
    direction of its links down, its tables lost; neighbours reroute."""
    kind: Literal["switch_down"]
    switch: str
    at_us: FabricUs


class SwitchUp(StrictSpec):
    """The switch is back at ``at_us`` (its P4Runtime agent up): the
    controller re-programs it, and its links come up once that is done,
    ``controller.reaction_us`` later."""
    kind: Literal["switch_up"]
    switch: str
    at_us: FabricUs


FAULT_KINDS = {"link_down": LinkDown, "link_up": LinkUp, "link_flap": LinkFlap,
               "link_degrade": LinkDegrade, "random_loss": RandomLoss, "bit_errors": BitErrors,
               "switch_down": SwitchDown, "switch_up": SwitchUp,
               "pfc_storm": PfcStorm, "cpu_stall": CpuStall}


def _fault_kind(v) -> str | None:
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)
    model = FAULT_KINDS.get(kind) if isinstance(kind, str) else None
    return model.__name__ if model is not None else None


# One faults: entry; tags are the models' names, which the error translator
# (schema/load.py) follows to name the field and its model.
FaultEntry = Annotated[
    Union[tuple(Annotated[m, Tag(m.__name__)] for m in FAULT_KINDS.values())],   # type: ignore[misc]
    # "FIELD: reason": the translator names the tag field (schema/load.py)
    Discriminator(_fault_kind, custom_error_type="union_tag_field",
                  custom_error_message="kind: must be one of " + ", ".join(FAULT_KINDS))]


# ------------------------------------------------------------ process side



class DownInterval(StrictSpec):
    from_ns: int = Field(ge=0)
    until_ns: int = Field(gt=0)            # emulator.clock.NEVER_NS: down to the run's end


class RateChange(StrictSpec):
    at_ns: int = Field(ge=0)
    rate_fraction: float = Field(gt=0, le=1)


class LossWindow(StrictSpec):
    from_ns: int = Field(ge=0)
    until_ns: int = Field(gt=0)
    rate: float = Field(ge=0, le=1)
    priority: Optional[FaultPriority] = None
    seed: int = Field(ge=0)


class BitErrorWindow(StrictSpec):
    from_ns: int = Field(ge=0)
    until_ns: int = Field(gt=0)
    ber: float = Field(gt=0, le=1)
    seed: int = Field(ge=0)


class StormWindow(StrictSpec):
    """A NIC's PFC storm: PAUSE on ``priority`` from ``from_ns`` until ``until_ns``."""
    from_ns: int = Field(ge=0)
    until_ns: int = Field(gt=0)
    priority: FaultPriority


class StallWindow(StrictSpec):
    """A host's CPU stall: its NIC holds received data from ``from_ns`` until ``until_ns``."""
    from_ns: int = Field(ge=0)
    until_ns: int = Field(gt=0)
    xoff_bytes: int = Field(gt=0)


class EndFaults(StrictSpec):
    """The faults of one sending end (``sender`` -> ``receiver``), fabric ns:
    when the direction is down, the rate changes of its serializer, loss and
    bit-error windows, a NIC's PFC storms, and the DSCP -> priority map that
    classes its frames for the counters and ``LossWindow.priority``."""
    sender: str
    receiver: str
    down: list[DownInterval] = []
    rates: list[RateChange] = []
    loss: list[LossWindow] = []
    bit_errors: list[BitErrorWindow] = []
    storms: list[StormWindow] = []
    stalls: list[StallWindow] = []
    dscp_priority: list[FaultPriority] = Field(default_factory=lambda: [0] * 64,
                                               min_length=64, max_length=64)

    @property
    def direction(self) -> str:
        return f"{self.sender}->{self.receiver}"
