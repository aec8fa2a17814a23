#!/bin/bash
# recv_mode = packet of a uring port (drivers/uring): a peer whose IPv4 ID is not 0 verifies.
# The client droce-perf (as nobody) sends its frames to a python relay instead of the server; the
# relay re-sends each through a raw IPv4 socket with a per-packet IPv4 ID (never 0, DF) and an
# ICRC computed over that header, as a peer with an ID counter would; the server answers the
# client directly. The server in packet mode (root: CAP_NET_RAW) must verify every byte with no
# ICRC error; the same server in the default mode (UDP socket: rebuilds ID 0) must reject the
# relayed frames (rx_dropped_bad_icrc) so the client fails. As nobody, packet mode is refused with
# a message that names CAP_NET_RAW.
# usage: uring_packet_test.sh PATH/TO/droce-perf
set -u
bin=$1
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: needs root (packet and raw sockets; the client runs as nobody)"
    exit 77
fi
. "$(dirname "$0")/common.sh"
uring_setup upkt
bin=$(reachable "$bin")
relay_port=$((udp_port + 1))
sed "s/^udp_port = .*/&\nrecv_mode = packet/" "$tmp/b.ini" > "$tmp/b-packet.ini"
sed "s/^udp_port = .*/&\npeer_udp_port = $relay_port/" "$tmp/a.ini" > "$tmp/a-relay.ini"
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# 1. Without CAP_NET_RAW: refused, and the message says why.
if $run timeout 10 "$bin" --server --once -c "$tmp/b-packet.ini" -p "$tcp_port" \
    > /dev/null 2> "$tmp/nocap.err"; then
    fail "packet mode started as nobody"
fi
echo "as nobody: $(head -c 400 "$tmp/nocap.err")"
grep -q "CAP_NET_RAW" "$tmp/nocap.err" || fail "the refusal does not name CAP_NET_RAW"

# The relay: UDP datagrams from the client to (server ip, relay_port) go on to (server ip,
# udp_port) from a raw socket with IPv4 ID 1, 2, ... and their ICRC recomputed over that header
# (destination 4791 in it: the port rewrites the test's UDP port to the one the ICRC covers).
relay() {
    /usr/bin/python3 - "$ip_b" "$relay_port" "$udp_port" "$1" <<'PY' &
import signal, socket, struct, sys, zlib
ip_b, relay_port, udp_port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((ip_b, relay_port))
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
count, ident = 0, 0
def stop(*_):
    open(out, "w").write("%d %d\n" % (count, ident))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(out, "w").write("ready\n")
while True:
    data, (src, sport) = s.recvfrom(65535)
    if len(data) < 16:
        continue
    ident = ident % 0xFFFF + 1
    udp_len = 8 + len(data)
    def ip(tos, ttl, csum):
        return struct.pack(">BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, ident, 0x4000, ttl, 17, csum,
                           socket.inet_aton(src), socket.inet_aton(ip_b))
    body = bytearray(data[:-4])
    body[4] = 0xFF  # BTH FECN, BECN, reserved: ones in the ICRC
    icrc = zlib.crc32(b"\xff" * 8 + ip(0xFF, 0xFF, 0xFFFF) +
                      struct.pack(">HHHH", sport, 4791, udp_len, 0xFFFF) + bytes(body))
    raw.sendto(ip(0, 64, 0) + struct.pack(">HHHH", sport, udp_port, udp_len, 0) + data[:-4] +
               struct.pack("<I", icrc), (ip_b, 0))
    count += 1
PY
    rpid=$!
    pids="$pids $rpid"
    for i in $(seq 1 100); do
        grep -q ready "$1" 2> /dev/null && break
        sleep 0.05
    done
}

# run NAME SERVER_INI CLIENT_ARGS...: one server (root) and one client (nobody, through the
# relay); leaves $tmp/NAME.server.json, NAME.client.out, NAME.relay and $crc / $src.
run_pair() {
    local name=$1 sini=$2
    shift 2
    relay "$tmp/$name.relay"
    timeout 30 "$bin" --server --once -c "$sini" -p "$tcp_port" --json \
        > "$tmp/$name.server.json" 2> "$tmp/$name.server.err" &
    spid=$!
    pids="$pids $spid"
    for i in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2> /dev/null && break
        sleep 0.05
    done
    $run timeout 25 "$bin" "$ip_b" -c "$tmp/a-relay.ini" -p "$tcp_port" "$@" \
        > "$tmp/$name.client.out" 2> "$tmp/$name.client.err"
    crc=$?
    wait "$spid"
    src=$?
    kill "$rpid"
    wait "$rpid"
    pids=
    echo "$name: client exit $crc, server exit $src, relayed (frames, last IPv4 ID): $(cat "$tmp/$name.relay")"
}

# counter FILE NAME: a server counter from its --json output (-1 when there is none).
counter() {
    /usr/bin/python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["counters"].get(sys.argv[2], 0))
except Exception: print(-1)' "$1" "$2"
}

# 2. Packet mode: WRITE, READ and SEND verified with every frame to the server carrying an ID.
for spec in "write -s 65536 -n 60" "read -s 4097 -n 100" "send -s 4095 -n 100 --lat"; do
    set -- $spec
    run_pair "packet-$1" "$tmp/b-packet.ini" --op $spec --verify
    [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "packet mode $1: a process failed"
    grep -q "data verified   : yes" "$tmp/packet-$1.client.out" || {
        tail -5 "$tmp/packet-$1.client.out" "$tmp/packet-$1.client.err"
        fail "packet mode $1: data not verified"
    }
    read -r relayed last < "$tmp/packet-$1.relay"
    [ "${relayed:-0}" -ge 50 ] 2> /dev/null || fail "packet mode $1: only '$relayed' frames relayed"
    bad=$(counter "$tmp/packet-$1.server.json" rx_dropped_bad_icrc)
    echo "packet-$1: server rx_dropped_bad_icrc $bad"
    [ "$bad" = 0 ] || fail "packet mode $1: rx_dropped_bad_icrc $bad"
done

# 3. The default mode (UDP socket): the same frames fail their ICRC and the client cannot finish.
run_pair udp "$tmp/b.ini" --op write -s 4096 -n 20 --verify --timeout 8
bad=$(counter "$tmp/udp.server.json" rx_dropped_bad_icrc)
echo "udp: server rx_dropped_bad_icrc $bad"
[ "$crc" != 0 ] || fail "udp mode: the client succeeded with frames the port cannot verify"
[ "$bad" -ge 1 ] 2> /dev/null || fail "udp mode: rx_dropped_bad_icrc '$bad' (want >= 1)"

if [ "$fails" = 0 ]; then
    echo "PASS: uring packet mode ($((SECONDS)) s)"
    exit 0
fi
echo "FAIL: $fails check(s) failed"
exit 1
