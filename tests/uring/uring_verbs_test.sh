#!/bin/bash
# Debian's unmodified ibv_rc_pingpong and ib_write_bw between two processes over loopback on the
# io_uring socket driver (drivers/uring), through droce's drop-in libibverbs.so.1
# (LD_LIBRARY_PATH, DROCE_CONFIG), as nobody when started as root. Exit 77 (skipped) when the tools
# are missing.
# usage: uring_verbs_test.sh BUILD_DIR_OF_libibverbs.so.1
set -u
libdir=$1
. "$(dirname "$0")/common.sh"
command -v ibv_rc_pingpong > /dev/null && command -v ib_write_bw > /dev/null \
    || { echo "ibverbs-utils or perftest missing"; exit 77; }
uring_setup uverbs
libdir=$(dirname "$(reachable "$libdir/libibverbs.so.1")")
export LD_LIBRARY_PATH=$libdir
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# pair NAME SERVER_CMD... -- CLIENT_CMD...: the server in the background, then the client.
pair() {
    local name=$1
    shift
    local scmd=() ccmd=()
    while [ "$1" != "--" ]; do scmd+=("$1"); shift; done
    shift
    ccmd=("$@")
    DROCE_CONFIG=$tmp/b.ini $run timeout 40 "${scmd[@]}" > "$tmp/$name.server" 2>&1 &
    local spid=$!
    pids="$pids $spid"
    sleep 1 # both tools retry their TCP connect only briefly: let the server listen first
    DROCE_CONFIG=$tmp/a.ini $run timeout 30 "${ccmd[@]}" > "$tmp/$name.client" 2>&1
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2> /dev/null
    wait "$spid"
    local src=$?
    echo "== $name: client $crc server $src"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        tail -5 "$tmp/$name.client" "$tmp/$name.server"
        return 1
    fi
}

pp="ibv_rc_pingpong -g 0 -p $tcp_port -n 200 -s 4096"
# shellcheck disable=SC2086
if pair pingpong $pp -- $pp "$ip_b"; then
    grep -q "200 iters in" "$tmp/pingpong.client" || fail "pingpong: no iteration line"
    grep "iters in" "$tmp/pingpong.client"
else
    fail "ibv_rc_pingpong"
fi
wb="ib_write_bw -x 0 -p $((tcp_port + 1)) -s 65536 -n 300"
# shellcheck disable=SC2086
if pair write_bw $wb -d uring-b -- $wb -d uring-a "$ip_b"; then
    grep -Eq "^ *65536 +300 " "$tmp/write_bw.client" || fail "ib_write_bw: no result row"
    grep -E "^ *65536 +300 " "$tmp/write_bw.client"
else
    fail "ib_write_bw"
fi
echo "failures: $failures"
[ $failures = 0 ]
