#!/bin/bash
# recv_mode = packet on a real link layer: two network namespaces joined by a veth pair, the server
# droce-perf in packet mode (its packet socket on the veth), the client in the default mode.
#   - WRITE 64 KiB and SEND 1 B (latency) verified, server rx_dropped_bad_icrc 0;
#   - during the run, python in the client's namespace sends the server raw IPv4 frames from
#     another address of that namespace: an RC SEND to the server's QP with IPv4 ID 0x1234 and a
#     correct ICRC (verified, then refused as not from its peer: rx_dropped_bad_qp), and the same
#     with a wrong ICRC (rx_dropped_bad_icrc exactly 1).
# Needs root and iproute2 network namespaces (exits 77 without). Namespaces and veths carry the
# PID; the trap removes them and kills what is left.
# usage: uring_packet_veth_test.sh PATH/TO/droce-perf
set -u
bin=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
timeout 10 ip netns list > /dev/null 2>&1 || { echo "SKIP: no ip netns"; exit 77; }
tag=up$$
nsa=droce-$tag-a
nsb=droce-$tag-b
va=dq$$a
vb=dq$$b
n=$(($$ % 250 + 1))
ip_a=10.97.$n.1
ip_b=10.97.$n.2
ip_x=10.97.$n.3 # the foreign sender, in the client's namespace
tmp=$(mktemp -d /tmp/droce-upveth.XXXXXX)
pids=
cleanup() {
    local p
    for p in $pids; do kill "$p" 2> /dev/null; done
    wait 2> /dev/null
    timeout 10 ip netns del "$nsa" 2> /dev/null
    timeout 10 ip netns del "$nsb" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
timeout 10 ip netns add "$nsa" && timeout 10 ip netns add "$nsb" || { echo "SKIP: no netns"; exit 77; }
timeout 10 ip link add "$va" netns "$nsa" type veth peer name "$vb" netns "$nsb" ||
    { echo "SKIP: no veth"; exit 77; }
for side in a b; do
    ns=$nsa iface=$va addr=$ip_a
    [ $side = b ] && ns=$nsb iface=$vb addr=$ip_b
    timeout 10 ip -n "$ns" link set lo up
    timeout 10 ip -n "$ns" link set "$iface" up
    timeout 10 ip -n "$ns" addr add "$addr/24" dev "$iface"
    mode=auto
    [ $side = b ] && mode=packet
    cat > "$tmp/$side.ini" << INI
[device]
name = upveth-$side

[port0]
driver = uring
ip = $addr/24
interface = $iface
recv_mode = $mode

[qp]
path_mtu = 1024
INI
done
timeout 10 ip -n "$nsa" addr add "$ip_x/24" dev "$va"
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# run NAME CLIENT_ARGS...: server in $nsb (packet mode), client in $nsa; $tmp/NAME.*.
run_pair() {
    local name=$1
    shift
    timeout 40 ip netns exec "$nsb" "$bin" --server --once -c "$tmp/b.ini" --json \
        > "$tmp/$name.server.json" 2> "$tmp/$name.server.err" &
    spid=$!
    pids="$pids $spid"
    for _ in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2> /dev/null && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.05
    done
    timeout 30 ip netns exec "$nsa" "$bin" "$ip_b" -c "$tmp/a.ini" "$@" \
        > "$tmp/$name.client.out" 2> "$tmp/$name.client.err" &
    cpid=$!
    pids="$pids $cpid"
}
finish() { # NAME
    wait "$cpid"
    local crc=$?
    wait "$spid"
    local src=$?
    pids=
    echo "$1: client exit $crc, server exit $src"
    [ "$crc" = 0 ] && [ "$src" = 0 ] || {
        tail -3 "$tmp/$1.client.err" "$tmp/$1.server.err"
        fail "$1: a process failed"
    }
    grep -q "data verified   : yes" "$tmp/$1.client.out" || fail "$1: data not verified"
}
counter() { # FILE NAME
    /usr/bin/python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["counters"].get(sys.argv[2], 0))
except Exception: print(-1)' "$1" "$2"
}

run_pair write --op write -s 65536 -D 3 --bw --verify
sleep 1.5 # under way: the server counts from the end of the handshake
timeout 10 ip netns exec "$nsa" /usr/bin/python3 - "$ip_x" "$ip_b" << 'PY'
import socket, struct, sys, zlib
src, dst = sys.argv[1], sys.argv[2]
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
body = struct.pack(">BBHII", 0x04, 0x00, 0xFFFF, 0x11, 0) + b"\x00" * 8  # RC SEND_ONLY to QP 0x11
udp_len = 8 + len(body) + 4
sport = 0xC777
def ip(tos, ttl, csum):
    return struct.pack(">BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, 0x1234, 0x4000, ttl, 17, csum,
                       socket.inet_aton(src), socket.inet_aton(dst))
masked = bytearray(body)
masked[4] = 0xFF
icrc = zlib.crc32(b"\xff" * 8 + ip(0xFF, 0xFF, 0xFFFF) +
                  struct.pack(">HHHH", sport, 4791, udp_len, 0xFFFF) + bytes(masked))
udp = struct.pack(">HHHH", sport, 4791, udp_len, 0)
for c in (icrc, icrc ^ 1):  # right, then wrong
    raw.sendto(ip(0, 64, 0) + udp + body + struct.pack("<I", c), (dst, 0))
print("python: two frames with IPv4 ID 0x1234 from %s, one with a wrong ICRC" % src)
PY
finish write
bad=$(counter "$tmp/write.server.json" rx_dropped_bad_icrc)
badqp=$(counter "$tmp/write.server.json" rx_dropped_bad_qp)
echo "write: server rx_dropped_bad_icrc $bad, rx_dropped_bad_qp $badqp"
[ "$bad" = 1 ] || fail "rx_dropped_bad_icrc '$bad' (want 1: only the wrong ICRC)"
[ "$badqp" -ge 1 ] 2> /dev/null || fail "rx_dropped_bad_qp '$badqp' (want >= 1: the ID 0x1234 frame verified)"

run_pair send --op send -s 1 -n 200 --lat --verify
finish send
bad=$(counter "$tmp/send.server.json" rx_dropped_bad_icrc)
[ "$bad" = 0 ] || fail "send: rx_dropped_bad_icrc $bad"

if [ "$fails" = 0 ]; then
    echo "PASS: uring packet mode over veth ($SECONDS s)"
    exit 0
fi
echo "FAIL: $fails check(s) failed"
exit 1
