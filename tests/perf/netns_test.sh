#!/bin/bash
# droce-perf between two processes in two network namespaces joined by a veth pair (net_af_packet),
# with private copies of config/netns-a.ini (client) and config/netns-b.ini (server):
#   - WRITE, READ, SEND and FETCH_ADD bandwidth with --verify (bounded -n), and one --lat run;
#   - a tshark capture on the veth (from inside the client's namespace), started before the traffic
#     and stopped after, in which droce-trace finds RoCEv2 frames of every expected opcode, all with
#     ICRC ok; tshark decodes them as InfiniBand (no malformed frames); and the ARP request and reply
#     between the two droce endpoints are there (the copies have no static neighbours).
# Addresses: the kernel holds 10.99.N.1/.2 on the veths for droce-perf's TCP channel (QPN, PSN, GID,
# rkey exchange); droce holds 10.98.N.1/.2 (its GIDs), which the kernel does not own, so only droce
# answers ARP for them and the kernel does not take the RoCE frames as its own.
# Needs root, iproute2 network namespaces and tshark; exits 77 (skipped) without them. Namespaces,
# veths and EAL prefixes carry the PID; every step runs under `timeout`; the trap kills what is left
# and removes the namespaces, the temporary files and the EAL runtime directories.
# usage: netns_test.sh PATH/TO/droce-perf PATH/TO/droce-trace SOURCE_DIR
set -u
perf=$1
trace=$2
src=$3
cfg=$src/config
[ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
command -v ip >/dev/null || { echo "no iproute2: skipped"; exit 77; }
timeout 10 ip netns list >/dev/null 2>&1 || { echo "ip netns unavailable: skipped"; exit 77; }
command -v tshark >/dev/null || { echo "no tshark: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }

tag=pn$$
nsa=droce-$tag-a
nsb=droce-$tag-b
va=dv$$a
vb=dv$$b
n=$(($$ % 250 + 1))
ka=10.99.$n.1  # kernel, TCP channel
kb=10.99.$n.2
da=10.98.$n.1  # droce (GIDs)
db=10.98.$n.2
tmp=$(mktemp -d)
runtime=/var/run/dpdk
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    timeout 10 ip netns del "$nsa" 2>/dev/null
    timeout 10 ip netns del "$nsb" 2>/dev/null
    timeout 10 ip link del "$va" 2>/dev/null
    rm -rf "$tmp" "$runtime/droce-$tag-a" "$runtime/droce-$tag-b"
}
trap cleanup EXIT

timeout 10 ip netns add "$nsa" || { echo "cannot create network namespaces: skipped"; exit 77; }
timeout 10 ip netns add "$nsb" || { echo "cannot create network namespaces: skipped"; exit 77; }
timeout 10 ip link add "$va" netns "$nsa" type veth peer name "$vb" netns "$nsb" ||
    { echo "cannot create a veth pair: skipped"; exit 77; }
up() { # NS IFACE KERNEL_ADDR
    timeout 10 ip -n "$1" link set lo up
    timeout 10 ip -n "$1" link set "$2" up
    timeout 10 ip -n "$1" addr add "$3/24" dev "$2"
}
up "$nsa" "$va" "$ka"
up "$nsb" "$vb" "$kb"

# Private configs: own iface, EAL prefix and droce address; no static neighbours, so ARP must happen.
sed -e "s|iface=veth0|iface=$va|" -e "s|--file-prefix=droce-netns-a|--file-prefix=droce-$tag-a|" \
    -e "s|^ip = 10\.2\.0\.1/24|ip = $da/24|" -e '/^10\.2\.0\.[0-9]* *=/d' "$cfg/netns-a.ini" > "$tmp/a.ini"
sed -e "s|iface=veth1|iface=$vb|" -e "s|--file-prefix=droce-netns-b|--file-prefix=droce-$tag-b|" \
    -e "s|^ip = 10\.2\.0\.2/24|ip = $db/24|" -e '/^10\.2\.0\.[0-9]* *=/d' "$cfg/netns-b.ini" > "$tmp/b.ini"
for f in a b; do
    if grep -v '^ *#' "$tmp/$f.ini" | grep -q '10\.2\.0\.\|veth[01]\|droce-netns'; then
        echo "FAIL: config copy $f.ini still names the shipped iface, prefix or addresses"; exit 1
    fi
done
mac_a=$(sed -n 's/^mac = //p' "$tmp/a.ini")
mac_b=$(sed -n 's/^mac = //p' "$tmp/b.ini")

failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# The capture: tshark on the client's veth, from inside its namespace.
cap=$tmp/veth.pcapng
timeout 600 ip netns exec "$nsa" tshark -n -i "$va" -w "$cap" > "$tmp/tshark.out" 2> "$tmp/tshark.err" &
tshark_pid=$!
pids+=("$tshark_pid")
for _ in $(seq 1 200); do
    grep -q "Capturing on" "$tmp/tshark.err" 2>/dev/null && break
    kill -0 "$tshark_pid" 2>/dev/null || break
    sleep 0.1
done
if ! grep -q "Capturing on" "$tmp/tshark.err"; then
    echo "FAIL: tshark did not start capturing"; cat "$tmp/tshark.err"; exit 1
fi
sleep 0.5

tcp_port=18515
# run_pair NAME CLIENT_ARGS...: server in $nsb, client in $nsa connecting to the server's kernel
# address; outputs in $tmp/NAME.{client,server}[.err]. Returns 0 when both exit 0.
run_pair() {
    local name=$1
    shift
    timeout 120 ip netns exec "$nsb" "$perf" --server -c "$tmp/b.ini" -p "$tcp_port" --once \
        > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    local spid=$!
    pids+=("$spid")
    local _
    for _ in $(seq 1 300); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2>/dev/null && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    timeout 90 ip netns exec "$nsa" "$perf" "$kb" -c "$tmp/a.ini" -p "$tcp_port" "$@" \
        > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2>/dev/null
    wait "$spid"
    local src=$?
    echo "== $name: client $crc server $src"
    cat "$tmp/$name.client"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        echo "-- client stderr"; tail -5 "$tmp/$name.client.err"
        echo "-- server"; tail -15 "$tmp/$name.server"; tail -5 "$tmp/$name.server.err"
        return 1
    fi
    return 0
}

for op in write read send atomic; do
    size=65536; [ $op = atomic ] && size=8
    run_pair "$op-bw" --op $op -s $size -n 200 --bw --verify || fail "$op bw"
    grep -q "data verified   : yes" "$tmp/$op-bw.client" || fail "$op bw: no 'data verified: yes'"
    grep -Eq "^ $size +200 " "$tmp/$op-bw.client" || fail "$op bw: no result row"
done
run_pair "write-lat" --op write -s 64 -n 100 --lat --verify || fail "write lat"
grep -q "data verified   : yes" "$tmp/write-lat.client" || fail "write lat: no 'data verified: yes'"

# Stop the capture (SIGINT through timeout) and let tshark finish the file.
sleep 1
kill -INT "$tshark_pid" 2>/dev/null
wait "$tshark_pid"
echo "== capture: $(tail -2 "$tmp/tshark.err" | tr '\n' ' ')"
[ -s "$cap" ] || { fail "empty capture"; echo "failures: $failures"; exit 1; }

# droce-trace: RoCEv2 frames of every expected opcode, every one accepted with ICRC ok.
timeout 120 "$trace" read --json "$cap" > "$tmp/trace.jsonl" 2> "$tmp/trace.err" ||
    { fail "droce-trace read exited $?"; cat "$tmp/trace.err"; }
python3 - "$tmp/trace.jsonl" <<'PY' || fail "droce-trace: RoCEv2 frames"
import collections, json, sys
ops, bad, roce, other = collections.Counter(), [], 0, collections.Counter()
for line in open(sys.argv[1]):
    f = json.loads(line)
    if f.get("status") == "skipped":
        other[f.get("skipped", "?")] += 1
        continue
    roce += 1
    if f.get("status") != "ok" or f.get("icrc") != "ok":
        bad.append(f)
        continue
    ops[f["opcode"]] += 1
print("droce-trace: %d RoCEv2 frames, %d not accepted with ICRC ok" % (roce, len(bad)))
for op, c in sorted(ops.items()):
    print("  %-32s %d" % (op, c))
print("  skipped: " + ", ".join("%s %d" % kv for kv in sorted(other.items())))
problems = []
for f in bad[:5]:
    problems.append("frame %s: status %s icrc %s %s" % (f.get("index"), f.get("status"), f.get("icrc"),
                                                        f.get("reject", "")))
expected = {"RC_RDMA_WRITE_": "prefix", "RC_RDMA_READ_REQUEST": "exact", "RC_RDMA_READ_RESPONSE_": "prefix",
            "RC_SEND_": "prefix", "RC_FETCH_ADD": "exact", "RC_ACKNOWLEDGE": "exact",
            "RC_ATOMIC_ACKNOWLEDGE": "exact"}
for name, how in expected.items():
    n = sum(c for op, c in ops.items() if (op.startswith(name) if how == "prefix" else op == name))
    if n == 0:
        problems.append("no %s%s frame" % (name, "*" if how == "prefix" else ""))
if roce == 0:
    problems.append("no RoCEv2 frame")
if bad:
    problems.append("%d RoCEv2 frames not accepted with ICRC ok" % len(bad))
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY

# tshark: the same frames decode as InfiniBand (RoCEv2 on UDP 4791), none malformed.
timeout 300 tshark -n -r "$cap" -Y infiniband -T fields -e infiniband.bth.opcode > "$tmp/ib.txt" 2> "$tmp/ib.err"
ib=$(grep -c . "$tmp/ib.txt")
echo "== tshark: $ib InfiniBand frames; by BTH opcode:"
sort -n "$tmp/ib.txt" | uniq -c | sed 's/^/  /'
[ "$ib" -gt 0 ] || { fail "tshark decodes no InfiniBand frame"; cat "$tmp/ib.err"; }
malformed=$(timeout 300 tshark -n -r "$cap" -Y _ws.malformed 2>/dev/null | grep -c .)
[ "$malformed" = 0 ] || fail "tshark finds $malformed malformed frames"
notib=$(timeout 300 tshark -n -r "$cap" -Y 'udp.dstport == 4791 && !infiniband' 2>/dev/null | grep -c .)
[ "$notib" = 0 ] || fail "$notib UDP 4791 frames that tshark does not decode as InfiniBand"

# The ARP exchange between the two droce endpoints: a request for one droce address from the other,
# and the reply from the droce MAC of the config (not the kernel, which does not own these addresses).
timeout 300 tshark -n -r "$cap" -Y arp -T fields -e arp.opcode -e arp.src.hw_mac -e arp.src.proto_ipv4 \
    -e arp.dst.proto_ipv4 > "$tmp/arp.txt" 2>/dev/null
echo "== ARP (opcode sender-mac sender-ip target-ip):"
sed 's/^/  /' "$tmp/arp.txt"
req=$(awk -v a="$da" -v b="$db" '$1 == 1 && (($3 == a && $4 == b) || ($3 == b && $4 == a))' "$tmp/arp.txt" | grep -c .)
rep=$(awk -v a="$da" -v b="$db" -v ma="$mac_a" -v mb="$mac_b" \
    '$1 == 2 && (($3 == b && $4 == a && $2 == mb) || ($3 == a && $4 == b && $2 == ma))' "$tmp/arp.txt" | grep -c .)
[ "$req" -gt 0 ] || fail "no ARP request between $da and $db in the capture"
[ "$rep" -gt 0 ] || fail "no ARP reply from a droce endpoint ($db is $mac_b, $da is $mac_a) in the capture"
kern=$(awk -v a="$da" -v b="$db" '$1 == 2 && ($3 == a || $3 == b)' "$tmp/arp.txt" |
    awk -v ma="$mac_a" -v mb="$mac_b" '$2 != ma && $2 != mb' | grep -c .)
[ "$kern" = 0 ] || fail "$kern ARP replies for droce addresses from another MAC"

echo "failures: $failures"
[ $failures = 0 ]
