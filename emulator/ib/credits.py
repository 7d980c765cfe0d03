"""InfiniBand link-level flow control, one data VL of one port (IBA Vol. 1,
release 1.4, 7.9.4 "Flow control"): a pure state machine with explicit
times, as ``emulator.nic.dcqcn`` is, driven by the port that owns it.

Credits count 64-byte blocks in 12-bit counters: the transmitter's FCTBS and FCCL,
the receiver's ABR, and the rule a packet waits on (``docs/lossless.md``,
"InfiniBand credits").

A flow-control packet (``emulator.ib.headers.IBFlowControl``) carries both
halves of its sender's state for one VL: its FCTBS (for the peer's ABR) and
its FCCL (for the peer's transmitter). ``fc_due`` says when the port owes
one: when its buffer freed ``update_blocks`` since the last, or
``update_period_ns`` after it (the spec's upper bound on the interval is
65,536 symbol times: ~16 us at 4x EDR; dilated by the caller). VL15 is not
flow controlled and has no state here.

The stall accounting (``stalled_ns``) is the time a VL held a packet it
could not send for want of credit, the credit-based counterpart of a PFC
pause's duration.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.wire import IB_CREDIT_MOD
from emulator.wire import ib_credit_blocks as blocks  # noqa: F401  (re-exported)

_HALF = IB_CREDIT_MOD // 2          # 2048: the most credit one advertisement grants


@dataclass
class CreditParams:
    buffer_blocks: int = 512            # receive buffer of the VL: 32 KiB
    update_blocks: int = 16             # freed blocks that prompt an update (1 KiB)
    update_period_ns: int = 16_000      # an update at least this often (65,536 symbols at EDR)
    # the credit held before the peer's first flow-control packet: its empty
    # buffer, when the link came up before the run (0: none until that packet)
    peer_buffer_blocks: int = 0

    def __post_init__(self):
        if self.buffer_blocks < 1:
            raise ValueError(f"buffer_blocks must be at least 1 (got {self.buffer_blocks})")
        if self.peer_buffer_blocks < 0:
            raise ValueError(f"peer_buffer_blocks must be >= 0 (got {self.peer_buffer_blocks})")
        if self.update_blocks < 1:
            raise ValueError(f"update_blocks must be at least 1 (got {self.update_blocks})")
        if self.update_period_ns <= 0:
            raise ValueError(f"update_period_ns must be positive (got {self.update_period_ns})")


class VlCredits:
    """Flow control of one data VL at one end of a link, both directions."""

    __slots__ = ("params", "fctbs", "fccl", "abr", "free_blocks", "stalled_ns", "stalled_since",
                 "_freed_since_fc", "_last_fc_ns", "stalls", "overruns", "credit_ns")

    def __init__(self, params: CreditParams | None = None, now_ns: int = 0):
        self.params = params or CreditParams()
        # transmitter: nothing sent; the credit of the peer's empty buffer
        # (what its flow-control packets at link-up said), else none until
        # its first one
        self.fctbs = 0
        self.fccl = min(self.params.peer_buffer_blocks, _HALF)
        self.credit_ns = now_ns             # when the last FCCL came
        # receiver
        self.abr = 0
        self.free_blocks = self.params.buffer_blocks
        self.stalled_ns = 0                 # time a packet waited for credit
        self.stalls = 0                     # times the VL ran out of credit with a packet ready
        self.overruns = 0                   # packets received beyond the buffer: never, if the peer obeys
        self.stalled_since: int | None = None
        self._freed_since_fc = 0
        self._last_fc_ns = now_ns - self.params.update_period_ns   # the first update is due at once

    # ------------------------------------------------------------ transmitter
    def credit_blocks(self) -> int:
        """Blocks the peer's last FCCL still allows (0 when exhausted)."""
        c = (self.fccl - self.fctbs) % IB_CREDIT_MOD
        return c if c <= _HALF else 0

    def can_send(self, n_blocks: int) -> bool:
        """May a packet of ``n_blocks`` go now (7.9.4.3)?"""
        return (self.fccl - (self.fctbs + n_blocks)) % IB_CREDIT_MOD <= _HALF

    def send_at_ns(self, n_blocks: int) -> int | None:
        """When a packet of ``n_blocks`` held for credit may start, as far as the
        credit goes: when the FCCL that allows it came; None while none does."""
        if (self.fccl - (self.fctbs + n_blocks)) % IB_CREDIT_MOD <= _HALF:
            return self.credit_ns
        return None

    def try_send(self, n_blocks: int, now_ns: int) -> bool:
        """Send a packet if the credit allows: count its blocks and end a stall;
        else start (or continue) a stall. Returns whether it may go."""
        if not self.can_send(n_blocks):
            if self.stalled_since is None:
                self.stalled_since = now_ns
                self.stalls += 1
            return False
        self.fctbs = (self.fctbs + n_blocks) % IB_CREDIT_MOD
        self._end_stall(now_ns)
        return True

    def idle(self, now_ns: int) -> None:
        """No packet waits on this VL any more (a stall, if any, ends)."""
        self._end_stall(now_ns)

    def _end_stall(self, now_ns: int) -> None:
        if self.stalled_since is not None:
            self.stalled_ns += now_ns - self.stalled_since
            self.stalled_since = None

    def stalled_total_ns(self, now_ns: int) -> int:
        """Stalled time so far, a stall in progress included."""
        ongoing = now_ns - self.stalled_since if self.stalled_since is not None else 0
        return self.stalled_ns + ongoing

    # ------------------------------------------------------------ receiver
    def on_data(self, n_blocks: int) -> bool:
        """A data packet of ``n_blocks`` arrived on this VL: it takes buffer
        space until ``release``. False: no room (an overrun, counted; the
        packet is dropped -- a peer that obeys the credits never causes one)."""
        self.abr = (self.abr + n_blocks) % IB_CREDIT_MOD
        if n_blocks > self.free_blocks:
            self.overruns += 1
            return False
        self.free_blocks -= n_blocks
        return True

    def release(self, n_blocks: int) -> None:
        """A packet of ``n_blocks`` left the receive buffer (forwarded or consumed)."""
        self.free_blocks = min(self.params.buffer_blocks, self.free_blocks + n_blocks)
        self._freed_since_fc += n_blocks

    def advertised_fccl(self) -> int:
        """The FCCL this end advertises: ABR plus the free buffer, at most 2048 ahead."""
        return (self.abr + min(self.free_blocks, _HALF)) % IB_CREDIT_MOD

    # ------------------------------------------------------------ flow-control packets
    def fc_due(self, now_ns: int) -> bool:
        """Does this end owe its peer a flow-control packet for this VL?"""
        return (self._freed_since_fc >= self.params.update_blocks
                or now_ns - self._last_fc_ns >= self.params.update_period_ns)

    def next_fc_ns(self) -> int:
        """When the periodic update falls due (a freed buffer may bring it forward)."""
        return self._last_fc_ns + self.params.update_period_ns

    def make_fc(self, now_ns: int) -> tuple[int, int]:
        """(FCTBS, FCCL) for the flow-control packet this end sends now."""
        self._freed_since_fc = 0
        self._last_fc_ns = now_ns
        return self.fctbs, self.advertised_fccl()

    def on_fc(self, fctbs: int, fccl: int, now_ns: int) -> None:
        """The peer's flow-control packet for this VL: its FCTBS resets our
        ABR (7.9.4.2: blocks lost on the link are not owed credit), its
        FCCL is our new limit."""
        self.abr = fctbs % IB_CREDIT_MOD
        self.fccl = fccl % IB_CREDIT_MOD
        self.credit_ns = now_ns
