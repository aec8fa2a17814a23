#!/bin/bash
# mrc_bench (droce's own program against droce's mrc.h, linked with lib_mrc.so) between two
# processes over four memif planes: private copies of tests/mrcapi/memif4-{server,client}.ini with
# their own memif sockets and EAL file prefixes, the server started first, then the client; a sweep
# of WRITE sizes 1 B .. 1 MiB, WRITE with immediate as each size's end signal, every byte checked by
# the server. Passes when both exit 0, every size is verified, and the client's MRC QP spread its
# packets over all four planes with the peer's address derived on planes 2-4. Then a second run
# (-P 2): port 2 taken down through the controller API mid-run, three phases verified.
# usage: example_test.sh MRC_BENCH VERBS_LIBDIR MRCAPI_LIBDIR SOURCE_DIR
set -u
bench=$1
verbs_libdir=$2
mrc_libdir=$3
src=$4
tag=mrc4$$
. "$src/../common/memif_pair.sh" # memif_pair_cleanup, wait_tcp_listener
tmp=$(mktemp -d)
runtime=${XDG_RUNTIME_DIR:-/var/run}/dpdk
[ "$(id -u)" = 0 ] || runtime=${XDG_RUNTIME_DIR:-/tmp}/dpdk
server_pid=
trap memif_pair_cleanup EXIT
for side in server client; do
    sed -e "s|socket=/run/droce/memif4-|socket=/run/droce/memif4-$tag-|" \
        -e "s|--file-prefix=droce-memif4-$side|--file-prefix=droce-$tag-${side:0:1}|" \
        "$src/memif4-$side.ini" > "$tmp/$side.ini"
done
export LD_LIBRARY_PATH=$mrc_libdir:$verbs_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DROCE_MRC_STATS=1 # lib_mrc prints each QP's per-plane traffic when it is destroyed
tcp_port=$((20000 + ($$ + 9000) % 20000))
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

DROCE_CONFIG="$tmp/server.ini" timeout 50 "$bench" -d droce_mrc4_s -p $tcp_port -n 200 -s 1048576 \
    > "$tmp/server.out" 2>&1 &
server_pid=$!
wait_tcp_listener $tcp_port "$server_pid" || fail "the server never listened"
DROCE_CONFIG="$tmp/client.ini" timeout 50 "$bench" -d droce_mrc4_c -p $tcp_port -n 200 -s 1048576 \
    127.0.0.1 > "$tmp/client.out" 2>&1
crc=$?
[ $crc = 0 ] || kill "$server_pid" 2>/dev/null
wait "$server_pid"
src_rc=$?
server_pid=
echo "---- client"
cat "$tmp/client.out"
echo "---- server"
cat "$tmp/server.out"
echo "----"
[ $crc = 0 ] || fail "client exited $crc"
[ $src_rc = 0 ] || fail "server exited $src_rc"
sizes=$(grep -Ec '^ [0-9]+ +200 +[0-9.]+ +[0-9.]+ +yes$' "$tmp/client.out")
[ "$sizes" = 21 ] || fail "expected 21 verified sizes (1 B .. 1 MiB), got $sizes"
grep -q "client: 0 sizes failed verification" "$tmp/client.out" || fail "client verdict"
grep -q "server: 0 sizes failed verification" "$tmp/server.out" || fail "server verdict"
# Every plane carried data: the client sent on all four, and the server received at least 10 % of
# the data packets on each (a wrong peer address on a plane would leave that plane empty at the
# server, its packets dropped by the server's receive filter and sent again on the others).
for p in 0 1 2 3; do
    tx=$(sed -n "s/^lib_mrc: droce_mrc4_c QP 0x[0-9a-f]* plane $p: tx \([0-9]*\) pkts.*/\1/p" "$tmp/client.out")
    [ -n "$tx" ] && [ "$tx" -gt 0 ] || fail "client sent nothing on plane $p"
done
rx_total=0
for p in 0 1 2 3; do
    rx[$p]=$(sed -n "s/^lib_mrc: droce_mrc4_s QP 0x[0-9a-f]* plane $p: .* rx \([0-9]*\) pkts.*/\1/p" "$tmp/server.out")
    rx_total=$((rx_total + ${rx[$p]:-0}))
done
for p in 0 1 2 3; do
    [ $((${rx[$p]:-0} * 10)) -ge $rx_total ] && [ "$rx_total" -gt 0 ] ||
        fail "plane $p: the server received ${rx[$p]:-0} of $rx_total data packets"
done
echo "== data packets received per plane: ${rx[0]:-0} ${rx[1]:-0} ${rx[2]:-0} ${rx[3]:-0} of $rx_total"

# The same pair again with -P 2: three verified phases of 1 MiB WRITEs, the client taking its port 2
# down through the controller API (mrc_ctl_modify_port) half-way through the second and back up
# before the third. No error, every phase verified, a rate for each.
DROCE_CONFIG="$tmp/server.ini" timeout 50 "$bench" -d droce_mrc4_s -p $tcp_port -n 400 -s 1048576 \
    -P 2 > "$tmp/server2.out" 2>&1 &
server_pid=$!
wait_tcp_listener $tcp_port "$server_pid" || fail "the server never listened (phases)"
DROCE_CONFIG="$tmp/client.ini" timeout 50 "$bench" -d droce_mrc4_c -p $tcp_port -n 400 -s 1048576 \
    -P 2 127.0.0.1 > "$tmp/client2.out" 2>&1
crc=$?
[ $crc = 0 ] || kill "$server_pid" 2>/dev/null
wait "$server_pid"
src_rc=$?
server_pid=
echo "---- client (port 2 down mid-run)"
cat "$tmp/client2.out"
echo "---- server"
cat "$tmp/server2.out"
echo "----"
[ $crc = 0 ] || fail "phases: client exited $crc"
[ $src_rc = 0 ] || fail "phases: server exited $src_rc"
phases=$(grep -Ec '^ [123] +.* 1048576 +400 +[0-9.]+ +yes$' "$tmp/client2.out")
[ "$phases" = 3 ] || fail "expected 3 verified phases, got $phases"
grep -q "client: 0 phases failed verification" "$tmp/client2.out" || fail "phases: client verdict"
grep -q "port 2 down after 200" "$tmp/client2.out" || fail "phase 2 did not take port 2 down"
echo "failures: $failures"
[ $failures = 0 ]
