#!/bin/bash
# `droce-perf --demo`: two devices in one process over config/demo.ini's ring pair. Asserts exit 0
# within the time bound, every bandwidth and latency row verified, the loss rows present with
# retransmissions, and the final PASS line. EAL runtime files: the demo config uses --no-shconf.
# usage: perf_demo_test.sh PATH/TO/droce-perf CONFIG_DIR
set -u
bin=$1
cfg=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout 170 "$bin" --demo -c "$cfg/demo.ini" > "$out" 2>&1
rc=$?
cat "$out"
status=0
fail() { echo "FAIL: $*"; status=1; }
[ $rc = 0 ] || fail "exit status $rc"
grep -q "^droce demo: PASS, all data verified" "$out" || fail "no PASS line"
# 9 bandwidth + 9 latency rows + 2 loss rows, each ending in "verified".
n=$(grep -Ec "^ (write|read|send) .* verified$" "$out")
[ "$n" = 20 ] || fail "$n verified rows, expected 20"
grep -q "FAILED" "$out" && fail "a row FAILED"
# Loss rows: column 4 is retransmitted packets, column 3 frames the stage dropped; both must be > 0.
awk '/With 1% loss/{loss=1} loss && /^ (write|read) / { if ($3 == 0 || $4 == 0) bad=1; rows++ }
     END { exit (rows == 2 && !bad) ? 0 : 1 }' "$out" || fail "loss rows without drops or retransmissions"
# Errors are reported, with the file and line where there is one, and fail.
bad=$(mktemp)
trap 'rm -f "$out" "$bad"' EXIT
printf '[device]\nname = x\n[port0]\ndevargs = net_null0\nmac = 02:00:00:00:00:zz\nip = 10.0.0.1/24\n' > "$bad"
check_error() { # EXPECTED_RC PATTERN ARGS...
    local want=$1 pat=$2
    shift 2
    local msg
    msg=$(timeout 30 "$bin" "$@" 2>&1)
    local got=$?
    if [ "$got" != "$want" ] || ! grep -q -- "$pat" <<<"$msg"; then
        fail "droce-perf $*: exit $got (want $want), output: $msg"
    else
        echo "ok: droce-perf $* -> $got: $(head -1 <<<"$msg")"
    fi
}
check_error 1 "/nonexistent.ini: cannot open" --demo -c /nonexistent.ini
check_error 1 "$bad:5: \[port0\] mac" --server -c "$bad"
check_error 1 "impairment spec" --demo -c "$cfg/demo.ini" --impair loss=2x
check_error 2 "not in" 127.0.0.1 -c "$cfg/demo.ini" --op nosuchop
check_error 2 "either --server or" -c "$cfg/demo.ini"
exit $status
