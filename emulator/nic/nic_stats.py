"""A NIC's counters (``RoceNic.stats``): what its result's ``nic`` and
summary.json's ``nics[]`` report, and what the run's fidelity verdict reads
(its transmit lag and receive lateness)."""
from __future__ import annotations

from emulator.link import LATE_BUCKETS, bucket_bounds


class NicStats:
    __slots__ = ("tx_packets", "tx_bytes", "tx_data_packets", "tx_data_payload_bytes",
                 "tx_acks", "tx_naks", "tx_rnr_naks", "tx_retransmits", "tx_enobufs", "tx_link_down", "link_down_events",
                 "tx_lag_frames", "tx_lag_max_ns", "tx_lag_sum_ns", "tx_given_up_ns",
                 "rx_late_samples", "rx_late_sum_ns", "rx_late_max_ns", "rx_late_hist",
                 "rx_stall_ns",
                 "rx_packets", "rx_bytes", "rx_data_packets", "rx_data_payload_bytes",
                 "rx_acks", "rx_naks", "rx_rnr_naks",
                 "cnp_tx", "cnp_rx", "ecn_ce_rx", "pfc_rx", "pfc_tx", "paused_ns", "rate_changes",
                 "rx_out_of_order", "rx_duplicates", "rx_icrc_errors", "rx_fcs_errors",
                 "rx_int_errors", "rx_ignored", "link_faults", "rx_stall",
                 "rx_bad_requests", "timeouts", "nak_rewinds", "completions", "loops",
                 "qp_errors", "retry_exc_errors", "rnr_retry_exc_errors", "wr_flush_errors",
                 "rx_batches_max", "rx_socket_drops",
                 "fc_tx", "fc_rx", "credit_stalls", "credit_stalled_ns",
                 "tx_read_requests", "tx_read_responses", "rx_read_requests",
                 "rx_read_responses", "read_rewinds", "tenant_drops", "cpu_rx_drops")

    def __init__(self):
        for k in self.__slots__:
            setattr(self, k, 0)
        self.rx_late_hist = [0] * LATE_BUCKETS   # receive lateness, link.py's log buckets
        self.link_faults = None                  # its link's scripted faults (link_faults.LinkFaults)
        self.rx_stall = None                     # its host's CPU stalls (rx_stall.RxStall)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__slots__}
        d["rx_late_hist"] = [[*bucket_bounds(b), n] for b, n in enumerate(self.rx_late_hist) if n]
        if self.link_faults is None:
            del d["link_faults"]
        else:
            d["link_faults"] = self.link_faults.stats()
        del d["rx_stall"]
        if self.rx_stall is not None:
            d["cpu_stall"] = self.rx_stall.stats()
        d["tx_lag_mean_ns"] = d["tx_lag_sum_ns"] // d["tx_lag_frames"] if d["tx_lag_frames"] else 0
        d["rx_late_mean_ns"] = (d["rx_late_sum_ns"] // d["rx_late_samples"]
                                if d["rx_late_samples"] else 0)
        return d

    def __repr__(self):
        return "NicStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items() if v) + ")"
