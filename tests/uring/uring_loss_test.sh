#!/bin/bash
# Loss recovery over the io_uring socket driver: two droce-perf processes over loopback as an
# unprivileged user, each with droce's impairment stage (sim::ImpairedPort, --impair) over its uring
# port dropping 2 % of the frames the socket delivered and corrupting 0.5 % (one bit flipped: a
# bad ICRC the engine drops). On the receive side (side=rx): a frame corrupted before the kernel
# sent it could carry a flipped IP destination and leave the host. RC
# WRITE, READ and SEND with --verify: every run completes, every byte verified, no error
# completion; the stage dropped and corrupted frames on both sides, the receivers counted bad
# ICRCs, and the requesters recovered by retransmitting (sequence NAKs and ACK timeouts).
# About 10 s.
# usage: uring_loss_test.sh PATH/TO/droce-perf
set -u
bin=$1
. "$(dirname "$0")/common.sh"
uring_setup uloss
bin=$(reachable "$bin")
command -v /usr/bin/python3 > /dev/null || { echo "no /usr/bin/python3: skipped"; exit 77; }
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

run_pair() { # NAME CLIENT_ARGS...
    local name=$1
    shift
    $run timeout 50 "$bin" --server --once -c "$tmp/b.ini" -p "$tcp_port" --json \
        --impair loss=0.02,corrupt=0.005,side=rx,seed=5 > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    local spid=$!
    pids="$pids $spid"
    local i
    for i in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2> /dev/null && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.05
    done
    # ACK timeout 4.096 us << 14 = 67 ms: a lost tail comes back quickly.
    $run timeout 40 "$bin" "$ip_b" -c "$tmp/a.ini" -p "$tcp_port" --json --timeout 14 \
        --impair loss=0.02,corrupt=0.005,side=rx,seed=9 "$@" > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2> /dev/null
    wait "$spid"
    local src=$?
    if [ $crc != 0 ] || [ $src != 0 ]; then
        tail -5 "$tmp/$name.client.err" "$tmp/$name.server.err" "$tmp/$name.client"
        fail "$name: client exited $crc, server $src"
        return
    fi
    /usr/bin/python3 - "$name" "$tmp/$name.client" "$tmp/$name.server" << 'PY' || fail "$name"
import json, sys
name, c, s = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
problems = []
def need(cond, msg):
    if not cond: problems.append(msg)
need(c["ok"] and s["ok"], "not ok: %s / %s" % (c.get("error"), s.get("error")))
need(c["verified"] is True, "data not verified")
need(c["error_completions"] == 0 and s["error_completions"] == 0, "error completions")
ci, si = c.get("impair", {}), s.get("impair", {})
cc, sc = c["counters"], s["counters"]
lost = ci.get("dropped_loss", 0) + si.get("dropped_loss", 0)
bad = cc["rx_dropped_bad_icrc"] + sc["rx_dropped_bad_icrc"]
retx = cc["retransmitted_pkts"] + sc["retransmitted_pkts"]
print("== %s: %.2f Gb/s, %d messages; impairment dropped %d (client %d, server %d), corrupted "
      "%d; bad ICRC received %d; retransmitted %d; NAK seq %d; ACK timeouts %d" % (
      name, c["bw_avg_gbps"], c["messages"], lost, ci.get("dropped_loss", 0),
      si.get("dropped_loss", 0), ci.get("corrupted", 0) + si.get("corrupted", 0), bad, retx,
      cc["packet_seq_err"], cc["local_ack_timeout_err"]))
need(ci.get("dropped_loss", 0) > 0 and si.get("dropped_loss", 0) > 0,
     "the stage dropped nothing on one side: %s / %s" % (ci, si))
need(bad > 0, "no corrupted frame reached a receiver's ICRC check")
need(retx > 0, "nothing retransmitted: the loss was not recovered by the transport")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
}

[ -n "$run" ] && echo "running as: $($run id -un)"
run_pair write-64k --op write -s 65536 -n 300 --bw --verify
run_pair read-64k --op read -s 65536 -n 300 --bw --verify
run_pair send-4097 --op send -s 4097 -n 1000 --bw --verify
echo "failures: $failures"
[ $failures = 0 ]
