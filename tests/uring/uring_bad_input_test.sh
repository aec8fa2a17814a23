#!/bin/bash
# Bad input on the socket of a uring port (drivers/uring) while a verified transfer runs: a plain
# python UDP socket sends the server's port garbage (an unknown opcode), truncated datagrams (empty,
# 3 bytes: shorter than a BTH and ICRC), a well-formed RC SEND whose ICRC is wrong, one longer than
# the port's buffers, and a forged source: an RC SEND to the server's QP with a correct ICRC from an
# address that is not the client's. The server must survive (exit 0, the client's data verified)
# and count them in its --json counters: rx_dropped_malformed >= 3, rx_dropped_bad_icrc == 1 (so
# the forged frame's ICRC, computed here over the headers the port rebuilds, verified), and
# rx_dropped_bad_qp >= 1. Runs as nobody when started as root.
# usage: uring_bad_input_test.sh PATH/TO/droce-perf
set -u
bin=$1
. "$(dirname "$0")/common.sh"
uring_setup ubad
bin=$(reachable "$bin")

$run timeout 50 "$bin" --server -c "$tmp/b.ini" -p "$tcp_port" --once --json \
    > "$tmp/server.json" 2> "$tmp/server.err" &
spid=$!
pids="$spid"
for i in $(seq 1 200); do
    grep -q "waiting for a client" "$tmp/server.err" 2> /dev/null && break
    sleep 0.05
done
$run timeout 40 "$bin" "$ip_b" -c "$tmp/a.ini" -p "$tcp_port" --op write -s 4096 -D 4 --bw \
    --verify > "$tmp/client.out" 2> "$tmp/client.err" &
cpid=$!
pids="$spid $cpid"
sleep 2 # the run is under way: the server counts from the end of the handshake
$run /usr/bin/python3 - "$ip_b" "$udp_port" "${ip_b%.2}.3" <<'PY'
import socket, struct, sys, zlib
dst = (sys.argv[1], int(sys.argv[2]))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
# RC SEND_ONLY (opcode 0x04), P_Key 0xffff, destination QP 0x11, PSN 0, 8 bytes of payload, and an
# ICRC that is the CRC of something else.
bth = struct.pack(">BBHII", 0x04, 0x00, 0xFFFF, 0x11, 0)
sends = [
    b"\xff" * 100,                              # opcode 0xff: not in the opcode table
    b"",                                        # empty
    b"\x04\x00\xff",                            # truncated inside the BTH
    bth + b"\x00" * 8 + struct.pack("<I", zlib.crc32(b"not this packet")),  # wrong ICRC
    b"\x00" * 20000,                            # longer than a buffer
]
for p in sends:
    s.sendto(p, dst)
# A forged source: a well-formed RC SEND_ONLY to the server's QP (0x11, the first QPN of a device)
# with a correct ICRC, from an address that is not its peer's. The ICRC is computed over the
# headers the receiving port rebuilds (IPv4 ID 0 and DF; TOS, TTL, checksums masked to ones).
forged_src = sys.argv[3]
f = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
f.bind((forged_src, 0))
sport = f.getsockname()[1]
body = struct.pack(">BBHII", 0x04, 0x00, 0xFFFF, 0x11, 0) + b"\x00" * 8
udp_len = 8 + len(body) + 4
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0xFF, 20 + udp_len, 0, 0x4000, 0xFF, 17, 0xFFFF,
                 socket.inet_aton(forged_src), socket.inet_aton(dst[0]))
udp = struct.pack(">HHHH", sport, 4791, udp_len, 0xFFFF)
masked = bytearray(body)
masked[4] = 0xFF
icrc = zlib.crc32(b"\xff" * 8 + ip + udp + bytes(masked))
f.sendto(body + struct.pack("<I", icrc), dst)
print("python: sent %d datagrams to %s:%d, one from %s" % (len(sends) + 1, dst[0], dst[1], forged_src))
PY
wait "$cpid"
crc=$?
wait "$spid"
src=$?
pids=
echo "client exit $crc, server exit $src"
/usr/bin/python3 - "$tmp/server.json" "$tmp/client.out" "$crc" "$src" <<'PY'
import json, sys
problems = []
if sys.argv[3] != "0" or sys.argv[4] != "0":
    problems.append("a process failed (client %s, server %s)" % (sys.argv[3], sys.argv[4]))
client = open(sys.argv[2]).read()
if "data verified   : yes" not in client:
    problems.append("the client's data was not verified")
try:
    c = json.load(open(sys.argv[1]))["counters"]
except Exception as e:
    print(open(sys.argv[1]).read()[-2000:])
    sys.exit("no server JSON: %s" % e)
print("server: rx_dropped_malformed %d, rx_dropped_bad_icrc %d, rx_dropped_bad_qp %d" %
      (c["rx_dropped_malformed"], c["rx_dropped_bad_icrc"], c["rx_dropped_bad_qp"]))
if c["rx_dropped_malformed"] < 3: problems.append("rx_dropped_malformed < 3")
if c["rx_dropped_bad_icrc"] != 1: problems.append("rx_dropped_bad_icrc is not 1 (the wrong one)")
if c["rx_dropped_bad_qp"] < 1: problems.append("rx_dropped_bad_qp < 1 (the forged source)")
for p in problems: print("FAIL: " + p)
sys.exit(1 if problems else 0)
PY
