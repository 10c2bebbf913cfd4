#!/usr/bin/env python3
"""delayline.py - a packet delay line for the network-namespace harness
(netns.sh), for kernels without netem (sch_netem), which is the usual way
to add latency and the one this machine's kernel lacks.

    delayline.py TUN CONFIG READYFILE STATSFILE

Run inside the router namespace.  Opens the TUN device TUN (IFF_TUN, with
virtio-net headers and the kernel's TCP segmentation offloads, so that a
64 KiB TSO packet crosses as one read and one write, not 45), writes
READYFILE, and then, until SIGTERM: every IPv4 packet that the router's
policy routing sends into TUN is held for its delay and written back into
TUN, where the kernel routes it on by the main table.  Packets are whole
IP packets, so TCP sees a real round trip: the handshake, slow start,
its windows and its acknowledgements all wait, as on a long link.

CONFIG holds lines "SUBNET/PREFIX ONE_WAY_MS" (the one-way delay of every
packet to or from that subnet, i.e. half the round trip the link adds);
a packet waits the sum of its source's and its destination's.  SIGHUP
reads CONFIG again (a packet already held keeps its time) and then writes
the number of CONFIG's "# generation N" line to READYFILE.gen, so that
the caller knows from when on the new delays hold.  Bandwidth is
not limited here: the queue holds every packet for its delay (up to 256
MiB, beyond which a packet is dropped and counted, as a router's full
queue would); a cap is tbf's work on the links (netns.sh netns_rate).

STATSFILE gets a JSON line on SIGUSR1 and at exit: packets, bytes, the
deepest queue in bytes, drops, and how late the latest packet was written
and how many were over 1 ms late: the scheduling delay of this process,
which a busy machine adds to the delay asked for).  Every loop waits on
select() or a condition with a deadline; nothing spins.
"""
import fcntl
import heapq
import ipaddress
import json
import os
import select
import signal
import struct
import sys
import threading
import time

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TUN, IFF_NO_PI, IFF_VNET_HDR = 0x0001, 0x1000, 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
VNET_HDR = 10            # struct virtio_net_hdr
QUEUE_LIMIT = 256 << 20  # bytes held at once before drops

state = {"reload": False, "dump": False, "stop": False}


def load(path):
    """([(network, one-way seconds)], generation) from CONFIG; bad lines
    are skipped; "# generation N" names this version of the file."""
    nets, gen = [], ""
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 3 and p[:2] == ["#", "generation"]:
                    gen = p[2]
                if len(p) != 2 or p[0].startswith("#"):
                    continue
                try:
                    nets.append((ipaddress.ip_network(p[0], strict=False), float(p[1]) / 1e3))
                except ValueError:
                    continue
    except OSError:
        pass
    return nets, gen


def table(nets):
    """Lookup of an address's delay: {(net int, mask int): seconds}."""
    return [(int(n.network_address), int(n.netmask), d) for n, d in nets if n.version == 4]


def delay_of(tab, pkt):
    if len(pkt) < VNET_HDR + 20 or pkt[VNET_HDR] >> 4 != 4:
        return 0.0
    src, dst = struct.unpack_from("!II", pkt, VNET_HDR + 12)
    d = 0.0
    for net, mask, s in tab:
        if src & mask == net:
            d += s
        if dst & mask == net:
            d += s
    return d


def main():
    tun_name, config, ready, statsf = sys.argv[1:5]
    ack = ready + ".gen"
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    ifr = struct.pack("16sH", tun_name.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR)
    fcntl.ioctl(fd, TUNSETIFF, ifr)
    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)

    def reload():
        nets, gen = load(config)
        with open(ack + ".tmp", "w") as f:
            f.write(gen + "\n")
        os.rename(ack + ".tmp", ack)
        return table(nets)
    tab = reload()

    def on_signal(signum, frame):
        if signum == signal.SIGHUP:
            state["reload"] = True
        elif signum == signal.SIGUSR1:
            state["dump"] = True
        else:
            state["stop"] = True
    for s in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    # A signal wakes the main thread's select() at once.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    with open(ready + ".tmp", "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(ready + ".tmp", ready)

    # The reader thread stamps each packet as it comes out of TUN; the
    # writer thread writes each back when due.  Apart, so that the kernel
    # work a write does (it carries the packet on to the receiving
    # socket) never makes a packet wait to be read and stamped.
    heap = []            # (due, seq, packet); protected by cv
    cv = threading.Condition()
    st = {"packets": 0, "bytes": 0, "max_queue_bytes": 0, "drops": 0,
          "write_errors": 0, "max_late_ms": 0.0, "mean_late_ms": 0.0,
          "late_over_1ms": 0, "late_over_5ms": 0, "late_over_10ms": 0}
    late_sum = [0.0]
    q = {"held": 0, "seq": 0}   # protected by cv

    def reader():
        while not state["stop"]:
            r, _, _ = select.select([fd], [], [], 0.5)
            if not r:
                continue
            for _ in range(64):
                try:
                    pkt = os.read(fd, 1 << 17)
                except BlockingIOError:
                    break
                due = time.monotonic() + delay_of(tabs[0], pkt)
                with cv:
                    if q["held"] + len(pkt) > QUEUE_LIMIT:
                        st["drops"] += 1
                        continue
                    q["seq"] += 1
                    heapq.heappush(heap, (due, q["seq"], pkt))
                    q["held"] += len(pkt)
                    if q["held"] > st["max_queue_bytes"]:
                        st["max_queue_bytes"] = q["held"]
                    if heap[0][2] is pkt:
                        cv.notify()

    def writer():
        while not state["stop"]:
            with cv:
                now = time.monotonic()
                if not heap or heap[0][0] > now:
                    cv.wait(0.5 if not heap else heap[0][0] - now)
                    continue
                out = []
                while heap and heap[0][0] <= now:
                    due, _, pkt = heapq.heappop(heap)
                    q["held"] -= len(pkt)
                    out.append((due, pkt))
            for due, pkt in out:
                late = (time.monotonic() - due) * 1e3
                if late > st["max_late_ms"]:
                    st["max_late_ms"] = late
                late_sum[0] += late
                for ms in (1, 5, 10):
                    if late > ms:
                        st[f"late_over_{ms}ms"] += 1
                try:
                    os.write(fd, pkt)
                except OSError:     # full, or a packet the kernel refuses
                    st["write_errors"] += 1
                    continue
                st["packets"] += 1
                st["bytes"] += len(pkt) - VNET_HDR
                st["mean_late_ms"] = late_sum[0] / st["packets"]

    def dump():
        with open(statsf + ".tmp", "w") as f:
            f.write(json.dumps(st) + "\n")
        os.rename(statsf + ".tmp", statsf)

    # Hand the interpreter lock over every 0.2 ms (5 ms by default), so
    # that a writer whose packet is due does not wait on the reader.
    sys.setswitchinterval(0.0002)
    tabs = [tab]
    threads = [threading.Thread(target=f, daemon=True) for f in (reader, writer)]
    for t in threads:
        t.start()
    while not state["stop"]:
        r, _, _ = select.select([wake_r], [], [], 1.0)
        if r:
            try:
                os.read(wake_r, 64)
            except BlockingIOError:
                pass
        if state["reload"]:
            state["reload"] = False
            tabs[0] = reload()
        if state["dump"]:
            state["dump"] = False
            dump()
    with cv:
        cv.notify_all()
    for t in threads:
        t.join(2.0)
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
