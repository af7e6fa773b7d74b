#!/usr/bin/python3
# File: tests/data/scapy_golden.py
#
# Golden RoCEv2 frames made by scapy.contrib.roce (which computes the ICRC in BTH.post_build), for
# the C++ parser to check itself against: writes a pcap and an expectation file (format in
# scapy_roce_util.py). ctest runs it live (pkt_scapy_golden_generate) before pkt_scapy_golden.
#
#   /usr/bin/python3 tests/data/scapy_golden.py OUT.pcap OUT.expect
import logging
import os
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scapy.all import ARP, Dot1AD, Dot1Q, Ether, IP, IPv6, Raw, UDP, raw, wrpcap  # noqa: E402
from scapy.contrib.roce import BTH, cnp  # noqa: E402

import scapy_roce_util as u  # noqa: E402

OPCODES = ([o for o in range(0x00, 0x18) if o != 0x15] + list(range(0x20, 0x2c)) +
           [0x64, 0x65, 0x81] + [0x15, 0x2c, 0x4a, 0x60, 0xa3, 0xc7])


def l2(vlans):
    p = Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
    if vlans >= 2:
        p = p / Dot1AD(vlan=300, prio=5) / Dot1Q(vlan=7)
    elif vlans == 1:
        p = p / Dot1Q(vlan=100, prio=3)
    return p


def l3(i, ipv6, options):
    if ipv6:
        return IPv6(src="fd00::1", dst="fd00::%x" % (i + 2), tc=(i * 7) & 0xff, fl=i * 977,
                    hlim=63)
    opts = b"\x94\x04\x00\x00" if options else b""
    return IP(src="10.1.0.1", dst="10.1.%d.2" % (i % 250), tos=(i * 9) & 0xff, id=i, ttl=64,
              flags="DF", options=opts)


def main():
    pcap_path, expect_path = sys.argv[1], sys.argv[2]
    frames, lines = [], []

    def add(frame_bytes, **exp):
        exp = dict(i=len(frames), **exp)
        frames.append(Ether(frame_bytes))
        lines.append(" ".join("%s=%s" % kv for kv in exp.items()))

    i = 0
    for opcode in OPCODES:
        for shape in range(4):
            vlans, ipv6, options = [(0, False, False), (1, False, True), (2, False, False),
                                    (1, True, False)][shape]
            plen = (i * 13) % 40 if opcode != 0x81 else 0
            pad = (4 - plen % 4) % 4
            cls, exts = u.describe(opcode)
            dma = 0x1000 * (i + 1)
            aeth = (0x1f << 24) | i if "aeth" in exts else 0
            qp, psn = 0x100 + i * 3, (0xfffff0 + i) & 0xffffff
            if opcode == 0x81:
                bth = cnp(qp)
                bth.psn = psn
            else:
                payload = bytes((i + k) & 0xff for k in range(plen)) + bytes(pad)
                bth = BTH(opcode=opcode, dqpn=qp, psn=psn, padcount=pad, pkey=0xffff - i,
                          migreq=1, ackreq=i % 2, solicited=(i // 2) % 2, fecn=(i % 5 == 0),
                          becn=(i % 7 == 0)) / Raw(u.ext_bytes(opcode, dma, aeth) + payload)
            p = (l2(vlans) / l3(i, ipv6, options) /
                 UDP(sport=0xc000 + i, dport=4791, chksum=0) / bth)
            b = bytearray(raw(p))
            l3_off = 14 + 4 * vlans
            manual = u.icrc_manual(bytes(b), l3_off, ipv6)
            if ipv6:
                # scapy.contrib.roce has no IPv6 ICRC: the value here is scapy_roce_util's.
                b[-4:] = struct.pack("<I", manual)
            else:
                stored = struct.unpack("<I", bytes(b[-4:]))[0]
                if stored != manual:
                    sys.exit("scapy and scapy_roce_util disagree on the ICRC of frame %d" % i)
            icrc = struct.unpack("<I", bytes(b[-4:]))[0]
            add(bytes(b), err="ok", cls=cls, opcode="0x%02x" % opcode, qp="0x%06x" % qp, psn=psn,
                dma=(dma if "reth" in exts else "-"), pad=pad, plen=plen + pad,
                l3=(6 if ipv6 else 4), vlans=vlans, icrc="0x%08x" % icrc)
            i += 1

    # Not RoCE, but well-formed.
    add(raw(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.1.0.2") / Raw(bytes(18))), err="ok",
        cls="none")
    add(raw(l2(0) / l3(1, False, False) / UDP(sport=1, dport=53) / Raw(b"q" * 30)), err="ok",
        cls="none")
    add(raw(l2(1) / l3(2, True, False) / UDP(sport=1, dport=4792) / Raw(b"q" * 30)), err="ok",
        cls="none")
    frag = l2(0) / IP(src="10.1.0.1", dst="10.1.0.2", flags="MF", proto=17) / Raw(bytes(40))
    add(raw(frag), err="ok", cls="none")
    # Malformed.
    good = l2(0) / l3(3, False, False) / UDP(sport=7, dport=4791, chksum=0) / BTH(
        opcode=0x06, dqpn=5, psn=5) / Raw(u.ext_bytes(0x06) + bytes(8))
    b = bytearray(raw(good))
    lie = bytearray(b)
    lie[16:18] = struct.pack("!H", len(b) - 14 + 1)
    add(bytes(lie), err="ipv4-bad-length", cls="none")
    lie = bytearray(b)
    lie[38:40] = struct.pack("!H", 7)
    add(bytes(lie), err="udp-bad-length", cls="none")
    lie = bytearray(b)
    lie[43] |= 0x01
    add(bytes(lie), err="bth-bad-version", cls="none")
    short = l2(0) / l3(4, False, False) / UDP(sport=7, dport=4791, chksum=0) / BTH(
        opcode=0x0c, dqpn=5, psn=5) / Raw(bytes(10))
    add(raw(short), err="roce-ext-truncated", cls="none")
    add(raw(good)[:40], err="ipv4-bad-length", cls="none")
    add(raw(Ether() / Dot1Q() / Dot1Q() / Dot1Q() / IP()), err="vlan-too-many", cls="none")

    wrpcap(pcap_path, frames)
    with open(expect_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d frames to %s" % (len(frames), pcap_path))


if __name__ == "__main__":
    main()
