#!/usr/bin/python3
"""Traffic probe for the emulated WAN: a server and the clients that measure through it.

  wan_probe.py serve --port P [--bind ADDR]       # prints "ready" once listening
  wan_probe.py rtt --to HOST:PORT [--count 5]     # JSON: connect_s, rtt_s list (1-byte ping-pong)
  wan_probe.py send --to HOST:PORT (--bytes N | --seconds T) [--streams K]
                                                  # JSON: bytes, seconds, bps measured by the server
  wan_probe.py pingpong --to HOST:PORT            # prints "connected", then one 1-byte round
                                                  # trip per stdin line, printing its seconds
  wan_probe.py wait --to HOST:PORT [--timeout 10] # exits 0 once something listens there

The server speaks a one-letter protocol on each connection: 'E' echoes until EOF; 'S' reads until
EOF and answers with a JSON line {bytes, first_ns, last_ns} (time.monotonic_ns of the first and last
byte received); the monotonic clock is system-wide, so spans of parallel streams can be merged.
Throughput is measured where the bytes arrive, so bytes still buffered in a delay relay when the
sender finishes do not count. Standard library only (Debian's /usr/bin/python3).
"""
import argparse
import json
import socket
import sys
import threading
import time

CHUNK = 4 << 20
SOCKBUF = 4 << 20


def parse_hostport(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def tune(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def handle(conn):
    try:
        tune(conn)
        mode = conn.recv(1)
        if mode == b"E":
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(data)
        elif mode == b"S":
            buf = bytearray(CHUNK)
            view = memoryview(buf)
            total = 0
            first = last = 0
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                last = time.monotonic_ns()
                if total == 0:
                    first = last
                total += n
            reply = json.dumps({"bytes": total, "first_ns": first, "last_ns": last}) + "\n"
            conn.sendall(reply.encode())
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        conn.close()


def serve(args):
    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, args.port))
    srv.listen(256)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def connect(to, timeout=60):
    host, port = parse_hostport(to)
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(None)
    tune(s)
    return s


def rtt(args):
    t0 = time.monotonic()
    s = connect(args.to, args.timeout)
    connect_s = time.monotonic() - t0
    s.sendall(b"E")
    samples = []
    for i in range(args.count):
        b = bytes([65 + i % 26])
        t0 = time.monotonic()
        s.sendall(b)
        got = s.recv(1)
        samples.append(time.monotonic() - t0)
        if got != b:
            sys.exit(f"rtt: echo mismatch: sent {b!r}, got {got!r}")
    s.close()
    print(json.dumps({"connect_s": connect_s, "rtt_s": samples}))


def pingpong(args):
    s = connect(args.to)
    s.sendall(b"E")
    print("connected", flush=True)
    for _ in sys.stdin:
        t0 = time.monotonic()
        s.sendall(b"p")
        if s.recv(1) != b"p":
            sys.exit("pingpong: connection lost")
        print(time.monotonic() - t0, flush=True)
    s.close()


def wait(args):
    host, port = parse_hostport(args.to)
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError as e:
            if time.monotonic() >= deadline:
                sys.exit(f"wait: nothing listens on {args.to} after {args.timeout} s: {e}")
            time.sleep(0.05)


def send_stream(to, nbytes, deadline, results, idx):
    s = connect(to)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKBUF)
    s.sendall(b"S")
    payload = memoryview(bytes(CHUNK))
    sent = 0
    while True:
        if nbytes is not None:
            if sent >= nbytes:
                break
            n = min(CHUNK, nbytes - sent)
        else:
            if time.monotonic() >= deadline:
                break
            n = CHUNK
        s.sendall(payload[:n])
        sent += n
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        data = s.recv(4096)
        if not data:
            break
        reply += data
    s.close()
    results[idx] = json.loads(reply.decode())


def send(args):
    per_stream = None if args.bytes is None else args.bytes // args.streams
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    results = [None] * args.streams
    threads = [threading.Thread(target=send_stream,
                                args=(args.to, per_stream, deadline, results, i))
               for i in range(args.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(r is None for r in results):
        sys.exit("send: a stream failed")
    total = sum(r["bytes"] for r in results)
    first = min(r["first_ns"] for r in results if r["bytes"])
    last = max(r["last_ns"] for r in results if r["bytes"])
    seconds = max(last - first, 1) / 1e9
    print(json.dumps({"bytes": total, "seconds": seconds, "bps": total * 8 / seconds,
                      "streams": args.streams}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bind", default="0.0.0.0")
    p = sub.add_parser("rtt")
    p.add_argument("--to", required=True)
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60, help="connect timeout, seconds")
    p = sub.add_parser("pingpong")
    p.add_argument("--to", required=True)
    p = sub.add_parser("wait")
    p.add_argument("--to", required=True)
    p.add_argument("--timeout", type=float, default=10)
    p = sub.add_parser("send")
    p.add_argument("--to", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--bytes", type=int)
    g.add_argument("--seconds", type=float)
    p.add_argument("--streams", type=int, default=1)
    args = ap.parse_args()
    {"serve": serve, "rtt": rtt, "send": send, "pingpong": pingpong, "wait": wait}[args.cmd](args)


if __name__ == "__main__":
    main()
