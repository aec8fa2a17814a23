#!/bin/bash
# Counters of processes whose ports are all uring (no DPDK EAL): lib/runtime opens DPDK's telemetry
# socket itself (telemetry::open_socket_without_eal) in $XDG_RUNTIME_DIR/dpdk/droce-uring-PID
# (/var/run/dpdk as root), so droce-stat and Debian's dpdk-telemetry.py reach them as any droce
# process. Two droce-perf processes over loopback as an unprivileged user (root drops to nobody):
#   - `droce-stat list` names both (file prefix droce-uring-PID) with their devices;
#   - `droce-stat -f PREFIX show`: sent_pkts of the client grows between two reads, its port line
#     says ACTIVE with the uring port's own counters (gso = auto grouped frames: tx_gso_sends,
#     gso_answers_accepted), its QP is RTS and names the server's QPN;
#   - the capture switched on and off at run time holds RoCE frames (tshark);
#   - dpdk-telemetry.py answers /droce/devices;
#   - a directory left by a process that died (kill -9) is removed by the next process that starts,
#     and a planted symbolic link of such a name is not followed;
#   - once the processes exit, their directories are gone.
#   - a verbs program (ibv_rc_pingpong on droce's libibverbs.so.1) stopped by SIGTERM, and a child
#     it forked that exits, leave nothing behind / remove nothing of the parent's.
# usage: uring_test.sh DROCE_PERF DROCE_STAT VERBS_LIBDIR
set -u
perf=$1
stat=$2
libdir=$3
py=/usr/bin/python3
. "$(dirname "$0")/../uring/common.sh"
uring_setup tele-uring
perf=$(reachable "$perf")
stat=$(reachable "$stat")
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
xdg=$tmp/xdg

# A process killed without a chance to clean up leaves its directory behind.
$run timeout 20 "$perf" --server -c "$tmp/b.ini" -p "$tcp_port" --once > /dev/null 2> "$tmp/dead.err" &
for i in $(seq 1 100); do grep -q "waiting for a client" "$tmp/dead.err" && break; sleep 0.05; done
dead=$(pgrep -f -n "droce-perf --server -c $tmp/b.ini")
[ -n "$dead" ] && [ -S "$xdg/dpdk/droce-uring-$dead/dpdk_telemetry.v2" ] ||
    fail "no telemetry socket for the server (pid ${dead:-?}): $(ls -R "$xdg")"
kill -9 "$dead" 2> /dev/null
wait 2> /dev/null
[ -d "$xdg/dpdk/droce-uring-$dead" ] || fail "the killed process's directory is already gone"

# A planted name of a dead process that is a symbolic link, not a directory of ours: left alone, and
# nothing where it points removed.
mkdir -p "$tmp/victim" && touch "$tmp/victim/keep" && chmod -R a+rwX "$tmp/victim"
$run ln -s "$tmp/victim" "$xdg/dpdk/droce-uring-4194300" || fail "cannot plant the link"

$run timeout 40 "$perf" --server -c "$tmp/b.ini" -p "$tcp_port" --once > "$tmp/server.out" \
    2> "$tmp/server.err" &
pids="$!"
for i in $(seq 1 100); do grep -q "waiting for a client" "$tmp/server.err" && break; sleep 0.05; done
[ -d "$xdg/dpdk/droce-uring-$dead" ] && fail "the dead process's directory was not removed"
[ -e "$tmp/victim/keep" ] || fail "a file behind a planted link was removed"
[ -L "$xdg/dpdk/droce-uring-4194300" ] || fail "the planted link was removed"
rm -f "$xdg/dpdk/droce-uring-4194300"
$run timeout 40 "$perf" "$ip_b" -c "$tmp/a.ini" -p "$tcp_port" --op write -s 4096 -D 10 --bw \
    > "$tmp/client.out" 2> "$tmp/client.err" &
cpid=$!
pids="$pids $cpid"
sleep 2
spid=$(pgrep -f -n "droce-perf --server -c $tmp/b.ini")
C=droce-uring-$cpid
# $cpid may be the setpriv / timeout wrapper: take the droce-perf process below it.
c=$(pgrep -f -n "droce-perf $ip_b -c $tmp/a.ini")
[ -n "$c" ] && C=droce-uring-$c
S=droce-uring-$spid

$run "$stat" list > "$tmp/list" 2>&1 || fail "droce-stat list"
cat "$tmp/list"
grep -q "^$C .*devices uring-a" "$tmp/list" || fail "list: no $C with device uring-a"
grep -q "^$S .*devices uring-b" "$tmp/list" || fail "list: no $S with device uring-b"

