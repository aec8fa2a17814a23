#!/bin/bash
# Bad input on the socket of a uring port (drivers/uring) while a verified transfer runs: a plain
# python UDP socket sends the server's port garbage (an unknown opcode), truncated datagrams (empty,
# 5 bytes: shorter than a BTH and ICRC), a well-formed RC SEND whose ICRC is wrong, and one longer
# than the port's buffers. The server must survive (exit 0, the client's data verified) and count
# them: rx_dropped_malformed >= 3 and rx_dropped_bad_icrc >= 1 in its --json counters. Runs as nobody
# when started as root.
# usage: uring_bad_input_test.sh PATH/TO/droce-perf
set -u
bin=$1
. "$(dirname "$0")/common.sh"
uring_setup ubad
bin=$(reachable "$bin")

$run timeout 50 "$bin" --server -c "$tmp/b.ini" -p "$tcp_port" --json \
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
$run /usr/bin/python3 - "$ip_b" "$udp_port" <<'PY'
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
print("python: sent %d datagrams to %s:%d" % (len(sends), dst[0], dst[1]))
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
print("server: rx_dropped_malformed %d, rx_dropped_bad_icrc %d" %
      (c["rx_dropped_malformed"], c["rx_dropped_bad_icrc"]))
if c["rx_dropped_malformed"] < 3: problems.append("rx_dropped_malformed < 3")
if c["rx_dropped_bad_icrc"] < 1: problems.append("rx_dropped_bad_icrc < 1")
for p in problems: print("FAIL: " + p)
sys.exit(1 if problems else 0)
PY
