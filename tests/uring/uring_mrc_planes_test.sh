#!/bin/bash
# MRC over four io_uring socket ports: two network namespaces joined by four veth pairs, one per
# plane, each port bound to its plane's address (the kernel routes), the droce-perf processes as
# nobody. Three seconds into a 64 KiB RDMA WRITE run with --verify, the client's veth of plane 2
# goes down (`ip link set down`: its address routes go with it). Asserts: the run completes, every
# byte verified, no error completion; both engines saw the plane go down (link_downed: the
# client's veth went down, the server's lost its carrier, both from rtnetlink) and the client told
# the server (port_status); all four planes carried traffic before the pull, plane 2 none from a
# second after it, planes 0, 1 and 3 carried on.
# Needs root and iproute2 network namespaces (exits 77, skipped, without). About 15 s.
# usage: uring_mrc_planes_test.sh PATH/TO/droce-perf
set -u
bin=$1
here=$(dirname "$0")
. "$here/common.sh"
. "$here/link_common.sh"
. "$here/../common/progress.sh"
link_setup ump 4
bin=$(reachable "$bin")
command -v /usr/bin/python3 > /dev/null || { echo "no /usr/bin/python3: skipped"; exit 77; }
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
link_config a 4 14 7
link_config b 4 14 7

timeout 50 ip netns exec "$nsb" $run "$bin" --server --once -c "$tmp/b.ini" -p "$tcp_port" --json \
    > "$tmp/server.json" 2> "$tmp/server.err" &
spid=$!
pids="$pids $spid"
link_wait_server "$tmp/server.err" "$spid" || fail "the server did not start"
timeout 45 ip netns exec "$nsa" $run "$bin" "$(ip_b 0)" -c "$tmp/a.ini" -p "$tcp_port" --json \
    --mrc --op write -s 65536 -D 8 --bw --verify > "$tmp/client.json" 2> "$tmp/client.err" &
cpid=$!
pids="$pids $cpid"
at_progress_line "$tmp/client.err" "$cpid" 3 timeout 10 ip -n "$nsa" link set "${tag}a2" down ||
    fail "the run never reached 3 s (or ip link set failed)"
echo "== plane 2 pulled: ip -n $nsa link set ${tag}a2 down"
wait "$cpid"
crc=$?
[ $crc = 0 ] || kill "$spid" 2> /dev/null
wait "$spid"
src_rc=$?
echo "== client $crc server $src_rc"
grep '^ \[' "$tmp/client.err"
if [ $crc != 0 ] || [ $src_rc != 0 ]; then
    echo "-- client"; tail -c 1500 "$tmp/client.json"; tail -5 "$tmp/client.err"
    echo "-- server"; tail -c 1500 "$tmp/server.json"; tail -5 "$tmp/server.err"
    fail "client exited $crc, server $src_rc"
else
    /usr/bin/python3 - "$tmp/client.json" "$tmp/server.json" << 'PY' || fail "checks"
import json, sys
c, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
problems = []
def need(cond, msg):
    if not cond: problems.append(msg)
need(c["ok"] and s["ok"], "not ok: %s / %s" % (c.get("error"), s.get("error")))
need(c["verified"] is True and s["verified"] is True, "data not verified")
need(c["error_completions"] == 0 and s["error_completions"] == 0, "error completions")
mc, ms = c["mrc_counters"], s["mrc_counters"]
print("client: %.2f Gb/s average; link_downed %d; MRC retransmits %d, port_status_sent %d; "
      "server: link_downed %d, port_status_rcvd %d" % (
      c["bw_avg_gbps"], c["counters"]["link_downed"], mc["retransmits"], mc["port_status_sent"],
      s["counters"]["link_downed"], ms["port_status_rcvd"]))
need(c["counters"]["link_downed"] >= 1, "the client's engine did not see its veth go down")
need(s["counters"]["link_downed"] >= 1, "the server's engine did not see its veth lose the carrier")
need(mc["port_status_sent"] >= 1 and ms["port_status_rcvd"] >= 1, "no port status exchanged")
samples = c["progress"]
cut_at = None
for x in samples:
    if x["at_s"] >= 3 and x["plane_gbps"][2] < 0.01 * max(sum(x["plane_gbps"]), 1e-9):
        cut_at = x["at_s"]
        break
need(cut_at is not None, "plane 2 never stopped carrying traffic")
before = [x for x in samples if x["at_s"] < 3.5]
after = [x for x in samples if cut_at is not None and x["at_s"] >= cut_at]
need(len(before) >= 1 and all(all(g > 0 for g in x["plane_gbps"]) for x in before),
     "not every plane carried traffic before the pull")
need(len(after) >= 3, "too few seconds after the pull: %s" % cut_at)
need(all(x["plane_gbps"][2] < 0.01 * sum(x["plane_gbps"]) for x in after),
     "plane 2 carried traffic again after the pull")
need(all(all(x["plane_gbps"][i] > 0 for i in (0, 1, 3)) for x in after),
     "planes 0, 1 and 3 did not carry on")
def avg(xs, i):
    return sum(x["plane_gbps"][i] for x in xs) / len(xs) if xs else 0
print("per plane [Gb/s] before the pull: %s; after: %s" % (
    " ".join("%.2f" % avg(before, i) for i in range(4)),
    " ".join("%.2f" % avg(after, i) for i in range(4))))
print("bytes sent per plane: %s" % [p["tx_bytes"] for p in c["plane"]])
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
fi
echo "failures: $failures"
[ $failures = 0 ]
