#!/bin/bash
# droce-perf between two processes over net_memif (config/memif-server.ini and memif-client.ini):
#   ops:  every op, bandwidth and latency, with --verify (data checked byte by byte on the side that
#         receives it, atomic results checked); two QPs at path MTU 512; the peer's MAC by ARP (no
#         static neighbours); plus one negative case (a client with no server).
#   loss: WRITE, READ and SEND bandwidth with 1 % loss injected by the impairment stage (--impair) on
#         both sides: every transfer completes, data verified, and the client's engine counters (from
#         --json) show retransmissions.
# Each run gets private copies of the configs (own memif socket and EAL file prefixes), so it does not
# collide with tests/dpdk's memif test; every process runs under `timeout`; the trap kills what is left
# and removes the copies and the EAL runtime directories.
# usage: perf_memif_test.sh PATH/TO/droce-perf CONFIG_DIR ops|loss
set -u
bin=$1
cfg=$2
mode=$3
tag=perf$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
tcp_port=$((20000 + $$ % 20000))
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# run_pair NAME SERVER_EXTRA CLIENT_ARGS...: starts the server, waits until it listens, runs the
# client; leaves the client's output in $tmp/NAME.client, the server's in $tmp/NAME.server.
# Returns 0 when both exit 0.
run_pair() {
    local name=$1 sextra=$2
    shift 2
    # shellcheck disable=SC2086
    timeout 120 "$bin" --server -c "$tmp/server.ini" -p "$tcp_port" --once $sextra \
        > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    server_pid=$!
    local i
    for i in $(seq 1 300); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2>/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    timeout 90 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" "$@" \
        > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    local src=$?
    server_pid=
    echo "== $name: client $crc server $src"
    cat "$tmp/$name.client"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        echo "-- client stderr"; tail -5 "$tmp/$name.client.err"
        echo "-- server"; tail -15 "$tmp/$name.server"; tail -5 "$tmp/$name.server.err"
        return 1
    fi
    return 0
}

case "$mode" in
ops)
    # Negative: without a server the client must fail (memif cannot connect), not hang or pass.
    timeout 60 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --op write -n 10 > "$tmp/neg.out" 2>&1
    rc=$?
    if [ $rc = 0 ] || [ $rc = 124 ]; then fail "client without a server exited $rc"; cat "$tmp/neg.out"
    else echo "== no server: client exited $rc as it should: $(tail -1 "$tmp/neg.out")"; fi
    rm -rf "$runtime/droce-$tag-c"
    for op in write read send atomic; do
        size=65536; [ $op = atomic ] && size=8
        run_pair "$op-bw" "" --op $op -s $size -n 300 --bw --verify || fail "$op bw"
        grep -q "data verified   : yes" "$tmp/$op-bw.client" || fail "$op bw: no 'data verified: yes'"
        grep -Eq "^ $size +300 " "$tmp/$op-bw.client" || fail "$op bw: no result row"
        run_pair "$op-lat" "" --op $op -s 4096 -n 100 --lat --verify || fail "$op lat"
        grep -q "data verified   : yes" "$tmp/$op-lat.client" || fail "$op lat: no 'data verified: yes'"
    done
    # Inline progress (no engine thread; the application thread polls the device in every wait),
    # on both sides, and on one side only (a passive WRITE server must still answer).
    for op in write read send atomic; do
        size=20000; [ $op = atomic ] && size=8
        run_pair "$op-bw-inline" "--inline-progress" --op $op -s $size -n 300 --bw --verify \
            --inline-progress || fail "$op bw inline"
        grep -q "data verified   : yes" "$tmp/$op-bw-inline.client" || fail "$op bw inline: not verified"
        run_pair "$op-lat-inline" "--inline-progress" --op $op -s 64 -n 100 --lat --verify \
            --inline-progress || fail "$op lat inline"
        grep -q "data verified   : yes" "$tmp/$op-lat-inline.client" || fail "$op lat inline: not verified"
    done
    run_pair "write-bw-inline-s" "--inline-progress" --op write -s 4096 -n 300 --bw --verify \
        || fail "write bw, server inline only"
    run_pair "write-lat-inline-c" "" --op write -s 64 -n 100 --lat --verify --inline-progress \
        || fail "write lat, client inline only"
    # Without --verify the bandwidth client signals only the last WQE of each post batch (as
    # perftest's --cq-mod): every message must still be counted.
    for op in write read; do
        run_pair "$op-bw-unsignaled" "--inline-progress" --op $op -s 64 -n 1000 -q 2 --bw \
            --inline-progress || fail "$op bw unsignaled"
        grep -Eq "^ 64 +1000 " "$tmp/$op-bw-unsignaled.client" || fail "$op bw unsignaled: not 1000 messages per QP"
    done
    # Two QPs and a small MTU, WRITE with every byte checked.
    run_pair "write-2qp" "" --op write -s 3000 -n 200 -q 2 --mtu 512 --bw --verify || fail "write -q 2"
    # No static neighbours: the engines find each other's MAC by ARP.
    for side in server client; do
        sed -i -e '/^10\.1\.0\.[0-9]* *=/d' "$tmp/$side.ini"
    done
    run_pair "write-arp" "" --op write -s 4096 -n 200 --bw --verify || fail "write with ARP"
    grep -Eq "neigh_tx [1-9]" "$tmp/write-arp.client" || fail "write with ARP: the client sent no ARP request"
    ;;
loss)
    for op in write read send write-inline; do
        extra=
        if [ $op = write-inline ]; then op=write; extra=--inline-progress; fi
        # shellcheck disable=SC2086
        run_pair "$op$extra-loss" "--impair loss=0.01,seed=5 $extra" --op $op -s 16384 -n 300 --bw --verify --timeout 12 \
            --json --impair loss=0.01,seed=9 $extra || fail "$op $extra with 1% loss"
        python3 - "$tmp/$op$extra-loss.client" "$op$extra" <<'PY' || fail "$op with 1% loss: JSON checks"
import json, sys
j = json.load(open(sys.argv[1]))
c = j["counters"]
problems = []
if not j["ok"]: problems.append("not ok: %s" % j.get("error"))
if j["verified"] is not True: problems.append("data not verified")
if j["iterations"] != 300: problems.append("iterations %s" % j["iterations"])
if j["impair"]["dropped_loss"] == 0: problems.append("the stage dropped nothing")
if c["retransmitted_pkts"] == 0: problems.append("no retransmission")
print("%s: dropped %d, retransmitted_pkts %d, packet_seq_err %d, local_ack_timeout_err %d, implied_nak_seq_err %d"
      % (sys.argv[2], j["impair"]["dropped_loss"], c["retransmitted_pkts"], c["packet_seq_err"],
         c["local_ack_timeout_err"], c["implied_nak_seq_err"]))
for p in problems: print("  " + p)
sys.exit(1 if problems else 0)
PY
    done
    ;;
*)
    echo "usage: $0 BIN CONFIG_DIR ops|loss"
    exit 2
    ;;
esac
echo "failures: $failures"
[ $failures = 0 ]
