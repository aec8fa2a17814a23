#!/bin/bash
# Two droce-perf processes on the io_uring socket driver (drivers/uring) over a veth pair between
# two network namespaces, both as nobody (setpriv): RDMA WRITE, READ and SEND at 0, 1, 4095, 4097
# bytes and 1 MiB, and FETCH_ADD (8 bytes), every one with --verify, over MTU 1500 (path MTU 1024:
# 1 MiB is 1024 packets a message), and a WRITE latency run; a zero-byte message must still be a
# packet on the wire. The kernels route, resolve neighbours and carry the datagrams; each process
# binds its own address. Four lanes run side by side (WRITE, READ, SEND, the rest), each pair of
# processes on its own two addresses of the veth pair, to keep the test short on a loaded host.
# A fifth lane runs WRITE, READ and SEND of 1 MiB with both ports sending UDP GSO (gso = on).
# Root only (the namespaces; exit 77 otherwise); the trap removes the namespaces and veths.
# usage: uring_netns_test.sh PATH/TO/droce-perf
set -u
bin=$1
here=$(dirname "$0")
. "$here/common.sh"
. "$here/netns.sh"
uring_netns_setup unetns
bin=$(reachable "$bin")
fail() {
    echo "FAIL: $*"
    echo "$*" >> "$tmp/failures"
}

# run_pair LANE NAME CLIENT_ARGS...: a server in $nsb, the client in $nsa, on the lane's addresses.
run_pair() {
    local lane=$1 name=$2
    shift 2
    local port=$((tcp_port + lane)) server=$net.$((20 + lane))
    in_b $run timeout 40 "$bin" --server --once -c "$tmp/b$lane.ini" -p "$port" \
        > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    local spid=$!
    local i
    for i in $(seq 1 400); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2> /dev/null && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.05
    done
    if ! kill -0 "$spid" 2> /dev/null; then
        wait "$spid"
        echo "== $name: the server exited $? before a client came"
        tail -n 5 "$tmp/$name.server.err"
        return 1
    fi
    in_a $run timeout 30 "$bin" "$server" -c "$tmp/a$lane.ini" -p "$port" "$@" \
        > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2> /dev/null
    wait "$spid"
    local src=$?
    echo "== $name: client $crc server $src: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$tmp/$name.client" | head -1)"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        tail -n 5 "$tmp/$name.client.err" "$tmp/$name.server.err" "$tmp/$name.server"
        sleep 1 # a killed server's ring lets go of UDP 4791 a moment after the process is gone
        return 1
    fi
    grep -q "data verified   : yes" "$tmp/$name.client" || { fail "$name: data not verified"; return 1; }
    grep -q "data verified   : yes" "$tmp/$name.server" || { fail "$name: server: data not verified"; return 1; }
    return 0
}

# lane L OP: every size of OP, one pair after the other, on addresses $net.(10+L) and $net.(20+L);
# lane L other: FETCH_ADD and a WRITE latency run. lane L gso: both ports with gso = on (UDP GSO
# sends; UringPortConfig::gso): WRITE, READ (the responses grouped) and SEND of 1 MiB.
lane() {
    local l=$1 op=$2 size n sent
    if [ "$op" = gso ]; then
        for op in write read send; do
            run_pair "$l" "gso-$op" --op "$op" -s 1048576 -n 8 -t 4 --bw --verify || fail "gso $op"
        done
        return
    fi
    if [ "$op" = other ]; then
        run_pair "$l" "atomic" --op atomic -n 50 --bw --verify || fail "atomic"
        run_pair "$l" "write-lat" --op write -s 64 -n 50 --lat --verify || fail "write lat"
        return
    fi
    for size in 0 1 4095 4097 1048576; do
        n="-n 50"; [ $size = 1048576 ] && n="-n 8 -t 4" # 4 slots of 1 MiB, not 128: a short set-up
        # shellcheck disable=SC2086
        run_pair "$l" "$op-$size" --op "$op" -s $size $n --bw --verify || { fail "$op $size"; continue; }
        # A zero-byte message is still one packet on the wire each (requester side).
        if [ $size = 0 ]; then
            sent=$(sed -n 's/^ engine counters : sent_pkts \([0-9]*\),.*/\1/p' "$tmp/$op-$size.client")
            [ "${sent:-0}" -ge 50 ] || fail "$op 0: the client sent ${sent:-no} packets for 50 messages"
        fi
    done
}

echo "running as: $($run id -un); $va in $nsa, $vb in $nsb, $net.0/24"
: > "$tmp/failures"
lanes=
l=0
for op in write read send other gso; do
    in_a ip addr add "$net.$((10 + l))/24" dev "$va"
    in_b ip addr add "$net.$((20 + l))/24" dev "$vb"
    uring_netns_conf "$tmp/a$l.ini" "uring-a$l" "$net.$((10 + l))" "$va"
    uring_netns_conf "$tmp/b$l.ini" "uring-b$l" "$net.$((20 + l))" "$vb"
    if [ $op = gso ]; then
        sed -i 's/^interface = .*/&\ngso = on/' "$tmp/a$l.ini" "$tmp/b$l.ini"
    fi
    lane $l $op > "$tmp/lane$l.out" 2>&1 &
    lanes="$lanes $!"
    pids="$pids $!"
    l=$((l + 1))
done
# shellcheck disable=SC2086
wait $lanes
cat "$tmp"/lane*.out
failures=$(grep -c . "$tmp/failures")
echo "failures: $failures"
[ "$failures" = 0 ]
