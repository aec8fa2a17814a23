#!/bin/bash
# `./droce demo --uring`: two droce-perf processes on uring ports over loopback, WRITE / READ /
# SEND bandwidth at 64 B and 64 KiB and latency at 64 B, every byte verified, as nobody when
# started as root (and when nobody can read the tree). The demo runs on this run's own loopback
# addresses, UDP and TCP ports (DROCE_URING_CONFIGS, DROCE_URING_TCP_PORT) and this build
# (DROCE_BUILD_DIR, DROCE_NO_BUILD=1: no rebuild from inside a test).
# usage: uring_demo_test.sh PATH/TO/droce BUILD_DIR
set -u
script=$1
build=$2
. "$(dirname "$0")/common.sh"
uring_setup udemo
as=$run
if [ -n "$run" ] && ! $run test -x "$build/apps/droce-perf/droce-perf" -a -r "$script"; then
    echo "nobody cannot reach $build: the demo runs as $(id -un)"
    as=
fi
start=$SECONDS
DROCE_BUILD_DIR=$build DROCE_NO_BUILD=1 DROCE_URING_CONFIGS="$tmp/a.ini $tmp/b.ini" \
    DROCE_URING_TCP_PORT=$tcp_port $as timeout 50 "$script" demo --uring > "$tmp/demo.out" 2>&1
rc=$?
took=$((SECONDS - start))
cat "$tmp/demo.out"
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
[ "$rc" = 0 ] || fail "./droce demo --uring exited $rc"
grep -q "droce demo --uring: PASS, all data verified" "$tmp/demo.out" || fail "no PASS line"
n=$(grep -cE "^ (write|read|send) +[0-9]+ .* verified$" "$tmp/demo.out")
[ "$n" = 9 ] || fail "$n verified rows (want 9: 6 bandwidth, 3 latency)"
grep -q "EAL" "$tmp/demo.out" && fail "the DPDK EAL started"
[ "$took" -le 30 ] || fail "took $took s (want <= 30)"
if [ "$fails" = 0 ]; then
    echo "PASS: ./droce demo --uring in $took s"
    exit 0
fi
echo "FAIL: $fails check(s) failed"
exit 1
