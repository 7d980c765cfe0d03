"""Collective communication for the emulated GPUs (NCCL-like, measured like
nccl-tests): schedules (``algorithms``), NVLink (``nvlink``), RDMA/NVLink
connections (``transport``), the per-server engine (``engine``), the
benchmark loops (``bench``), the ``workload:`` section (``workload``), the
report (``report``) and the per-server agent (``agent``)."""
