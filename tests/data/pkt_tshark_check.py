#!/usr/bin/python3
# File: tests/data/pkt_tshark_check.py
#
# tshark's InfiniBand/RoCEv2 dissector decodes heddle builder frames: every RoCE frame must come
# out as RRoCE with the opcode, QP, PSN, PadCnt and RETH DMA length of its expectation line, with
# no malformed-packet or warning/error expert items, with tshark's own IPv4 checksum check "good",
# and with the ICRC tshark reads equal to the one computed here from the raw bytes (Wireshark 4.0
# shows the ICRC but does not verify it; when a tshark offers infiniband.invariant.crc.status it
# must say "good" too). Exit 77 (ctest SKIP) when tshark is not installed.
#
#   /usr/bin/python3 tests/data/pkt_tshark_check.py BUILDER.pcap BUILDER.expect
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scapy_roce_util as u  # noqa: E402

FIELDS = ["frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
          "infiniband.bth.padcnt", "infiniband.reth.dmalen", "infiniband.invariant.crc",
          "ip.checksum.status", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message",
          "eth.type", "vlan.etype", "ip.hdr_len"]
PCAP_HEADER = 24
RECORD_HEADER = 16
SEVERITY_WARN = 0x00600000


def read_frames(path):
    """Raw frames from a classic pcap (little-endian, as pkt_builder_corpus writes)."""
    data = open(path, "rb").read()
    off, frames = PCAP_HEADER, []
    while off < len(data):
        caplen = struct.unpack("<I", data[off + 8:off + 12])[0]
        frames.append(data[off + RECORD_HEADER:off + RECORD_HEADER + caplen])
        off += RECORD_HEADER + caplen
    return frames


def main():
    tshark = shutil.which("tshark")
    if tshark is None:
        print("tshark not installed: skipping")
        return 77
    pcap, expect = sys.argv[1], sys.argv[2]
    known = subprocess.run([tshark, "-G", "fields"], capture_output=True, text=True).stdout
    fields = list(FIELDS)
    has_status = "\tinfiniband.invariant.crc.status\t" in known
    if has_status:
        fields.append("infiniband.invariant.crc.status")
    # RoCEv2 NICs send UDP checksum 0 over IPv6 too (RFC 6935 style; the ICRC protects the
    # datagram), so tell tshark that is fine. The payloads are a synthetic byte pattern: keep the
    # upper-layer heuristics (RPC-over-RDMA, iSER, SMB Direct, ...) from guessing at them.
    cmd = [tshark, "-n", "-r", pcap, "-o", "ip.check_checksum:TRUE",
           "-o", "udp.ignore_ipv6_zero_checksum:TRUE", "-T", "fields",
           "-E", "separator=/t", "-E", "occurrence=a"]
    heur = subprocess.run([tshark, "-G", "heuristic-decodes"], capture_output=True,
                          text=True).stdout
    for line in heur.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] == "infiniband.payload":
            cmd += ["--disable-protocol", parts[1]]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr)
        return 1
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    with open(expect) as f:
        exps = [u.parse_expect_line(line) for line in f if line.strip()]
    frames = read_frames(pcap)
    if not (len(rows) == len(exps) == len(frames)) or len(rows) < 100:
        print("%d tshark rows, %d expectations, %d frames" % (len(rows), len(exps), len(frames)))
        return 1
    failures = []
    roce = 0
    for idx, (row, exp, frame) in enumerate(zip(rows, exps, frames)):
        r = dict(zip(fields, row + [""] * (len(fields) - len(row))))

        def fail(msg):
            failures.append("frame %d: %s (tshark row: %s)" % (idx + 1, msg, "|".join(row)))

        # kOther frames (reserved, RD, XRC opcodes) carry no RDETH/XRCETH from the builder, so
        # tshark rightly finds them short: only their BTH is compared. Plain UDP frames carry
        # filler that UDP heuristics guess at: only their IP header is checked.
        other = exp["cls"] in ("other", "none")
        if r["_ws.malformed"] and not other:
            fail("tshark reports a malformed packet")
        for sev, msg in zip(r["_ws.expert.severity"].split(","),
                            r["_ws.expert.message"].split(",")):
            if sev and int(sev, 0) >= SEVERITY_WARN and not other:
                fail("expert item %s: %s" % (sev, msg))
        # ip.checksum.status: 1 = good (with ip.check_checksum on).
        if r["ip.hdr_len"] and r["ip.checksum.status"] != "1":
            fail("IPv4 checksum not good: %r" % r["ip.checksum.status"])
        if exp["cls"] == "none":
            if r["infiniband.bth.opcode"]:
                fail("tshark decodes a non-RoCE frame as InfiniBand")
            continue
        roce += 1
        want = {"infiniband.bth.opcode": int(exp["opcode"], 16),
                "infiniband.bth.destqp": int(exp["qp"], 16),
                "infiniband.bth.psn": int(exp["psn"]),
                "infiniband.bth.padcnt": int(exp["pad"])}
        if exp["dma"] != "-":
            want["infiniband.reth.dmalen"] = int(exp["dma"])
        for field, value in want.items():
            got = r[field]
            if got == "" or int(got, 0) != value:
                fail("%s = %r, want %d" % (field, got, value))
        stored = int(exp["icrc"], 16)
        vlans = int(exp["vlans"])
        computed = u.icrc_manual(frame, 14 + 4 * vlans, exp["l3"] == "6")
        if computed != stored:
            fail("ICRC in frame 0x%08x, recomputed from its bytes 0x%08x" % (stored, computed))
        seen = r["infiniband.invariant.crc"]
        # Wireshark 4.0 has no CNP decoder (it shows opcode 0x81 as vendor data) and shows no ICRC
        # for frames it cannot fully decode; everywhere else it must show ours.
        if seen == "" and exp["cls"] in ("cnp", "other"):
            continue
        # tshark reads the four ICRC bytes big-endian; the wire value is little-endian.
        if seen == "" or struct.unpack("<I", struct.pack(">I", int(seen, 0)))[0] != stored:
            fail("tshark ICRC %r, want bytes of 0x%08x" % (seen, stored))
        if has_status and r["infiniband.invariant.crc.status"] != "1":
            fail("tshark ICRC status %r" % r["infiniband.invariant.crc.status"])
    for line in failures[:40]:
        print(line)
    if failures:
        print("%d problems in %d frames" % (len(failures), len(rows)))
        return 1
    print("tshark decodes %d RoCE frames of %d cleanly; ICRC %s" %
          (roce, len(rows), "verified by tshark" if has_status else "values match"))
    if roce < 150:
        print("too few RoCE frames checked")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