$run "$stat" -f "$C" > "$tmp/show1" 2>&1 || fail "droce-stat show"
sleep 1
$run "$stat" -f "$C" show > "$tmp/show2" 2>&1 || fail "droce-stat show (2)"
cat "$tmp/show2"
s1=$(grep -o "sent_pkts [0-9]*" "$tmp/show1" | head -1 | cut -d' ' -f2)
s2=$(grep -o "sent_pkts [0-9]*" "$tmp/show2" | head -1 | cut -d' ' -f2)
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] || fail "sent_pkts did not grow: '$s1' then '$s2'"
$run "$stat" -f "$C" port > "$tmp/port" 2>&1 || fail "droce-stat port"
grep -q "^link uring-a/1 state ACTIVE" "$tmp/port" || fail "port line: $(cat "$tmp/port")"
# The uring port's own counters: gso = auto (the default) asked the server and groups frames.
grep -q " gso_answers_accepted [1-9]" "$tmp/port" && grep -q " tx_gso_sends [1-9]" "$tmp/port" ||
    fail "port line without the uring port's GSO counters: $(cat "$tmp/port")"
$run "$stat" -f "$C" qp --json > "$tmp/qp_c.json" 2>&1 || fail "droce-stat qp --json (client)"
$run "$stat" -f "$S" qp --json > "$tmp/qp_s.json" 2>&1 || fail "droce-stat qp --json (server)"
"$py" - "$tmp/qp_c.json" "$tmp/qp_s.json" <<'PY' || fail "QP JSON"
import json, sys
c = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
cq, sq = c[0]["qp"], s[0]["qp"]
assert cq["state"] == "RTS" and cq["dest_qpn"] == sq["qpn"] and sq["dest_qpn"] == cq["qpn"], (cq, sq)
print("client QP %d <-> server QP %d, client sent_pkts %d" % (cq["qpn"], sq["qpn"], cq["counters"]["sent_pkts"]))
PY
# The run-time capture switch: frames in the file, decoded by tshark as RoCE.
$run "$stat" -f "$C" capture start "$tmp/live.pcapng" --snaplen 128 || fail "capture start"
sleep 0.5
$run "$stat" -f "$C" capture stop > "$tmp/cap" 2>&1 || fail "capture stop"
cat "$tmp/cap"
n=$(tshark -r "$tmp/live.pcapng" -Y "infiniband.bth.opcode" 2> /dev/null | wc -l)
[ "$n" -gt 0 ] || fail "capture: no RoCE frame in the file"
echo "captured RoCE frames: $n"
echo /droce/devices | $run timeout 10 "$py" /usr/bin/dpdk-telemetry.py -f "$C" > "$tmp/py.out" 2>&1
grep -q '"devices": \["uring-a"\]' "$tmp/py.out" || fail "dpdk-telemetry.py: $(cat "$tmp/py.out")"

for p in $pids; do wait "$p" || fail "a droce-perf exited with an error"; done
pids=

# A verbs program stopped by SIGTERM (droce's stop-signal handler, no EAL): its directory goes.
mkdir -p "$tmp/lib" && cp -L "$libdir"/libibverbs.so* "$tmp/lib/" && chmod -R a+rX "$tmp/lib"
$run env LD_LIBRARY_PATH="$tmp/lib" DROCE_CONFIG="$tmp/b.ini" timeout 20 ibv_rc_pingpong -g 0 \
    -d uring-b -p "$tcp_port" > "$tmp/pp.out" 2>&1 &
for i in $(seq 1 100); do
    vp=$(pgrep -f -n "^ibv_rc_pingpong -g 0 -d uring-b -p $tcp_port")
    [ -n "$vp" ] && [ -S "$xdg/dpdk/droce-uring-$vp/dpdk_telemetry.v2" ] && break
    sleep 0.05
done
[ -n "$vp" ] && [ -S "$xdg/dpdk/droce-uring-$vp/dpdk_telemetry.v2" ] ||
    fail "ibv_rc_pingpong: no telemetry socket ($(cat "$tmp/pp.out"))"
kill -TERM "$vp" 2> /dev/null
wait 2> /dev/null
[ -e "$xdg/dpdk/droce-uring-$vp" ] && fail "SIGTERM left $(ls "$xdg/dpdk/droce-uring-$vp")"
# (The base directory dpdk/ stays: the killed process made it, and each process removes only the
# base it made itself.)
left=$(ls -A "$xdg/dpdk" 2> /dev/null)
[ -z "$left" ] || fail "left in the runtime directory: $left"
echo "failures: $failures"
[ $failures = 0 ]
