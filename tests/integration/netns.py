"""Live-traffic harness: heddled between veth pairs in a private network namespace.

The pcap tests replay a fixed trace and cannot put traffic before and after a run-time change;
this one sends frames while heddled runs and captures what it forwards:

    ns = netns.Netns.for_test(self)          # skips the test if namespaces/veths are impossible
    d = netns.NetnsDaemon(ns, [("host0", "host", netns.af_packet_vdev(0, "h0")),
                               ("uplink0", "uplink", netns.af_packet_vdev(1, "u0"))],
                          data_room=netns.DATA_ROOM)
    self.addCleanup(d.cleanup)
    d.start()
    cap = ns.capture("u0p", count=len(frames))   # listening when it returns
    ns.send("h0p", frames)
    out = cap.wait()

Netns creates veth pairs (h0 <-> h0p, u0 <-> u0p by default) inside the namespace, all up, MTU
9000 (a 4 KiB RoCE payload is a 4170-byte frame), IPv6 off so the kernel sends nothing of its
own. heddled runs in the namespace via `ip netns exec`, on net_af_packet ports over h0 and u0; the
test writes into h0p and reads u0p. Sockets are opened in the namespace from a short-lived thread
that setns(2)s into it, so sending and capturing need no helper process and no scapy.

Ordering: a veth delivers a frame on the CPU that sent it, so the sender pins itself to one CPU;
frames then reach heddled in the order given.
"""

import ctypes
import errno
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import unittest
import urllib.request
import uuid

import harness

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33
NETNS_PREFIX = "heddle-it-"

# net_af_packet ring: one frame slot per packet, big enough for a 4 KiB-MTU RoCE frame (4170 B)
# plus the tpacket header; one slot per block. FRAMECNT slots hold a whole test batch, so a
# heddled descheduled for a while on a busy machine loses nothing.
FRAMESZ = 8192
FRAMECNT = 1024
# The PMD refuses an RX queue whose mbufs cannot hold a whole slot (framesz - 32 bytes) after
# the 128-byte headroom.
DATA_ROOM = FRAMESZ + 128

_libc = ctypes.CDLL(None, use_errno=True)


class Unavailable(Exception):
    """This machine cannot create a network namespace with veth pairs (the reason says why)."""


def af_packet_vdev(index, iface, framesz=FRAMESZ, framecnt=FRAMECNT):
    """The devargs of a DPDK 22.11 net_af_packet port on `iface` (one queue pair)."""
    return "net_af_packet%d,iface=%s,blocksz=%d,framesz=%d,framecnt=%d" % (
        index, iface, framesz, framesz, framecnt)


