"""gNMI (0.10.0) server of the embedded switch: its telemetry, read from its own state.

Beside the P4Runtime server (``p4rt_server``), on the address the switch's
config names (``SwitchConfig.gnmi_listen``: 127.0.0.1 today; the management
networks will move it). Models: the state leaves of openconfig-interfaces and
openconfig-qos it has, and an augmentation for ECN, PFC and queue depth
(docs/telemetry.md). Split by concern:

    servicer   GnmiServer: lifecycle, Capabilities, Get, Set (refused), Subscribe
    subscribe  STREAM (SAMPLE, ON_CHANGE, TARGET_DEFINED), ONCE, POLL
    sampler    samples and changes taken by the switch's loop at exact fabric times
    leaves     the leaves, and how each reads the switch's state
    paths      gNMI paths: text, matching with wildcards
    encode     JSON_IETF and PROTO values, notifications

    server = GnmiServer(switch, "127.0.0.1:0")
    server.start()                    # -> bound port
    ...
    server.stop()                     # after the switch's loop ended
"""
from emulator.dataplane.gnmi_server.servicer import GnmiServer

__all__ = ["GnmiServer"]
