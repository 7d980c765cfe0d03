-- Wireshark / tshark dissector for the INT stack of ai-fabric-emulator's HPCC
-- packets (emulator/int_md.py defines the layout; fabric.p4 writes it):
--
--   Ether | IPv4 | UDP dport 4792 | shim (8) | records (16 x max_hops) | BTH ...
--
-- The shim says what follows and which UDP port it displaced (4791): after
-- the records the rest is handed to the dissector of that port, so the BTH,
-- RETH/AETH and payload read as RoCEv2 (InfiniBand) as usual.
--
--   tshark -X lua_script:emulator/wireshark/int_hpcc.lua -r RUN/pcap/leaf1-eth1.pcap -V
--
-- Fields: int.kind, int.hop_count, int.max_hops, int.orig_dport, and per
-- record int.hop.qlen_bytes, int.hop.tx_bytes, int.hop.ts_ns, int.hop.rate_mbps.

local INT_UDP_DPORT = 4792        -- emulator/int_md.py INT_UDP_DPORT
local SHIM_BYTES = 8
local HOP_BYTES = 16

local p_int = Proto("int_hpcc", "INT (HPCC) stack")
local kinds = { [1] = "collect", [2] = "echo" }
local f = {
    kind = ProtoField.uint8("int.kind", "Kind", base.DEC, kinds),
    hop_count = ProtoField.uint8("int.hop_count", "Records filled", base.DEC),
    max_hops = ProtoField.uint8("int.max_hops", "Records present", base.DEC),
    orig_dport = ProtoField.uint16("int.orig_dport", "Original UDP dport", base.DEC),
    qlen = ProtoField.uint32("int.hop.qlen_bytes", "Queue length (bytes)", base.DEC),
    tx = ProtoField.uint32("int.hop.tx_bytes", "Tx bytes", base.DEC),
    ts = ProtoField.uint32("int.hop.ts_ns", "Timestamp (fabric ns)", base.DEC),
    rate = ProtoField.uint32("int.hop.rate_mbps", "Link rate (Mbit/s)", base.DEC),
}
p_int.fields = { f.kind, f.hop_count, f.max_hops, f.orig_dport, f.qlen, f.tx, f.ts, f.rate }

function p_int.dissector(tvb, pinfo, tree)
    if tvb:len() < SHIM_BYTES then return 0 end
    local max_hops = tvb(2, 1):uint()
    local count = tvb(1, 1):uint()
    local len = SHIM_BYTES + max_hops * HOP_BYTES
    if tvb:len() < len then return 0 end
    local t = tree:add(p_int, tvb(0, len),
                       string.format("INT (HPCC) %s, %d of %d records",
                                     kinds[tvb(0, 1):uint()] or "?", count, max_hops))
    t:add(f.kind, tvb(0, 1))
    t:add(f.hop_count, tvb(1, 1))
    t:add(f.max_hops, tvb(2, 1))
    t:add(f.orig_dport, tvb(4, 2))
    for i = 0, max_hops - 1 do
        local o = SHIM_BYTES + i * HOP_BYTES
        local h = t:add(tvb(o, HOP_BYTES), string.format("Record %d%s", i,
                                                         i < count and "" or " (empty)"))
        h:add(f.qlen, tvb(o, 4))
        h:add(f.tx, tvb(o + 4, 4))
        h:add(f.ts, tvb(o + 8, 4))
        h:add(f.rate, tvb(o + 12, 4))
    end
    pinfo.cols.protocol:set("INT")
    local rest = DissectorTable.get("udp.port"):get_dissector(tvb(4, 2):uint())
    if rest ~= nil and tvb:len() > len then
        rest:call(tvb(len):tvb(), pinfo, tree)
    end
    return tvb:len()
end

DissectorTable.get("udp.port"):add(INT_UDP_DPORT, p_int)
