# File: tests/data/scapy_roce_util.py
#
# Shared helpers for the scapy cross-checks of dataplane/pkt: an independent RoCEv2 opcode table
# (written from the IBTA spec, not from roce.h), the expectation-line format both directions use,
# and an ICRC for IPv6 (scapy.contrib.roce computes it for IPv4 only).
#
# Expectation line: one packet per line, space-separated key=value tokens, in pcap order:
#   i=3 err=ok cls=write opcode=0x06 qp=0x000123 psn=16 dma=65536 pad=0 plen=32 l3=4 vlans=0
#   icrc=0x7595dc4b
# dma and icrc may be '-' (no RETH / not checked); non-RoCE and malformed frames carry only i, err
# and cls.
import struct
import zlib

# transport-relative opcode (low 5 bits) -> (class, extension headers in wire order)
_RC_UC = {
    0x00: ("send", []), 0x01: ("send", []), 0x02: ("send", []), 0x03: ("send", ["imm"]),
    0x04: ("send", []), 0x05: ("send", ["imm"]),
    0x06: ("write", ["reth"]), 0x07: ("write", []), 0x08: ("write", []),
    0x09: ("write", ["imm"]), 0x0a: ("write", ["reth"]), 0x0b: ("write", ["reth", "imm"]),
}
_RC_ONLY = {
    0x0c: ("read-request", ["reth"]),
    0x0d: ("read-response", ["aeth"]), 0x0e: ("read-response", []),
    0x0f: ("read-response", ["aeth"]), 0x10: ("read-response", ["aeth"]),
    0x11: ("ack", ["aeth"]), 0x12: ("atomic-ack", ["aeth", "atomicack"]),
    0x13: ("atomic", ["atomic"]), 0x14: ("atomic", ["atomic"]),
    0x16: ("send", ["ieth"]), 0x17: ("send", ["ieth"]),
}
EXT_LEN = {"reth": 16, "aeth": 4, "imm": 4, "ieth": 4, "deth": 8, "atomic": 28, "atomicack": 8,
           "cnp": 16}


def describe(opcode):
    """(class name, [extension header names]) for a BTH opcode."""
    transport, low = opcode & 0xe0, opcode & 0x1f
    if transport == 0x00:
        if low in _RC_UC:
            return _RC_UC[low]
        if low in _RC_ONLY:
            return _RC_ONLY[low]
    elif transport == 0x20 and low in _RC_UC:
        return _RC_UC[low]
    elif opcode == 0x64:
        return ("send", ["deth"])
    elif opcode == 0x65:
        return ("send", ["deth", "imm"])
    elif opcode == 0x81:
        return ("cnp", ["cnp"])
    return ("other", [])


def ext_bytes(opcode, dma=0x1000, aeth=0x00000000):
    """Extension header bytes for `opcode`, made with struct (independent of the C++ builder)."""
    out = b""
    for h in describe(opcode)[1]:
        if h == "reth":
            out += struct.pack("!QII", 0x00007f0012340000, 0xabcd, dma)
        elif h == "aeth":
            out += struct.pack("!I", aeth)
        elif h == "imm":
            out += struct.pack("!I", 0x1badcafe)
        elif h == "ieth":
            out += struct.pack("!I", 0x00c0ffee)
        elif h == "deth":
            out += struct.pack("!II", 0x80010000, 0x000123)
        elif h == "atomic":
            out += struct.pack("!QIQQ", 0x00007f0000002000, 0x42, 1, 0)
        elif h == "atomicack":
            out += struct.pack("!Q", 0x1234)
        elif h == "cnp":
            out += bytes(16)
    return out


def parse_expect_line(line):
    return dict(tok.split("=", 1) for tok in line.split())


def icrc_manual(frame, l3_off, ipv6):
    """RoCEv2 ICRC (as the little-endian uint32 on the wire) computed from raw bytes: mask a copy
    of [IP header, ICRC) and run one crc32 over 8 x 0xff + that copy."""
    if ipv6:
        udp_len = struct.unpack("!H", frame[l3_off + 44:l3_off + 46])[0]
        ihl = 40
    else:
        ihl = (frame[l3_off] & 0x0f) * 4
        udp_len = struct.unpack("!H", frame[l3_off + ihl + 4:l3_off + ihl + 6])[0]
    end = l3_off + ihl + udp_len - 4
    b = bytearray(frame[l3_off:end])
    if ipv6:
        b[0] |= 0x0f
        b[1] = b[2] = b[3] = 0xff
        b[7] = 0xff
    else:
        b[1] = 0xff
        b[8] = 0xff
        b[10] = b[11] = 0xff
    b[ihl + 6] = b[ihl + 7] = 0xff
    b[ihl + 8 + 4] = 0xff
    return zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xffffffff