def _run(argv, check=True):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, argv, p.stdout, p.stderr)
    return p


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale():
    """Deletes namespaces this harness left behind in runs that were killed (their pid is
    gone); never touches a namespace of a live process or one it did not name."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return
    for name in names:
        if not name.startswith(NETNS_PREFIX):
            continue
        try:
            pid = int(name[len(NETNS_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if not _pid_alive(pid):
            _run(["ip", "netns", "delete", name], check=False)


class Netns:
    """A private network namespace holding veth pairs, named uniquely per instance."""

    def __init__(self, pairs=(("h0", "h0p"), ("u0", "u0p")), mtu=9000):
        self.pairs = tuple(pairs)
        self.mtu = mtu
        self.name = "%s%d-%s" % (NETNS_PREFIX, os.getpid(), uuid.uuid4().hex[:8])
        self.path = os.path.join("/run/netns", self.name)
        self._created = False

    @classmethod
    def for_test(cls, test, **kw):
        """Creates a namespace for `test`, deleted by test.addCleanup (also when the test
        fails). Skips the test, saying why, only if the machine cannot make one."""
        ns = cls(**kw)
        try:
            ns.create()
        except Unavailable as e:
            test.skipTest("no network namespace with veth pairs on this machine: %s" % e)
        test.addCleanup(ns.delete)
        return ns

    def create(self):
        if not shutil.which("ip"):
            raise Unavailable("iproute2's `ip` is not installed")
        if os.geteuid() != 0:
            raise Unavailable("creating a network namespace needs root (euid %d)" % os.geteuid())
        _sweep_stale()
        p = _run(["ip", "netns", "add", self.name], check=False)
        if p.returncode != 0:
            raise Unavailable("`ip netns add` failed: %s" % p.stderr.strip())
        self._created = True
        try:
            # Before the links exist, so no veth ever gets an IPv6 link-local address (and
            # sends no router or neighbour solicitations onto the wire under test).
            for key in ("all", "default"):
                self.run("sysctl", "-q", "-w", "net.ipv6.conf.%s.disable_ipv6=1" % key)
            self.ip("link", "set", "lo", "up")  # heddled's metrics listen on 127.0.0.1
            for a, b in self.pairs:
                p = _run(["ip", "-n", self.name, "link", "add", a, "mtu", str(self.mtu), "type",
                          "veth", "peer", "name", b, "mtu", str(self.mtu)], check=False)
                if p.returncode != 0:
                    raise Unavailable("cannot create veth pair %s/%s: %s" %
                                      (a, b, p.stderr.strip()))
            for a, b in self.pairs:
                self.ip("link", "set", a, "up")
                self.ip("link", "set", b, "up")
        except BaseException:
            self.delete()
            raise
        return self

    def delete(self):
        if self._created:
            _run(["ip", "netns", "delete", self.name], check=False)
            self._created = False

    def prefix(self):
        """argv prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def run(self, *argv, check=True):
        return _run(self.prefix() + list(argv), check=check)

    def ip(self, *argv):
        return _run(["ip", "-n", self.name] + list(argv))

    def call(self, fn):
        """Runs fn() on a thread that has entered the namespace and returns its result: sockets
        it opens belong to the namespace and stay usable from any thread."""
        box = {}

        def body():
            try:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    if _libc.setns(fd, CLONE_NEWNET) != 0:
                        e = ctypes.get_errno()
                        raise OSError(e, "setns(%s): %s" % (self.path, os.strerror(e)))
                finally:
                    os.close(fd)
                box["value"] = fn()
            except BaseException as e:  # handed to the caller's thread
                box["error"] = e

        t = threading.Thread(target=body, name="netns-" + self.name)
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def packet_socket(self, iface, proto=ETH_P_ALL):
        """An AF_PACKET raw socket bound to `iface` inside the namespace (proto 0: send only)."""
        def make():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
            try:
                s.bind((iface, proto))
            except BaseException:
                s.close()
                raise
            return s
        return self.call(make)

    def send(self, iface, frames, cpu=None):
        """Sends each frame (bytes, Ethernet header first) out of `iface` in order. The sending
        thread is pinned to one CPU so the veth hands frames on in the same order."""
        s = self.packet_socket(iface, proto=0)
        err = {}

        def body():
            try:
                os.sched_setaffinity(0, {cpu if cpu is not None else min(os.sched_getaffinity(0))})
                for f in frames:
                    while True:
                        try:
                            s.send(f)
                            break
                        except OSError as e:  # a full device queue: wait, never skip a frame
                            if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                                raise
                            time.sleep(0.001)
            except BaseException as e:
                err["error"] = e

        try:
            t = threading.Thread(target=body, name="send-" + iface)
            t.start()
            t.join()
        finally:
            s.close()
        if "error" in err:
            raise err["error"]

    def capture(self, iface, count=None, timeout=10.0, udp_port=4791, linger=0.3):
        """Starts capturing frames arriving on `iface` (not those it sends); returns once the
        socket is listening. With udp_port set, only UDP (IPv4/IPv6) frames to that port are kept.
        Call wait() on the result for the frames."""
        return Capture(self.packet_socket(iface), count, timeout, udp_port, linger)

    def scrape(self, url):
        """GET `url` from inside the namespace (heddled's metrics listen on its loopback)."""
        def get():
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read().decode()
        return self.call(get)


