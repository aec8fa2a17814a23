#!/bin/bash
# droce-mrcctl against a running MRC program: mrc_bench (server and client processes over four
# net_memif planes, private copies of config/memif4-*.ini) runs a long verified 1 MiB WRITE run;
# meanwhile, from the shell, against the server process:
#   list          its ports (four, up) and its MRC QP (RTS, 128 EVs, all GOOD);
#   port 3 down   list shows port 3 admin down and its 32 EVs unused (they leave the rotation);
#   deny / allow  an EV of profile 0 (UDP source port 0xc001 on port 2): DENIED, then GOOD again;
#   probe         four connectionless EV probes from port 1 to the client's plane-0 address:
#                 four replies, each with an RTT;
#   port 3 up     list shows it up again;
#   errors        a port the device lacks and an EV nobody uses are refused with their errno.
# The run itself (20 GB, long enough for the commands on a loaded host) must finish verified.
# About 15 s (30 s loaded).
# usage: mrcctl_test.sh MRC_BENCH DROCE_MRCCTL VERBS_LIBDIR MRCAPI_LIBDIR CONFIG_DIR
set -u
bench=$1
mrcctl=$2
verbs_libdir=$3
mrc_libdir=$4
cfg=$5
tag=mrcctl$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" memif4 # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
export LD_LIBRARY_PATH=$mrc_libdir:$verbs_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tcp_port=$((20000 + ($$ + 11000) % 20000))
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
ctl() { # ctl ARGS...: droce-mrcctl against the server, its output in $out, its status in $rc
    out=$("$mrcctl" --pid "$bench_pid" "$@" 2>&1)
    rc=$?
    echo "\$ droce-mrcctl $*"
    echo "$out"
}

# Nothing to talk to yet.
"$mrcctl" --pid 1 list > /dev/null 2>&1 && fail "a process with no control socket answered"

DROCE_CONFIG="$tmp/server.ini" timeout 150 "$bench" -d droce_memif4_s -p $tcp_port -n 20000 \
    -S 1048576 -s 1048576 -m 1024 > "$tmp/server.out" 2>&1 &
server_pid=$!
# The control socket is named after mrc_bench's PID, the child of `timeout`.
for i in $(seq 1 100); do
    bench_pid=$(pgrep -P "$server_pid" | head -1)
    [ -n "$bench_pid" ] && break
    sleep 0.05
done
wait_tcp_listener $tcp_port "$server_pid" || fail "the server never listened"
DROCE_CONFIG="$tmp/client.ini" timeout 150 "$bench" -d droce_memif4_c -p $tcp_port -n 20000 \
    -S 1048576 -s 1048576 -m 1024 127.0.0.1 > "$tmp/client.out" 2>&1 &
client_pid=$!
# Ready once the server's QP is in RTS (its stdout is a file, fully buffered: ask the process).
for i in $(seq 1 400); do
    "$mrcctl" --pid "$bench_pid" list 2>/dev/null | grep -Eq '^QP 0x[0-9a-f]+ RTS ' && break
    sleep 0.025
done

ctl list
[ $rc = 0 ] || fail "list exited $rc"
[ "$(echo "$out" | grep -Ec '^[1-4] +up +up ')" = 4 ] || fail "list: four ports up"
echo "$out" | grep -Eq '^QP 0x[0-9a-f]+ RTS .*: 128 EVs, 128 GOOD$' || fail "list: the QP, 128 GOOD EVs"

ctl port 3 down
[ $rc = 0 ] || fail "port 3 down exited $rc"
ctl list --evs
echo "$out" | grep -Eq '^3 +down ' || fail "list: port 3 admin down"
# Its 32 paths keep their state but carry nothing: the list says so, per QP and per EV.
echo "$out" | grep -Eq '^QP 0x[0-9a-f]+ RTS .*: 128 EVs, 96 GOOD, 32 on a port that is down \(unused\)$' ||
    fail "list: the QP's 32 EVs on port 3 shown unused"
[ "$(echo "$out" | grep -Ec '^  [0-9]+ +0x[0-9a-f]+ +[0-9]+ +3 +GOOD \(down\) ')" = 32 ] ||
    fail "list --evs: 32 EVs on port 3 marked (down)"

ctl deny 0xc001 2
[ $rc = 0 ] || fail "deny exited $rc"
ctl list --evs
echo "$out" | grep -Eq '^  1 +0x0000c001 +49153 +2 +DENIED ' || fail "EV 0xc001 on port 2 not DENIED"
ctl allow 0xc001 2
[ $rc = 0 ] || fail "allow exited $rc"
ctl list --evs
echo "$out" | grep -Eq '^  1 +0x0000c001 +49153 +2 +GOOD ' || fail "EV 0xc001 on port 2 not GOOD again"

ctl probe 1 10.1.0.2 --count 4 --timeout-ms 1000
[ $rc = 0 ] || fail "probe exited $rc"
[ "$(echo "$out" | grep -Ec '^reply from 10.1.0.2: ev 0xc00[0-3] port 1 rtt [1-9][0-9]* ns$')" = 4 ] ||
    fail "four probe replies with an RTT"

ctl port 3 up
[ $rc = 0 ] || fail "port 3 up exited $rc"
ctl list
echo "$out" | grep -Eq '^3 +up ' || fail "list: port 3 admin up again"

ctl port 9 down
[ $rc = 1 ] && echo "$out" | grep -q "errno 22" || fail "port 9: expected EINVAL (exit 1)"
ctl deny 0x1234 1
[ $rc = 1 ] && echo "$out" | grep -q "errno 2)" || fail "deny of an unknown EV: expected ENOENT"

wait "$client_pid"
crc=$?
wait "$server_pid"
src_rc=$?
server_pid=
echo "---- client"
cat "$tmp/client.out"
[ $crc = 0 ] || fail "client exited $crc"
[ $src_rc = 0 ] || fail "server exited $src_rc"
grep -q "client: 0 sizes failed verification" "$tmp/client.out" || fail "the run was not verified"
echo "failures: $failures"
[ $failures = 0 ]
