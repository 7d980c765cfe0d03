"""The NIC device model: a software RoCEv2 RNIC (``nic.RoceNic``) and its
parts -- packet layers (``roce``), queue pairs, requester, responder, READs,
transmitter, PFC, CNP generation and reaction point (DCQCN, HPCC), per-packet
CPU work (``host_cpu``) and AF_PACKET sockets. The processes that run NICs
live in ``emulator.agents``."""