def udp_dport(frame):
    """Destination port of a UDP-over-IPv4/IPv6 Ethernet frame (VLAN tags skipped), or None."""
    off = 14
    if len(frame) < off:
        return None
    ethertype = struct.unpack("!H", frame[12:14])[0]
    while ethertype in (0x8100, 0x88A8) and len(frame) >= off + 4:
        ethertype = struct.unpack("!H", frame[off + 2:off + 4])[0]
        off += 4
    if ethertype == 0x0800 and len(frame) >= off + 20:
        if frame[off + 9] != 17:
            return None
        off += (frame[off] & 0x0F) * 4
    elif ethertype == 0x86DD and len(frame) >= off + 40:
        if frame[off + 6] != 17:
            return None
        off += 40
    else:
        return None
    if len(frame) < off + 4:
        return None
    return struct.unpack("!H", frame[off + 2:off + 4])[0]


class Capture:
    """Frames arriving on one interface, collected by a background thread (see Netns.capture)."""

    def __init__(self, sock, count, timeout, udp_port, linger):
        self.sock = sock
        self.count = count
        self.timeout = timeout
        self.udp_port = udp_port
        self.linger = linger
        self.frames = []
        self._stop = threading.Event()
        self._enough = threading.Event()
        # Room for a whole batch however late the test reads: 64 MiB is ~25 000 4 KiB frames.
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._loop, name="capture", daemon=True)
        self._thread.start()

    def _loop(self):
        try:
            while not self._stop.is_set():
                try:
                    data, addr = self.sock.recvfrom(65536)
                except socket.timeout:
                    continue
                if addr[2] == PACKET_OUTGOING:
                    continue
                if self.udp_port is not None and udp_dport(data) != self.udp_port:
                    continue
                self.frames.append(data)
                if self.count is not None and len(self.frames) >= self.count:
                    self._enough.set()
        finally:
            self._enough.set()

    def wait(self):
        """Waits for `count` frames (or `timeout` s without them), keeps listening `linger` s
        more so surplus frames show up too, then stops and returns every frame captured."""
        if self.count is None:
            time.sleep(self.timeout)
        else:
            self._enough.wait(self.timeout)
        time.sleep(self.linger)
        self.stop()
        return list(self.frames)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


class NetnsDaemon(harness.Daemon):
    """harness.Daemon run inside a namespace: same config, socket and heddlectl; heddled is
    started by `ip netns exec`, which execs it (proc.pid is heddled's pid)."""

    def __init__(self, ns, ports, **kw):
        super().__init__(ports, **kw)
        self.ns = ns

    def start(self, timeout=30):
        self._logf = open(self.log, "w")
        self.proc = subprocess.Popen(self.ns.prefix() + [harness.HEDDLED, "-c", self.config],
                                     stdout=self._logf, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("heddled exited %d at start-up:\n%s" %
                                   (self.proc.returncode, self.read_log()))
            if os.path.exists(self.socket):
                try:
                    self.ctl("show", "status")
                    return self
                except subprocess.CalledProcessError:
                    pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("heddled did not come up in %ds:\n%s" % (timeout, self.read_log()))

    def scrape(self):
        return self.ns.scrape(self.metrics_url())

    def cleanup(self):
        super().cleanup()
        if getattr(self, "_logf", None) and not self._logf.closed:
            self._logf.close()

    def ctl_run(self, *args):
        """heddlectl without check=True: the CompletedProcess, for commands expected to fail."""
        return subprocess.run([harness.HEDDLECTL, "-s", self.socket] + list(args),
                              capture_output=True, text=True, timeout=20)


if __name__ == "__main__":
    # Smoke test of the harness alone: a frame sent on h0p arrives on h0.
    class _Smoke(unittest.TestCase):
        def test_veth(self):
            ns = Netns.for_test(self)
            frame = bytes.fromhex("02000000000102000000000208004500001c0000400040110000"
                                  "0a0000010a00000212b712b700080000")
            cap = ns.capture("h0", count=1, timeout=5)
            ns.send("h0p", [frame + bytes(60 - len(frame))])
            self.assertEqual(len(cap.wait()), 1)
    unittest.main()
