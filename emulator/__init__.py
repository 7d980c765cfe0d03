"""ai-fabric-emulator: a packet-level emulator of RoCEv2 GPU-cluster fabrics."""

__version__ = "0.1.0"
