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
        tail -n 5 "$tmp/$name.client" "$tmp/$name.server"
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
# A path MTU the port cannot carry: ports of IP MTU 1500 (largest path MTU 1024), ibv_rc_pingpong
# -m 4096. The modify to RTR fails with EINVAL, as on a ConnectX or rxe port; the tool prints only
# "Failed to modify QP to RTR", and droce says why in one line.
for side in a b; do
    sed -e 's/^udp_port = .*/&\nmtu = 1500/' -e 's/^path_mtu = 4096/path_mtu = 1024/' \
        "$tmp/$side.ini" > "$tmp/${side}1500.ini"
done
DROCE_CONFIG=$tmp/b1500.ini $run timeout 20 ibv_rc_pingpong -g 0 -p $((tcp_port + 2)) -m 4096 \
    > "$tmp/mtu.server" 2>&1 &
mpid=$!
pids="$pids $mpid"
sleep 1
DROCE_CONFIG=$tmp/a1500.ini $run timeout 20 ibv_rc_pingpong -g 0 -p $((tcp_port + 2)) -m 4096 \
    "$ip_b" > "$tmp/mtu.client" 2>&1
mrc=$?
kill "$mpid" 2> /dev/null
wait "$mpid" 2> /dev/null
# The server modifies first (it has the client's address first), fails and hangs up on the client.
cat "$tmp/mtu.server" "$tmp/mtu.client" > "$tmp/mtu.both"
why="droce: ibv_modify_qp: path MTU 4096 is larger than port 1's largest, 1024"
echo "== path MTU 4096 on a 1500-byte port: client exit $mrc"
grep -h "modify QP\|droce: ibv_modify_qp" "$tmp/mtu.both"
[ $mrc != 0 ] || fail "-m 4096 on a port of IP MTU 1500 was taken"
grep -q "Failed to modify QP" "$tmp/mtu.both" || fail "ibv_rc_pingpong did not fail its modify"
grep -q "$why" "$tmp/mtu.server" || fail "no line saying why the modify failed"
[ "$(grep -c "droce: ibv_modify_qp: path MTU" "$tmp/mtu.server")" = 1 ] ||
    fail "the line is not said exactly once"
echo "failures: $failures"
[ $failures = 0 ]
