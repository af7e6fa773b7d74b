#!/usr/bin/python3
# File: tests/data/scapy_check_lb_rewrite.py
#
# The scapy cross-check of the PIN entropy rewrite (dataplane/lb/rewrite.h): frames whose UDP
# source port or IPv6 flow label lb_rewrite_corpus rewrote with the incremental ICRC update. For
# every frame scapy must find the new entropy where the expectation line says, and agree with the
# ICRC: IPv4 frames must come out byte for byte the same when scapy recomputes the ICRC (and the
# UDP checksum, when the frame has one); IPv6 frames, for which scapy.contrib.roce has no ICRC,
# get it from scapy's own layers masked the way its IPv4 code masks them (traffic class, flow
# label and hop limit set to ones).
#
#   /usr/bin/python3 tests/data/scapy_check_lb_rewrite.py REWRITTEN.pcap REWRITTEN.expect
import logging
import struct
import sys
import zlib

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.all import IP, UDP, Ether, IPv6, Raw, raw, rdpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402


def datagram_end(frame):
    """Offset of the end of the IP datagram (Ethernet padding excluded)."""
    off = 12
    etype = struct.unpack("!H", frame[off:off + 2])[0]
    while etype in (0x8100, 0x88a8):
        off += 4
        etype = struct.unpack("!H", frame[off:off + 2])[0]
    l3 = off + 2
    if etype == 0x0800:
        return l3 + struct.unpack("!H", frame[l3 + 2:l3 + 4])[0]
    return l3 + 40 + struct.unpack("!H", frame[l3 + 4:l3 + 6])[0]


def dissect(frame):
    """Ether(frame), with the UDP payload decoded as BTH even when the source port is one scapy
    binds to another protocol (NetBIOS on 137, ...): RoCEv2 is identified by the destination."""
    p = Ether(frame)
    if UDP in p and BTH not in p and p[UDP].dport == 4791:
        p[UDP].decode_payload_as(BTH)
    return p


def ipv6_icrc(p):
    """scapy.contrib.roce's BTH.compute_icrc(), with the IPv6 variant fields in place of IPv4's."""
    pshdr = Raw(b"\xff" * 8) / p[IPv6].copy()
    pshdr[IPv6].tc = 0xff
    pshdr[IPv6].fl = 0xfffff
    pshdr[IPv6].hlim = 0xff
    pshdr[UDP].chksum = 0xffff
    pshdr[BTH].fecn = 1
    pshdr[BTH].becn = 1
    pshdr[BTH].resv6 = 0x3f
    bth = pshdr[BTH].self_build()
    payload = raw(pshdr[BTH].payload)
    pshdr[UDP].payload = Raw(bth + payload + b"\xff\xff\xff\xff")
    return zlib.crc32(raw(pshdr)[:-4]) & 0xffffffff


def check(idx, full, exp, failures):
    def fail(msg):
        failures.append("frame %d (%s): %s" % (idx, " ".join("%s=%s" % kv for kv in exp.items()),
                                                msg))

    frame = full[:datagram_end(full)]
    p = dissect(frame)
    if BTH not in p or UDP not in p:
        fail("scapy finds no UDP/BTH")
        return
    value = int(exp["value"], 16)
    ipv6 = IPv6 in p
    if ipv6 != (exp["l3"] == "6"):
        fail("IP version mismatch")
    if exp["field"] == "flow-label":
        if p[IPv6].fl != value:
            fail("flow label %#x, want %#x" % (p[IPv6].fl, value))
    elif p[UDP].sport != value:
        fail("UDP source port %#x, want %#x" % (p[UDP].sport, value))
    has_csum = exp["udp_csum"] == "1"
    if (p[UDP].chksum != 0) != has_csum:
        fail("UDP checksum %#x, expected %s" % (p[UDP].chksum, "non-zero" if has_csum else "zero"))
    stored = struct.pack("!I", p[BTH].icrc)  # the wire bytes
    if ipv6:
        if struct.pack("<I", ipv6_icrc(p)) != stored:
            fail("ICRC %s, scapy-masked IPv6 ICRC %s" %
                 (stored.hex(), struct.pack("<I", ipv6_icrc(p)).hex()))
        if has_csum:
            q = dissect(frame)
            del q[UDP].chksum
            if raw(q) != frame:
                fail("scapy recomputes a different UDP checksum")
        return
    # IPv4: scapy recomputes the ICRC (and the UDP checksum, over the new ICRC); nothing may move.
    q = dissect(frame)
    q[BTH].icrc = None
    if has_csum:
        del q[UDP].chksum
    rebuilt = raw(q)
    if rebuilt != frame:
        diff = [i for i in range(min(len(rebuilt), len(frame))) if rebuilt[i] != frame[i]]
        fail("scapy rebuilds different bytes (first diffs at %s)" % diff[:4])


def main():
    pcap_path, expect_path = sys.argv[1], sys.argv[2]
    frames = [bytes(f) for f in rdpcap(pcap_path)]
    with open(expect_path) as f:
        exps = [dict(t.split("=", 1) for t in line.split()) for line in f if line.strip()]
    if len(frames) != len(exps) or len(frames) < 100:
        sys.exit("%d frames, %d expectations" % (len(frames), len(exps)))
    failures = []
    for idx, (frame, exp) in enumerate(zip(frames, exps)):
        check(idx, frame, exp, failures)
    for line in failures[:40]:
        print(line)
    if failures:
        sys.exit("%d problems in %d frames" % (len(failures), len(frames)))
    v6 = sum(e["l3"] == "6" for e in exps)
    print("scapy agrees with the incremental ICRC on %d rewritten frames (%d IPv4, %d IPv6, "
          "%d with a VLAN tag, %d with a UDP checksum, %d flow-label rewrites)" %
          (len(frames), len(frames) - v6, v6, sum(e["vlans"] != "0" for e in exps),
           sum(e["udp_csum"] == "1" for e in exps),
           sum(e["field"] == "flow-label" for e in exps)))


if __name__ == "__main__":
    main()
