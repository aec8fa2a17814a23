#!/bin/bash
# A link pulled mid-transfer under RC over the io_uring socket driver: droce-perf RDMA WRITE runs
# of 64 KiB with --verify between two network namespaces joined by two veth pairs, the processes
# as nobody; droce's port is on the first pair, the TCP exchange on the second (so that a client
# whose QP failed can still hear the server's verdict), and the client's first veth is taken
# down (`ip link set down`) mid-run.
#  - resume: ACK timeout 4.096 us << 17 (0.54 s), retry_cnt 7 (about 4 s of budget); the veth is
#    down for 2.5 s, then up (a progress second lies wholly inside any outage over 2 s: a 1.5 s
#    one began 0.1 s into a second on a loaded CI host and the transport resumed 0.1 s after the
#    cable came back, leaving no whole second without data). The run completes, every byte verified, no error completion; the
#    client's engine saw its link go down and up (link_downed, link_upped) and retransmitted; a
#    progress second shows the outage and the seconds after it carry data again.
#  - fail: ACK timeout 4.096 us << 14 (67 ms), retry_cnt 3 (under 0.3 s of budget); the veth stays
#    down. The client's WRITE completes in error with RETRY_EXC_ERR (retry_exc_err,
#    retry_exceeded_err counted) within a few seconds of the pull.
# Needs root and iproute2 network namespaces (exits 77, skipped, without). About 20 s.
# usage: uring_link_pull_test.sh PATH/TO/droce-perf
set -u
bin=$1
here=$(dirname "$0")
. "$here/common.sh"
. "$here/link_common.sh"
link_setup ulp 2
bin=$(reachable "$bin")
command -v /usr/bin/python3 > /dev/null || { echo "no /usr/bin/python3: skipped"; exit 77; }
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
veth=${tag}a0

start_server() { # NAME
    timeout 50 ip netns exec "$nsb" $run "$bin" --server --once -c "$tmp/b.ini" -p "$tcp_port" --json \
        > "$tmp/$1.server" 2> "$tmp/$1.server.err" &
    spid=$!
    pids="$pids $spid"
    link_wait_server "$tmp/$1.server.err" "$spid" || fail "$1: the server did not start"
}
start_client() { # NAME SECONDS
    timeout 40 ip netns exec "$nsa" $run "$bin" "$(ip_b 1)" -c "$tmp/a.ini" -p "$tcp_port" --json \
        --op write -s 65536 -D "$2" --bw --verify > "$tmp/$1.client" 2> "$tmp/$1.client.err" &
    cpid=$!
    pids="$pids $cpid"
}
wait_progress() { # NAME SECOND: until the client printed that second's progress line
    local i
    for i in $(seq 1 400); do
        grep -q "^ \[ *$2\.[0-9] s\]" "$tmp/$1.client.err" 2> /dev/null && return 0
        kill -0 "$cpid" 2> /dev/null || return 1
        sleep 0.05
    done
    return 1
}

# ---- resume: down for 2.5 s within a 3.8 s retry budget (7 retries of 0.54 s)
link_config a 1 17 7
link_config b 1 17 7
start_server resume
start_client resume 8
if wait_progress resume 2; then
    timeout 10 ip -n "$nsa" link set "$veth" down || fail "ip link set down"
    echo "== resume: $veth down at $(date +%T.%N | cut -c1-12)"
    sleep 2.5
    timeout 10 ip -n "$nsa" link set "$veth" up || fail "ip link set up"
    echo "== resume: $veth up at $(date +%T.%N | cut -c1-12)"
else
    fail "resume: the run never reached 2 s"
fi
wait "$cpid"
crc=$?
[ $crc = 0 ] || kill "$spid" 2> /dev/null
wait "$spid"
src=$?
grep '^ \[' "$tmp/resume.client.err"
if [ $crc != 0 ] || [ $src != 0 ]; then
    tail -5 "$tmp/resume.client.err" "$tmp/resume.server.err"
    tail -c 600 "$tmp/resume.client"
    fail "resume: client exited $crc, server $src"
else
    /usr/bin/python3 - "$tmp/resume.client" "$tmp/resume.server" << 'PY' || fail "resume checks"
import json, sys
c, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
problems = []
def need(cond, msg):
    if not cond: problems.append(msg)
cc = c["counters"]
print("resume: %.2f Gb/s average; link_downed %d link_upped %d; ACK timeouts %d, retransmitted "
      "%d, retry_exceeded_err %d" % (c["bw_avg_gbps"], cc["link_downed"], cc["link_upped"],
      cc["local_ack_timeout_err"], cc["retransmitted_pkts"], cc["retry_exceeded_err"]))
need(c["ok"] and s["ok"], "not ok: %s / %s" % (c.get("error"), s.get("error")))
need(c["verified"] is True, "data not verified")
need(c["error_completions"] == 0 and s["error_completions"] == 0, "error completions")
need(cc["link_downed"] >= 1 and cc["link_upped"] >= 1, "the client's engine missed the pull")
need(cc["local_ack_timeout_err"] >= 1 and cc["retransmitted_pkts"] >= 1,
     "no ACK timeout / retransmission: the outage was not recovered by the transport")
xs = c["progress"]
peak = max((x["gbps"] for x in xs), default=0)
gap = [x for x in xs if x["gbps"] < 0.05 * peak]
need(len(gap) >= 1, "no progress second shows the outage: %s" % [x["gbps"] for x in xs])
if gap:
    after = [x for x in xs if x["at_s"] > gap[-1]["at_s"]]
    need(any(x["gbps"] > 0.05 * peak for x in after), "no data after the outage")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
fi

# ---- fail: kept down past a 0.3 s retry budget
link_config a 1 14 3
link_config b 1 14 3
start_server fail
start_client fail 10
pulled=no
if wait_progress fail 1; then
    timeout 10 ip -n "$nsa" link set "$veth" down && pulled=$(date +%s.%N)
    echo "== fail: $veth down, kept down"
else
    fail "fail: the run never reached 1 s"
fi
wait "$cpid"
crc=$?
ended=$(date +%s.%N)
# The server's TCP peer is behind the pulled cable: give it back, then let the server go.
timeout 10 ip -n "$nsa" link set "$veth" up
kill "$spid" 2> /dev/null
wait "$spid" 2> /dev/null
grep '^ \[' "$tmp/fail.client.err"
if [ "$pulled" != no ]; then
    echo "== fail: client exited $crc $(echo "$ended - $pulled" | bc) s after the pull"
fi
[ $crc != 0 ] || fail "fail: the client succeeded with its link kept down"
/usr/bin/python3 - "$tmp/fail.client" << 'PY' || fail "fail checks"
import json, sys
try:
    c = json.load(open(sys.argv[1]))
except ValueError:
    print("  no JSON from the client: %r" % open(sys.argv[1]).read()[-400:])
    sys.exit(1)
problems = []
def need(cond, msg):
    if not cond: problems.append(msg)
cc = c["counters"]
print("fail: error %r; error completions %d; ACK timeouts %d, retry_exceeded_err %d, "
      "link_downed %d" % (c.get("error"), c["error_completions"], cc["local_ack_timeout_err"],
      cc["retry_exceeded_err"], cc["link_downed"]))
need(not c["ok"], "client ok")
need("retry_exc_err" in c.get("error", ""), "error is not RETRY_EXC_ERR: %r" % c.get("error"))
need(c["error_completions"] >= 1, "no error completion")
need(cc["retry_exceeded_err"] >= 1, "retry_exceeded_err not counted")
need(cc["link_downed"] >= 1, "the client's engine did not see the link go down")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
echo "failures: $failures"
[ $failures = 0 ]
