#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The attacker and referee of wire_attack_test.sh, run inside the attacker's network namespace.

  wire_attack.py VICTIM TMP NS_A NS_B KERNEL_IP_B IFACE TCP_PORT ATTACKER_IP FOREIGN_IP

Starts two wire-victim processes (the server in NS_B, the client in NS_A; their configs are
TMP/a.ini and TMP/b.ini), which connect and run a verified RDMA WRITE stream A -> B, then sends
scapy-forged RoCEv2 frames from IFACE (a raw packet socket on the same bridge) and checks, from the
victims' status lines, the IBTA outcome of each attack, the counters, and that no byte of the
guarded MR or its canaries changed except where an accepted WRITE put it. Prints one line per check
and exits with the number of failed checks (77 when scapy is missing).
"""
import json
import random
import socket
import struct
import sys
import time

from victims import Victims

try:
    from scapy.all import Ether, IP, UDP, Raw
    from scapy.contrib.roce import BTH
except ImportError as e:  # pragma: no cover - depends on the host
    print(f"scapy not available: {e}: skipped")
    sys.exit(77)

victim, tmp, ns_a, ns_b, kernel_b, iface, tcp_port, att_ip, foreign_ip = sys.argv[1:10]
K = 20  # copies of each frame that must be dropped
FLOOD = 100_000

# RC opcodes (IBTA table 38) and AETH syndromes (table 44).
WRITE_FIRST, WRITE_ONLY, READ_REQUEST = 0x06, 0x0A, 0x0C
READ_RESP_FIRST, READ_RESP_LAST, READ_RESP_ONLY, ACK = 0x0D, 0x0F, 0x10, 0x11
SYN_ACK, SYN_RNR, SYN_NAK_ACCESS = 0x1F, 0x20 | 1, 0x62

v = Victims(victim, tmp)
check = v.check
status = v.status


def start(side, ns, role):
    v.start(side, side, [*role, "--idle", "10"], prefix=["timeout", "240", "ip", "netns", "exec", ns])


start("b", ns_b, ["--server", "--port", tcp_port])
if not v.wait_for("b", "waiting for the client"):
    v.bye("the server did not start")
start("a", ns_a, ["--client", f"{kernel_b}:{tcp_port}"])
for side in ("a", "b"):
    if not v.wait_for(side, "connected"):
        v.bye(f"{side} did not connect")
A = json.load(open(f"{tmp}/a.json"))
B = json.load(open(f"{tmp}/b.json"))
att_mac = open(f"/sys/class/net/{iface}/address").read().strip()
print(f"A {A['mac']} {A['ip']}  B {B['mac']} {B['ip']}  attacker {att_mac} {att_ip} on {iface}")
print(f"B's guarded MR: va {B['g_va']:#x} len {B['g_len']} rkey {B['g_rkey']:#x} "
      f"(stale rkey {B['stale_rkey']:#x})")

sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((iface, 0))


def roce(dqpn, psn, opcode, payload=b"", dst_mac=None, dst_ip=None, src_ip=None, to=B):
    """A RoCEv2 frame to side `to` (B by default) as if from its peer, ICRC by scapy."""
    peer = A if to is B else B
    p = (Ether(src=att_mac, dst=dst_mac or to["mac"]) /
         IP(src=src_ip or peer["ip"], dst=dst_ip or to["ip"], flags="DF", ttl=64, id=0) /
         UDP(sport=0xC123, dport=4791, chksum=0) /
         BTH(opcode=opcode, dqpn=dqpn, psn=psn & 0xFFFFFF, ackreq=1) / Raw(payload))
    return bytes(p)


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


def aeth(syndrome, msn=0):
    return struct.pack(">I", (syndrome << 24) | (msn & 0xFFFFFF))


def write(k, va, rkey, data, psn=None, dmalen=None, **kw):
    q = B["idle"][k]
    return roce(q["qpn"], q["rq_psn"] if psn is None else psn, WRITE_ONLY,
                reth(va, rkey, len(data) if dmalen is None else dmalen) + data, **kw)


def send(frames, copies=1):
    # In slices well inside a victim's receive ring (net_af_packet: 512 frames): on a loaded host
    # (CI runs tests side by side on two cores) a burst of 720 forged responses outran an engine
    # kept off the CPU, and the kernel dropped what the full ring could not take before droce saw
    # it (512 of 720 counted). The flood below is the test of a full ring.
    for n, f in enumerate(f for _ in range(copies) for f in frames):
        sock.send(f)
        if n % 128 == 127:
            time.sleep(0.02)
    time.sleep(0.4)  # the victims' engines take them and answer


def delta(before, after, *names, block="counters"):
    return sum(after[block][n] - before[block][n] for n in names)


def qp(st, side, k):
    info = (A if side == "a" else B)["idle"][k]
    return st["qps"][str(info["qpn"])]


def qpd(before, after, side, k, name):
    """The change of counter NAME of idle QP K of SIDE (its own counter block)."""
    qpn = str((A if side == "a" else B)["idle"][k]["qpn"])
    return (after["qp_counters"].get(qpn, {}).get(name, 0) -
            before["qp_counters"].get(qpn, {}).get(name, 0))


g_va, g_len, g_rkey = B["g_va"], B["g_len"], B["g_rkey"]
data64 = bytes(range(1, 65))
time.sleep(1)
b0 = status("b")
check("the stream runs before the attacks", b0["stream"]["verified"] > 0,
      f"{b0['stream']['verified']} messages verified")

# ---- 1. The receive filter: frames not addressed to B never reach a QP.
cases = [
    ("foreign unicast destination MAC", dict(dst_mac="02:00:00:de:ad:01"), "rx_dropped_dst_mac"),
    ("broadcast MAC, another host's IP", dict(dst_mac="ff:ff:ff:ff:ff:ff", dst_ip=foreign_ip),
     "rx_dropped_dst_mac"),
    ("broadcast MAC, B's own IP", dict(dst_mac="ff:ff:ff:ff:ff:ff"), "rx_dropped_dst_mac"),
    ("B's MAC, another host's IP", dict(dst_ip=foreign_ip), "rx_dropped_dst_ip"),
    ("B's MAC and IP, the attacker's source IP", dict(src_ip=att_ip), "rx_dropped_bad_qp"),
]
for name, kw, counter in cases:
    before = status("b")
    send([write(0, g_va, g_rkey, data64, **kw)], K)
    after = status("b")
    d = delta(before, after, counter)
    # dst_mac also counts the kernel's own traffic on the veth: at least K; the others exactly K.
    check(f"filter: {name}: {counter} +{K}", d >= K if counter == "rx_dropped_dst_mac" else d == K,
          f"+{d}")
    check(f"filter: {name}: nothing executed", after["g"]["changed"] == [] and
          qp(after, "b", 0) == qp(before, "b", 0), f"{qp(after, 'b', 0)}")
before = status("b")
send([roce(0xABCDE, 0, WRITE_ONLY, reth(g_va, g_rkey, 64) + data64)], K)
after = status("b")
check(f"no such QPN: rx_dropped_bad_qp +{K}", delta(before, after, "rx_dropped_bad_qp") == K,
      f"+{delta(before, after, 'rx_dropped_bad_qp')}")

# ---- 2. Truncated at every length: dropped, each counted by the parser's reject reason.
full = write(0, g_va, g_rkey, data64)
before = status("b")
send([full[:n] for n in range(14, len(full))])
after = status("b")
# Cut inside the IP header: too_short; after it, the IP total length exceeds the frame.
d = delta(before, after, "too_short", "bad_ip_length", block="parse")
check(f"truncated frames (14..{len(full) - 1} bytes): {len(full) - 14} counted too_short or "
      "bad_ip_length", d == len(full) - 14, f"+{d}")
# Those whose UDP header is whole name port 4791: malformed RoCE for the device's counters.
m = delta(before, after, "rx_dropped_malformed")
check(f"truncated frames with a whole UDP header ({len(full) - 42} of them): rx_dropped_malformed "
      f"+{len(full) - 42}", m == len(full) - 42, f"+{m}")
check("truncated frames: nothing executed, canaries intact", after["g"]["changed"] == [] and
      after["g"]["canaries_intact"] and qp(after, "b", 0) == qp(before, "b", 0))
bad_icrc = bytearray(full)
bad_icrc[-1] ^= 0xFF
before = status("b")
send([bytes(bad_icrc)], K)
after = status("b")
check(f"a wrong ICRC: rx_dropped_bad_icrc +{K}", delta(before, after, "rx_dropped_bad_icrc") == K,
      f"+{delta(before, after, 'rx_dropped_bad_icrc')}")

# ---- 3. PSNs outside the window, from the right source with the right rkey: never executed.
q1 = B["idle"][1]
before = status("b")
send([write(1, g_va, g_rkey, data64, psn=q1["rq_psn"] + 0x400000),
      write(1, g_va, g_rkey, data64, psn=q1["rq_psn"] + 5),
      write(1, g_va, g_rkey, data64, psn=q1["rq_psn"] - 0x100000),
      write(1, g_va, g_rkey, data64, psn=q1["rq_psn"] - 1)], K)
after = status("b")
check("PSNs ahead of and behind the expected PSN: nothing written, QP in RTS, expected PSN kept",
      after["g"]["changed"] == [] and qp(after, "b", 1)["state"] == "rts" and
      qp(after, "b", 1)["rq_psn"] == q1["rq_psn"], f"{qp(after, 'b', 1)}")
check(f"PSNs outside the window: the QP counted out_of_sequence +{2 * K}, duplicate_request "
      f"+{2 * K}", qpd(before, after, "b", 1, "out_of_sequence") == 2 * K and
      qpd(before, after, "b", 1, "duplicate_request") == 2 * K,
      f"out_of_sequence +{qpd(before, after, 'b', 1, 'out_of_sequence')}, duplicate_request "
      f"+{qpd(before, after, 'b', 1, 'duplicate_request')}")


# ---- 4. Guessed and stale rkeys at the expected PSN: NAK remote access error, the QP to ERR.
def one_write_error(k, name, frame, want="resp_remote_access_errors"):
    before, a_before = status("b"), status("a")
    send([frame])
    after, a_after = status("b"), status("a")
    check(f"{name}: B's QP sent a NAK ({want} +1, sent_pkts +1)",
          qpd(before, after, "b", k, want) == 1 and qpd(before, after, "b", k, "sent_pkts") == 1,
          f"{want} +{qpd(before, after, 'b', k, want)}, sent_pkts "
          f"+{qpd(before, after, 'b', k, 'sent_pkts')}")
    check(f"{name}: the NAK reached A's QP (for a PSN it never sent: dropped there)",
          qpd(a_before, a_after, "a", k, "rcvd_pkts") == 1 and
          qp(a_after, "a", k)["state"] == "rts",
          f"rcvd_pkts +{qpd(a_before, a_after, 'a', k, 'rcvd_pkts')}, {qp(a_after, 'a', k)}")
    check(f"{name}: B's QP in ERR", qp(after, "b", k)["state"] == "err", f"{qp(after, 'b', k)}")
    check(f"{name}: no byte changed, canaries intact",
          after["g"]["changed"] == before["g"]["changed"] and after["g"]["canaries_intact"])


guess = random.Random(7).randrange(1, 1 << 32)
while guess in (g_rkey, B["stale_rkey"]):
    guess += 1
one_write_error(1, f"guessed rkey {guess:#x}", write(1, g_va, guess, data64))
one_write_error(2, f"stale rkey {B['stale_rkey']:#x} (deregistered; its slot reused)",
                write(2, g_va, B["stale_rkey"], data64))

# ---- 5. VAs and lengths at and past the MR's bounds, right rkey, expected PSN.
q3 = B["idle"][3]
before, a_before = status("b"), status("a")
send([write(3, g_va + g_len - 16, g_rkey, b"\xC3" * 16)])
after, a_after = status("b"), status("a")
check("WRITE of the MR's last 16 bytes (the peer's address, PSN and rkey: RoCE cannot tell): "
      "placed and ACKed", after["g"]["changed"] == [[g_len - 16, 16]] and
      qp(after, "b", 3)["rq_psn"] == (q3["rq_psn"] + 1) & 0xFFFFFF and
      qpd(before, after, "b", 3, "acks_sent") == 1 and
      qpd(a_before, a_after, "a", 3, "rcvd_pkts") == 1,
      f"changed {after['g']['changed']}, acks_sent +{qpd(before, after, 'b', 3, 'acks_sent')}")
placed = after["g"]["changed"]
one_write_error(3, "WRITE 1 byte past the MR's end",
                write(3, g_va + g_len - 15, g_rkey, b"\x3C" * 16, psn=q3["rq_psn"] + 1))
one_write_error(4, "WRITE 1 byte before the MR's start", write(4, g_va - 1, g_rkey, data64))
one_write_error(5, "READ of 200 bytes across the MR's end",
                roce(B["idle"][5]["qpn"], B["idle"][5]["rq_psn"], READ_REQUEST,
                     reth(g_va + g_len - 100, g_rkey, 200)))
# A WRITE ONLY whose DMA length is not its payload's is a length error (invalid request) before its
# range is looked at, as in rxe; a FIRST announcing a message past the MR is an access error on that
# first packet: the whole DMA range is checked against the MR before a byte is placed.
one_write_error(6, "WRITE ONLY announcing a 4 GiB DMA length",
                write(6, g_va, g_rkey, data64, dmalen=0xFFFFFFFF), want="resp_invalid_request")
one_write_error(8, "WRITE FIRST of a 64 KiB message starting 64 bytes before the MR's end",
                roce(B["idle"][8]["qpn"], B["idle"][8]["rq_psn"], WRITE_FIRST,
                     reth(g_va + g_len - 64, g_rkey, 65536) + b"\xAB" * 1024))
one_write_error(7, "WRITE carrying 64 bytes for a DMA length of 16",
                write(7, g_va, g_rkey, data64, dmalen=16), want="resp_invalid_request")
end = status("b")
check("after every bound attack: only the accepted WRITE's bytes changed, canaries intact",
      end["g"]["changed"] == placed and end["g"]["canaries_intact"], f"{end['g']['changed']}")

# ---- 6. Forged responses at A's requester (its idle QP 0: nothing outstanding).
qa = A["idle"][0]
responses = [(ACK, aeth(SYN_ACK)), (ACK, aeth(SYN_NAK_ACCESS)), (ACK, aeth(SYN_RNR)),
             (READ_RESP_ONLY, aeth(SYN_ACK) + data64), (READ_RESP_FIRST, aeth(SYN_ACK) + data64),
             (READ_RESP_LAST, aeth(SYN_ACK) + data64)]
forged = [roce(qa["qpn"], qa["sq_psn"] + off, op, pay, to=A, src_ip=src)
          for op, pay in responses for off in (-1, 0, 1) for src in (att_ip, None)]
before = status("a")
send(forged, K)
after = status("a")
wrong_src = len(forged) // 2 * K
check(f"forged ACK/NAK/RNR/READ responses from the wrong source: rx_dropped_bad_qp +{wrong_src}",
      delta(before, after, "rx_dropped_bad_qp") == wrong_src,
      f"+{delta(before, after, 'rx_dropped_bad_qp')}")
right_src = len(forged) // 2 * K
check(f"forged responses from the right source: all {right_src} reached A's QP, which dropped them "
      "(completer_retry_err: a PSN it never sent; an old PSN: a duplicate, ignored)",
      qpd(before, after, "a", 0, "rcvd_pkts") == right_src and
      qpd(before, after, "a", 0, "completer_retry_err") >= 1,
      f"rcvd_pkts +{qpd(before, after, 'a', 0, 'rcvd_pkts')}, completer_retry_err "
      f"+{qpd(before, after, 'a', 0, 'completer_retry_err')}")
check("forged responses: A's QP in RTS, its next PSN unchanged, no error completion",
      qp(after, "a", 0) == qp(before, "a", 0) and qp(after, "a", 0)["state"] == "rts" and
      after["stream"]["error_completions"] == 0, f"{qp(after, 'a', 0)}")
check("A's guarded MR untouched", after["g"]["changed"] == [] and after["g"]["canaries_intact"])

# ---- 7. A 100 k-frame flood at B's stream QP while the verified transfer runs.
rng = random.Random(11)
kinds, sent = [], [0] * 8
for i in range(200):
    r = rng.randrange(8)  # 6, 7: the right source and destination (PSNs out of the window)
    f = roce(B["stream_qpn"], rng.randrange(1 << 24), WRITE_ONLY,
             reth(rng.randrange(1 << 64), rng.randrange(1 << 32), 64) + data64,
             src_ip=att_ip if r < 2 else None, dst_ip=foreign_ip if r == 2 else None,
             dst_mac="02:00:00:de:ad:02" if r == 3 else None)
    if r == 4:
        f = f[:rng.randrange(14, len(f))]
    if r == 5:
        f = bytes(rng.randrange(256) if rng.random() < 0.05 else c for c in f)
    kinds.append(f)
    sent[r] += FLOOD // 200
s0a, s0b = status("a"), status("b")
t0 = time.time()
for i in range(FLOOD):
    sock.send(kinds[i % len(kinds)])
    if i % 256 == 255:
        time.sleep(0.0005)
secs = time.time() - t0
time.sleep(1.5)
s1a, s1b = status("a"), status("b")
dropped = delta(s0b, s1b, "rx_dropped_dst_mac", "rx_dropped_dst_ip", "rx_dropped_bad_qp",
                "rx_dropped_malformed", "rx_dropped_bad_icrc", "out_of_sequence",
                "duplicate_request") + delta(s0b, s1b, "too_short", "bad_ip_length", "not_ip",
                                                "bad_ip_version", "ip_fragment", "not_udp",
                                                block="parse")
print(f"flood: {FLOOD} frames in {secs:.2f} s; B counted {dropped} dropped or refused; the stream "
      f"moved {s1b['stream']['verified'] - s0b['stream']['verified']} messages meanwhile")
# Each kind by its own counter, at least 90 % of what was sent (the rest may be lost in the kernel's
# packet ring). The right-source frames' NAKs make A go back and send again, which B counts as
# duplicates too; corrupted frames may land in any counter.
for name, kinds_of, got in [
        ("from the wrong source: rx_dropped_bad_qp", (0, 1), delta(s0b, s1b, "rx_dropped_bad_qp")),
        ("to another host's IP: rx_dropped_dst_ip", (2,), delta(s0b, s1b, "rx_dropped_dst_ip")),
        ("to another MAC: rx_dropped_dst_mac", (3,), delta(s0b, s1b, "rx_dropped_dst_mac")),
        ("truncated: too_short / bad_ip_length", (4,),
         delta(s0b, s1b, "too_short", "bad_ip_length", block="parse")),
        ("the right source, PSN out of the window: out_of_sequence / duplicate_request", (6, 7),
         delta(s0b, s1b, "out_of_sequence", "duplicate_request"))]:
    want = sum(sent[k] for k in kinds_of)
    check(f"flood: {name}: at least 90 % of {want}", got >= want * 9 // 10, f"{got}")
check("flood: the stream kept going, every message verified",
      s1b["stream"]["verified"] > s0b["stream"]["verified"] and s1b["stream"]["bad"] == 0 and
      s1a["stream"]["error_completions"] == 0 and s1b["stream"]["error_completions"] == 0)
check("flood: guarded MRs unchanged", s1b["g"]["changed"] == placed and
      s1b["g"]["canaries_intact"] and s1a["g"]["changed"] == [] and s1a["g"]["canaries_intact"])

# ---- The end: every message the client completed was received and verified, in order.
finals = {side: v.quit(side) for side in ("a", "b")}
fa, fb = finals["a"], finals["b"]
if fa and fb:
    print(f"stream: {fa['stream']['completed']} messages of 4 KiB completed by A, "
          f"{fb['stream']['verified']} verified by B, {fb['stream']['bad']} bad")
    check("stream: every completed message verified at B, none bad, no error completion",
          fa["stream"]["completed"] == fb["stream"]["verified"] and fb["stream"]["bad"] == 0 and
          fa["stream"]["error_completions"] == 0 and fb["stream"]["error_completions"] == 0)
else:
    check("final status lines", False)
print(f"failures: {v.failures}")
sys.exit(min(v.failures, 76))
