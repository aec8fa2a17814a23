#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Debian's scapy (scapy.contrib.roce) as an independent RoCEv2 implementation for droce's interop tests.

  scapy_roce.py icrc FILE.pcap
      For every frame: dissect it, drop its ICRC (icrc=None) so that scapy computes it on rebuild,
      and print "<index> <scapy icrc> <wire icrc> <rest-identical>" (ICRCs as the 4 wire bytes in hex;
      rest-identical is 1 when the rebuilt frame equals the original apart from the ICRC).
  scapy_roce.py build FILE.pcap
      Write frames that scapy builds (ICRC computed by scapy) and print, per frame, the values it put in
      as "key=value" pairs, for droce to parse and compare.

Exit status 77 means scapy (or its RoCE module) cannot be imported: the caller skips.
"""
import sys

try:
    from scapy.all import Ether, Dot1Q, IP, UDP, Raw, rdpcap, wrpcap
    from scapy.contrib.roce import BTH, AETH, cnp
except ImportError as e:  # pragma: no cover - depends on the host
    print(f"scapy not available: {e}", file=sys.stderr)
    sys.exit(77)


def icrc(path):
    for i, pkt in enumerate(rdpcap(path)):
        raw = bytes(pkt)
        p = Ether(raw)
        if BTH not in p:
            print(f"{i} none {raw[-4:].hex()} 0")
            continue
        p[BTH].icrc = None
        rebuilt = bytes(p)
        same = int(len(rebuilt) == len(raw) and rebuilt[:-4] == raw[:-4])
        print(f"{i} {rebuilt[-4:].hex()} {raw[-4:].hex()} {same}")


def l3(tos=0, ttl=64, sport=0xc001, vlan=None):
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / IP(src="10.0.0.1", dst="10.0.0.2", tos=tos, ttl=ttl, flags="DF") / UDP(sport=sport, dport=4791, chksum=0)


def build(path):
    frames, facts = [], []

    def add(pkt, **kv):
        frames.append(pkt)
        facts.append(" ".join(f"{k}={v}" for k, v in kv.items()))

    # RC ACKNOWLEDGE with an AETH (scapy binds AETH to opcode 0x11).
    add(l3(tos=0x02) / BTH(opcode=0x11, dqpn=0x000123, psn=0xfffffe, ackreq=0) / AETH(syndrome=0x1F, msn=0x00ABCD),
        opcode=0x11, dqpn=0x000123, psn=0xfffffe, syndrome=0x1F, msn=0x00ABCD, payload="")
    # NAK PSN sequence error, over 802.1Q.
    add(l3(vlan=7) / BTH(opcode=0x11, dqpn=0x800001, psn=17) / AETH(syndrome=0x60, msn=5),
        opcode=0x11, dqpn=0x800001, psn=17, syndrome=0x60, msn=5, payload="")
    # CNP: BECN set, 16 reserved bytes.
    add(l3(tos=0xc3, sport=0) / cnp(0x000118), opcode=0x81, dqpn=0x000118, psn=0, becn=1, payload="")
    # RC SEND ONLY, 8 bytes, no pad; ECN CE and FECN set (both outside the ICRC).
    data = bytes(range(0x40, 0x48))
    add(l3(tos=0x03) / BTH(opcode=0x04, dqpn=0x11, psn=1000, fecn=1, ackreq=1, solicited=1) / Raw(data),
        opcode=0x04, dqpn=0x11, psn=1000, fecn=1, payload=data.hex())
    # UC SEND ONLY, 5 payload bytes and 3 pad bytes.
    data = b"droce"
    add(l3(ttl=1) / BTH(opcode=0x24, dqpn=0x12, psn=7, padcount=3) / Raw(data + b"\0\0\0"),
        opcode=0x24, dqpn=0x12, psn=7, payload=data.hex())
    wrpcap(path, frames)
    for f in facts:
        print(f)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("icrc", "build"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    {"icrc": icrc, "build": build}[sys.argv[1]](sys.argv[2])
