#!/usr/bin/python3
# File: tests/data/scapy_check_builder.py
#
# The other direction of the scapy cross-check: frames made by heddle's builder
# (pkt_builder_corpus) decoded by scapy. For every frame scapy must find the layers the
# expectation line names, the BTH fields and extension headers must match, and scapy must
# regenerate exactly the same bytes when asked to recompute the IPv4 total length and checksum,
# the UDP length and the ICRC (IPv6: scapy has no ICRC, scapy_roce_util's is used).
#
#   /usr/bin/python3 tests/data/scapy_check_builder.py BUILDER.pcap BUILDER.expect
import logging
import os
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scapy.all import Dot1Q, Dot1AD, Ether, IP, IPv6, UDP, raw, rdpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

import scapy_roce_util as u  # noqa: E402


def check(idx, frame, exp, failures):
    def fail(msg):
        failures.append("frame %d: %s" % (idx, msg))

    # scapy hangs Ethernet padding under the innermost layer, where BTH would count it as payload
    # (and into the ICRC): check the padding is zeros, then decode the frame without it.
    full = frame
    frame = frame[:datagram_end(frame)]
    if full[len(frame):] != bytes(len(full) - len(frame)):
        fail("Ethernet padding is not zeros")
    p = Ether(frame)
    if exp["cls"] == "none":
        if BTH in p:
            fail("scapy sees a BTH in a frame expected not to be RoCE")
        return
    if BTH not in p:
        fail("scapy finds no BTH")
        return
    bth = p[BTH]
    vlans = (1 if Dot1Q in p else 0) + (1 if Dot1AD in p else 0)
    want = {"opcode": int(exp["opcode"], 16), "dqpn": int(exp["qp"], 16), "psn": int(exp["psn"]),
            "padcount": int(exp["pad"]), "version": 0}
    for field, value in want.items():
        if getattr(bth, field) != value:
            fail("BTH %s = %r, want %r" % (field, getattr(bth, field), value))
    if vlans != int(exp["vlans"]):
        fail("%d VLAN tags, want %s" % (vlans, exp["vlans"]))
    ipv6 = IPv6 in p
    if (6 if ipv6 else 4) != int(exp["l3"]):
        fail("IP version mismatch")
    cls, exts = u.describe(bth.opcode)
    if cls != exp["cls"]:
        fail("class %s, want %s" % (cls, exp["cls"]))
    # BTH's payload in scapy: extension headers + payload + pad (the ICRC is BTH's FCS field).
    body = raw(bth.payload)
    ext_len = sum(u.EXT_LEN[h] for h in exts)
    if len(body) != ext_len + int(exp["plen"]):
        fail("BTH payload %d bytes, want %d + %s" % (len(body), ext_len, exp["plen"]))
    if "reth" in exts:
        dma = struct.unpack("!I", body[12:16])[0]
        if dma != int(exp["dma"]):
            fail("RETH DMA length %d, want %s" % (dma, exp["dma"]))
    pad = int(exp["pad"])
    if pad and body[len(body) - pad:] != bytes(pad):
        fail("pad bytes not zero")
    stored = struct.unpack("<I", frame_icrc(p))[0]
    if stored != int(exp["icrc"], 16):
        fail("stored ICRC 0x%08x, expectation %s" % (stored, exp["icrc"]))
    if ipv6:
        l3_off = 14 + 4 * vlans
        if u.icrc_manual(frame, l3_off, True) != stored:
            fail("IPv6 ICRC mismatch")
        return
    # Let scapy recompute every derived field and compare whole frames.
    q = Ether(frame)
    del q[IP].len
    del q[IP].chksum
    del q[UDP].len
    q[BTH].icrc = None
    rebuilt = raw(q)
    if rebuilt != frame:
        diff = [i for i in range(min(len(rebuilt), len(frame))) if rebuilt[i] != frame[i]]
        fail("scapy rebuilds different bytes (first diff at %s, lengths %d/%d)" %
             (diff[:4], len(rebuilt), len(frame)))


def datagram_end(frame):
    """Offset of the end of the IP datagram (the frame length for non-IP frames)."""
    off = 12
    etype = struct.unpack("!H", frame[off:off + 2])[0]
    while etype in (0x8100, 0x88a8):
        off += 4
        etype = struct.unpack("!H", frame[off:off + 2])[0]
    l3 = off + 2
    if etype == 0x0800:
        return l3 + struct.unpack("!H", frame[l3 + 2:l3 + 4])[0]
    if etype == 0x86dd:
        return l3 + 40 + struct.unpack("!H", frame[l3 + 4:l3 + 6])[0]
    return len(frame)


def frame_icrc(p):
    return struct.pack(">I", p[BTH].icrc) if isinstance(p[BTH].icrc, int) else b""


def main():
    pcap_path, expect_path = sys.argv[1], sys.argv[2]
    frames = [bytes(f) for f in rdpcap(pcap_path)]
    with open(expect_path) as f:
        exps = [u.parse_expect_line(line) for line in f if line.strip()]
    if len(frames) != len(exps) or len(frames) < 100:
        sys.exit("%d frames, %d expectations" % (len(frames), len(exps)))
    failures = []
    for idx, (frame, exp) in enumerate(zip(frames, exps)):
        check(idx, frame, exp, failures)
    for line in failures[:40]:
        print(line)
    if failures:
        sys.exit("%d problems in %d frames" % (len(failures), len(frames)))
    print("scapy agrees with the builder on %d frames" % len(frames))


if __name__ == "__main__":
    main()
