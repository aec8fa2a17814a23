#!/bin/bash
# Debian's unmodified ibv_rc_pingpong (-c: the receiver checks every byte; -e: it sleeps on
# completion events, ibv_get_cq_event on a completion channel) and ib_write_bw between two
# processes on the io_uring socket driver over a veth pair between two network namespaces, through
# droce's drop-in libibverbs.so.1 (LD_LIBRARY_PATH, DROCE_CONFIG), both as nobody. Root only (the
# namespaces; exit 77 otherwise), exit 77 without the tools; the trap removes the namespaces.
# usage: uring_netns_verbs_test.sh BUILD_DIR_OF_libibverbs.so.1
set -u
libdir=$1
here=$(dirname "$0")
. "$here/common.sh"
. "$here/netns.sh"
command -v ibv_rc_pingpong > /dev/null && command -v ib_write_bw > /dev/null \
    || { echo "ibverbs-utils or perftest missing"; exit 77; }
uring_netns_setup unverbs
libdir=$(dirname "$(reachable "$libdir/libibverbs.so.1")")
export LD_LIBRARY_PATH=$libdir
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# pair NAME SERVER_CMD... -- CLIENT_CMD...: the server in $nsb, then the client in $nsa.
pair() {
    local name=$1
    shift
    local scmd=() ccmd=()
    while [ "$1" != "--" ]; do scmd+=("$1"); shift; done
    shift
    ccmd=("$@")
    DROCE_CONFIG=$tmp/b.ini in_b $run timeout 40 "${scmd[@]}" > "$tmp/$name.server" 2>&1 &
    local spid=$!
    pids="$pids $spid"
    # Both tools retry their TCP connect only briefly: wait until the server listens.
    local _
    for _ in $(seq 1 100); do
        in_b ss -Htln "sport = :$port" | grep -q . && break
        sleep 0.1
    done
    DROCE_CONFIG=$tmp/a.ini in_a $run timeout 30 "${ccmd[@]}" > "$tmp/$name.client" 2>&1
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2> /dev/null
    wait "$spid"
    local src=$?
    echo "== $name: client $crc server $src"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        tail -n 5 "$tmp/$name.client" "$tmp/$name.server"
        return 1
    fi
}

port=$tcp_port
pp="ibv_rc_pingpong -g 0 -p $port -n 200 -s 4096 -c -e"
# shellcheck disable=SC2086
if pair pingpong $pp -- $pp "$ip_b"; then
    grep -q "200 iters in" "$tmp/pingpong.client" || fail "pingpong: no iteration line"
    grep -q "200 iters in" "$tmp/pingpong.server" || fail "pingpong: no iteration line (server)"
    grep "iters in" "$tmp/pingpong.client"
else
    fail "ibv_rc_pingpong -c -e"
fi
port=$((tcp_port + 1))
wb="ib_write_bw -x 0 -p $port -s 65536 -n 300"
# shellcheck disable=SC2086
if pair write_bw $wb -d uring-b -- $wb -d uring-a "$ip_b"; then
    grep -Eq "^ *65536 +300 " "$tmp/write_bw.client" || fail "ib_write_bw: no result row"
    grep -E "^ *65536 +300 " "$tmp/write_bw.client"
else
    fail "ib_write_bw"
fi
echo "failures: $failures"
[ $failures = 0 ]
