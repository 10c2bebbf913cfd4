"""faultproxy.py - an HTTP proxy on loopback that breaks the first ranged
GETs it forwards, for the object-storage tests.

    faultproxy.py UPSTREAM_PORT PORTFILE MODE COUNT [--down-seconds S]
                  [--after K] [--delay-ms D]

Listens on an ephemeral 127.0.0.1 port (written to PORTFILE), forwards
every request verbatim (the Host header too, so a Signature V4 made for
the proxy's address still verifies upstream) to 127.0.0.1:UPSTREAM_PORT,
and spoils the first COUNT GETs that carry a Range header:

    reset      the status line, the headers and half the body, then the
               connection is closed (a reset mid-body)
    slowdown   503 with an S3 SlowDown body and Retry-After: 1
    error500   500 with an S3 InternalError body
    stall      the headers, then no byte for 4 s, then close
    truncate   the headers with the real Content-Length, half the body,
               then close
    shortlen   Content-Length one byte short of the body it forwards
    down       (with --down-seconds S) every request is refused by
               closing the connection at once for S seconds after the
               first ranged GET; COUNT is ignored
    replace    (with --replace FILER_PORT FILE) before forwarding the first
               COUNT ranged GETs, the object is replaced upstream with
               FILE's bytes (through SeaweedFS's filer): the GET's If-Match
               then no longer holds
    log        spoils nothing: every GET is logged, with its path, its
               Range and the status and bytes of the answer (COUNT ignored)

With --after K the first K ranged GETs pass unspoiled (a fault in the
middle of an epoch rather than at its start).  With --delay-ms D every
request waits D ms before it is forwarded: a link with a round trip of D ms
more (for the benchmarks; the machine has no netem).

Every spoiled request adds a line to PORTFILE.log.  Runs until killed;
each request is answered or dropped, so it loops no longer than its
clients do.
"""
import http.client
import socket
import socketserver
import sys
import threading
import time

UP = int(sys.argv[1])
PORTFILE = sys.argv[2]
MODE = sys.argv[3]
COUNT = int(sys.argv[4])
OPTS = sys.argv[5:]
DOWN = float(OPTS[OPTS.index("--down-seconds") + 1]) if "--down-seconds" in OPTS else 0.0
REPLACE = ((int(OPTS[OPTS.index("--replace") + 1]), OPTS[OPTS.index("--replace") + 2])
           if "--replace" in OPTS else None)
AFTER = int(OPTS[OPTS.index("--after") + 1]) if "--after" in OPTS else 0
DELAY = float(OPTS[OPTS.index("--delay-ms") + 1]) / 1e3 if "--delay-ms" in OPTS else 0.0
lock = threading.Lock()
state = {"spoiled": 0, "down_until": None, "ranged": 0}


def log(line):
    with open(PORTFILE + ".log", "a") as f:
        f.write(line + "\n")


def read_request(f):
    line = f.readline()
    if not line:
        return None
    headers = []
    while True:
        h = f.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers.append((k.strip(), v.strip()))
    body = b""
    for k, v in headers:
        if k.lower() == "content-length" and int(v):
            body = f.read(int(v))
    method, path, _ = line.decode("latin-1").split(" ", 2)
    return method, path, headers, body


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        req = read_request(self.rfile)
        if not req:
            return
        method, path, headers, body = req
        ranged = method == "GET" and any(k.lower() == "range" for k, _ in headers)
        rng = [v for k, v in headers if k.lower() == "range"]
        if rng and not rng[0].startswith("bytes=0-"):
            with open(PORTFILE.rsplit(".", 1)[0] + ".resumed", "a") as f:
                f.write("resumed %s %s\n" % (path, rng[0]))
        spoil = None
        with lock:
            now = time.monotonic()
            if ranged:
                state["ranged"] += 1
            if ranged and state["ranged"] <= AFTER:
                pass
            elif MODE == "down":
                if ranged and state["down_until"] is None:
                    state["down_until"] = now + DOWN
                if state["down_until"] is not None and now < state["down_until"]:
                    spoil = "down"
            elif ranged and state["spoiled"] < COUNT:
                state["spoiled"] += 1
                spoil = MODE
        if spoil == "down":
            log("down %s" % path)
            self.connection.close()
            return
        if spoil == "slowdown" or spoil == "error500":
            code, name = (503, "SlowDown") if spoil == "slowdown" else (500, "InternalError")
            msg = ("<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>injected</Message>"
                   "</Error>" % name).encode()
            extra = "Retry-After: 1\r\n" if spoil == "slowdown" else ""
            self.wfile.write(("HTTP/1.1 %d %s\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n"
                              % (code, name, len(msg), extra)).encode() + msg)
            log("%s %s" % (spoil, path))
            return
        if spoil == "replace" and REPLACE:
            # path-style: /BUCKET/KEY; the filer keeps buckets at /buckets/
            f = http.client.HTTPConnection("127.0.0.1", REPLACE[0], timeout=30)
            f.request("PUT", "/buckets" + path.split("?")[0], body=open(REPLACE[1], "rb").read())
            f.getresponse().read()
            log("replace %s" % path)
            spoil = None
        if DELAY:
            time.sleep(DELAY)
        up = http.client.HTTPConnection("127.0.0.1", UP, timeout=30)
        up.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers:
            if k.lower() not in ("connection",):
                up.putheader(k, v)
        up.putheader("Connection", "close")
        up.endheaders(body or None)
        r = up.getresponse()
        data = r.read() if method != "HEAD" else b""
        hdrs = [(k, v) for k, v in r.getheaders()
                if k.lower() not in ("connection", "transfer-encoding", "content-length")]
        length = len(data) if method != "HEAD" else int(r.getheader("Content-Length") or 0)
        if spoil == "shortlen":
            length -= 1
        head = "HTTP/1.1 %d %s\r\n" % (r.status, r.reason)
        head += "".join("%s: %s\r\n" % kv for kv in hdrs)
        head += "Content-Length: %d\r\nConnection: close\r\n\r\n" % length
        self.wfile.write(head.encode("latin-1"))
        if spoil in ("reset", "truncate"):
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if spoil == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           b"\x01\x00\x00\x00\x00\x00\x00\x00")
            log("%s %s" % (spoil, path))
            return
        if spoil == "stall":
            self.wfile.flush()
            log("stall %s" % path)
            time.sleep(4)
            return
        if spoil == "shortlen":
            log("shortlen %s" % path)
        if MODE == "log" and method == "GET":
            log("GET %s %s %d %d" % (path.split("?")[0], rng[0] if rng else "-",
                                     r.status, len(data)))
        self.wfile.write(data[:length] if spoil == "shortlen" else data)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", 0), Handler)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(PORTFILE + ".tmp", PORTFILE)
srv.serve_forever()
