#!/bin/bash
# `droce-perf --demo`: two devices in one process over config/demo.ini's four ring-pair planes.
# Asserts exit 0 within the time bound, every RC bandwidth and latency row verified, the loss rows
# present with retransmissions, the MRC part (plane 2 cut: no error completion, data verified, plane
# 2 silent after the cut and the other three carrying on), and the final PASS line. EAL runtime files: the demo config uses --no-shconf.
# usage: perf_demo_test.sh PATH/TO/droce-perf CONFIG_DIR
set -u
bin=$1
cfg=$2
out=$(mktemp)
scene=$(mktemp --suffix=.pcapng)
trap 'rm -f "$out" "$scene"' EXIT
timeout 170 "$bin" --demo -c "$cfg/demo.ini" --demo-capture "$scene" > "$out" 2>&1
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
# MRC: one QP over the four planes, plane 2 cut a third into the run. The cut is announced, so no
# error completion; plane 2 carries nothing after it while the other three carry on (each plane is
# shaped to the same rate, so the total falls to about three quarters; on a CPU-starved host the
# total is bound by the CPU instead, so only "less than before, more than half" is asserted).
grep -q "^ plane 2 down at [0-9.]* s: its traffic moved to planes 0,1,3 " "$out" ||
    fail "MRC: no 'plane 2 down ... moved to planes 0,1,3' line"
grep -q "^ 0 error completions;" "$out" || fail "MRC: error completions"
grep -q "^ data            : verified, every byte" "$out" || fail "MRC: data not verified"
python3 - "$out" <<'PY' || fail "MRC: per-plane figures before / after the cut"
import re, sys
txt = open(sys.argv[1]).read()
def phase(name):
    m = re.search(r"^ %s +[0-9.]+ - +[0-9.]+ s: +([0-9.]+) Gb/s completed; per plane \[Gb/s\] ([0-9. +]*)" % name,
                  txt, re.M)
    if not m: sys.exit("no '%s' line" % name)
    return float(m.group(1)), [float(x) for x in m.group(2).split("+")]
before, bp = phase("before the cut")
after, ap = phase("after the cut")
print("MRC: before %.2f Gb/s %s, after %.2f Gb/s %s, ratio %.2f" % (before, bp, after, ap, after / before))
ok = len(bp) == 4 and len(ap) == 4 and all(x > 0 for x in bp)
ok = ok and ap[2] < 0.02 * after and all(ap[i] > 0.15 * after for i in (0, 1, 3))
ok = ok and 0.5 * before < after < 0.95 * before
sys.exit(0 if ok else 1)
PY

# The captured scene (--demo-capture, what ./droce demo explains): both runs verified, the file whole,
# and as many frames in it for tshark, with no malformed packet or expert warning, as the demo says.
grep -q "^Captured scene: RC WRITEs of 16 KiB with 2% loss (verified), then MRC over 4 planes with plane 2 cut (verified)," "$out" ||
    fail "captured scene: not both runs verified"
said=$(sed -n 's/^ \([0-9]*\) frames in .*/\1/p' "$out")
got=$(tshark -r "$scene" -T fields -e frame.number 2>/dev/null | wc -l)
[ -n "$said" ] && [ "$said" -gt 500 ] && [ "$got" = "$said" ] ||
    fail "captured scene: the demo says '$said' frames, tshark reads $got"
warn=$(tshark -r "$scene" -z expert,warn -q 2>&1 | grep -ciE "malformed|warn.*[0-9]")
[ "$warn" = 0 ] || fail "captured scene: tshark reports malformed packets or warnings"
nak=$(tshark -r "$scene" -Y 'infiniband.aeth.syndrome >= 0x60 && infiniband.aeth.syndrome < 0x80' 2>/dev/null | wc -l)
[ "$nak" -gt 0 ] || fail "captured scene: no sequence NAK in the RC part (2% loss)"
echo "captured scene: $got frames, $nak sequence NAKs"

# Errors are reported, with the file and line where there is one, and fail.
bad=$(mktemp)
trap 'rm -f "$out" "$bad" "$scene"' EXIT
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
