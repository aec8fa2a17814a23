#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes the seed corpora of the fuzz targets into OUT/<target>/ (one file per seed).

  fuzz_frame   every Ethernet frame of the captures in tests/data/captures
  fuzz_rc      each RoCE frame as a one-record script (as captured, and with the harness's fix-up
  fuzz_mrc     so that it reaches the live QP), plus scripts that post each kind of WQE and run
  fuzz_config  the shipped configs (config/*.ini)
  fuzz_trace   the captures themselves, large ones cut at a block boundary after 16 KiB

The captures are split here with the standard library alone (classic pcap and pcapng), so the
corpus does not depend on what libpcap or scapy accept. Usage: seeds.py SOURCE_ROOT OUT
"""
import hashlib
import pathlib
import struct
import sys

CUT = 16 * 1024


def pcap_frames(b):
    """Frames of a classic pcap (either byte order, us or ns); [] if it is not one."""
    magic = b[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        return [], None
    linktype = struct.unpack(e + "I", b[20:24])[0]
    out, pos, ends = [], 24, [24]
    while pos + 16 <= len(b):
        incl = struct.unpack(e + "I", b[pos + 8:pos + 12])[0]
        out.append(b[pos + 16:pos + 16 + incl])
        pos += 16 + incl
        ends.append(pos)
    return (out if linktype == 1 else []), ends


def pcapng_frames(b):
    """Frames of the Enhanced and Simple Packet Blocks of a pcapng; [] if it is not one."""
    if b[:4] != b"\x0a\x0d\x0d\x0a" or len(b) < 12:
        return [], None
    e = "<" if b[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    out, pos, ends = [], 0, []
    while pos + 12 <= len(b):
        btype, blen = struct.unpack(e + "II", b[pos:pos + 8])
        if blen < 12:
            break
        if btype == 6:  # EPB
            cap = struct.unpack(e + "I", b[pos + 20:pos + 24])[0]
            out.append(b[pos + 28:pos + 28 + cap])
        elif btype == 3:  # SPB
            out.append(b[pos + 12:pos + blen - 4])
        pos += blen
        ends.append(pos)
    return out, ends


def write(d, data):
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def is_roce(f):
    """IPv4 or IPv6 / UDP dport 4791, after an optional VLAN tag."""
    off, et = 14, f[12:14]
    if et == b"\x81\x00":
        off, et = 18, f[16:18]
    if et == b"\x08\x00" and len(f) > off + 24:
        ihl = (f[off] & 15) * 4
        return f[off + 9] == 17 and f[off + ihl + 2:off + ihl + 4] == b"\x12\xb7"
    if et == b"\x86\xdd" and len(f) > off + 44:
        return f[off + 6] == 17 and f[off + 42:off + 44] == b"\x12\xb7"
    return False


def record(kind, side, fix, frame):
    return bytes([kind | side << 2 | (8 if fix else 0)]) + struct.pack("<H", len(frame)) + frame


def main():
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    frames = []
    for cap in sorted((src / "tests/data/captures").iterdir()):
        b = cap.read_bytes()
        fr, ends = pcapng_frames(b)
        if ends is None:
            fr, ends = pcap_frames(b)
        if ends is None:
            continue
        frames += fr
        if len(b) > CUT:  # a whole number of blocks / records just past CUT
            b = b[:next((x for x in ends if x >= CUT), len(b))]
        write(out / "fuzz_trace", b)
    seen = set()
    roce = []
    for f in frames:
        h = hashlib.sha1(f).digest()
        if h in seen:
            continue
        seen.add(h)
        write(out / "fuzz_frame", f)
        if is_roce(f):
            roce.append(f)
    for target in ("fuzz_rc", "fuzz_mrc"):
        for i, f in enumerate(roce[:100]):
            write(out / target, record(0, i & 1, True, f))
            write(out / target, record(0, i & 1, False, f))
        # Each WQE kind from each side, run, then a forged frame against the outstanding work.
        for op in range(7):
            for side in (0, 1):
                post = bytes([1 | side << 2, op]) + struct.pack("<HH", 100 + 900 * op, 8 * op)
                script = post + bytes([2, 31, 3, 5, 2, 31])
                write(out / target, script)
                if roce:
                    write(out / target, post + record(0, side, True, roce[op % len(roce)]))
    for ini in sorted((src / "config").glob("*.ini")):
        write(out / "fuzz_config", ini.read_bytes())


if __name__ == "__main__":
    main()
