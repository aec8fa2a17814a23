#!/bin/bash
# droce-perf --mrc between two processes in two network namespaces joined by four veth pairs
# (net_af_packet, private copies of config/netns4-a.ini (client) and netns4-b.ini (server)), and a
# real cable pull: three seconds into a 64 KiB RDMA WRITE run with --verify, `ip link set` takes the
# client's veth of plane 2 down. Asserts: the run completes, every byte verified, no error
# completion; both engines saw the link go down (link_downed: the client's veth went down, the
# server's lost its carrier) and the client told the server (port_status); in the per-second
# figures all four planes carried traffic before the pull and plane 2 none from a second after it,
# while planes 0, 1 and 3 carried on; the report lists the pull among the run's plane events
# ("seen": not droce-perf's own) and starts a phase there. At 5 s the veth is set up again: plane 2
# comes back, also a seen event (the run's own --plane-up 2@1, which changed nothing, must not
# take it for itself), and carries traffic again.
# Addresses: the kernel holds 10.97.N.1/.2 on plane 0's veths for the TCP exchange; droce holds the
# configs' 10.2.P.1/.2 (its GIDs), which the kernel does not own.
# Needs root and iproute2 network namespaces; exits 77 (skipped) without them. Namespaces, veths and
# EAL prefixes carry the PID; every step runs under `timeout`; the trap kills what is left and
# removes the namespaces (and with them the veths), the temporary files and the EAL runtime
# directories. About 15 s.
# usage: mrc_netns_test.sh PATH/TO/droce-perf SOURCE_DIR
set -u
. "$(dirname "$0")/../common/progress.sh"
perf=$1
src=$2
cfg=$src/config
[ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
command -v ip >/dev/null || { echo "no iproute2: skipped"; exit 77; }
timeout 10 ip netns list >/dev/null 2>&1 || { echo "ip netns unavailable: skipped"; exit 77; }
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }

tag=mn$$
nsa=droce-$tag-a
nsb=droce-$tag-b
n=$(($$ % 250 + 1))
ka=10.97.$n.1 # kernel, TCP channel (on plane 0's veths)
kb=10.97.$n.2
tmp=$(mktemp -d)
runtime=/var/run/dpdk
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    timeout 10 ip netns del "$nsa" 2>/dev/null
    timeout 10 ip netns del "$nsb" 2>/dev/null
    rm -rf "$tmp" "$runtime/droce-$tag-a" "$runtime/droce-$tag-b"
}
trap cleanup EXIT

timeout 10 ip netns add "$nsa" || { echo "cannot create network namespaces: skipped"; exit 77; }
timeout 10 ip netns add "$nsb" || { echo "cannot create network namespaces: skipped"; exit 77; }
for p in 0 1 2 3; do
    timeout 10 ip link add "m$$a$p" netns "$nsa" mtu 4200 type veth peer name "m$$b$p" netns "$nsb" mtu 4200 ||
        { echo "cannot create veth pairs: skipped"; exit 77; }
    timeout 10 ip -n "$nsa" link set "m$$a$p" up
    timeout 10 ip -n "$nsb" link set "m$$b$p" up
done
for ns in "$nsa" "$nsb"; do timeout 10 ip -n "$ns" link set lo up; done
timeout 10 ip -n "$nsa" addr add "$ka/24" dev "m$$a0"
timeout 10 ip -n "$nsb" addr add "$kb/24" dev "m$$b0"

# Private configs: own interfaces and EAL prefixes.
sed -e "s|iface=veth-a\([0-3]\)|iface=m$$a\1|" -e "s|--file-prefix=droce-netns4-a|--file-prefix=droce-$tag-a|" \
    "$cfg/netns4-a.ini" > "$tmp/a.ini"
sed -e "s|iface=veth-b\([0-3]\)|iface=m$$b\1|" -e "s|--file-prefix=droce-netns4-b|--file-prefix=droce-$tag-b|" \
    "$cfg/netns4-b.ini" > "$tmp/b.ini"
for f in a b; do
    if grep -v '^ *#' "$tmp/$f.ini" | grep -q 'veth-\|droce-netns4'; then
        echo "FAIL: config copy $f.ini still names the shipped interfaces or prefix"; exit 1
    fi
done

failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

tcp_port=18515
timeout 60 ip netns exec "$nsb" "$perf" --server -c "$tmp/b.ini" -p "$tcp_port" --once --json \
    > "$tmp/server.json" 2> "$tmp/server.err" &
spid=$!
pids+=("$spid")
for _ in $(seq 1 300); do
    grep -q "waiting for a client" "$tmp/server.err" 2>/dev/null && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
done
timeout 50 ip netns exec "$nsa" "$perf" "$kb" -c "$tmp/a.ini" -p "$tcp_port" --json \
    --mrc --op write -s 65536 -D 8 --bw --verify --plane-up 2@1 > "$tmp/client.json" 2> "$tmp/client.err" &
cpid=$!
pids+=("$cpid")
# The pull: once the client has printed its 3-second progress line (stderr with --json).
at_progress_line "$tmp/client.err" "$cpid" 3 timeout 10 ip -n "$nsa" link set "m$$a2" down ||
    fail "the run never reached 3 s (or ip link set failed)"
echo "== plane 2 pulled: ip -n $nsa link set m$$a2 down"
# And put back once the 5-second line is out.
at_progress_line "$tmp/client.err" "$cpid" 5 timeout 10 ip -n "$nsa" link set "m$$a2" up ||
    fail "the run never reached 5 s (or ip link set up failed)"
echo "== plane 2 back: ip -n $nsa link set m$$a2 up"
wait "$cpid"
crc=$?
[ $crc = 0 ] || kill "$spid" 2>/dev/null
wait "$spid"
src_rc=$?
echo "== client $crc server $src_rc"
grep '^ \[' "$tmp/client.err"
if [ $crc != 0 ] || [ $src_rc != 0 ]; then
    echo "-- client"; tail -c 1500 "$tmp/client.json"; tail -5 "$tmp/client.err"
    echo "-- server"; tail -c 1500 "$tmp/server.json"; tail -5 "$tmp/server.err"
    fail "client exited $crc, server $src_rc"
else
    python3 - "$tmp/client.json" "$tmp/server.json" <<'PY' || fail "checks"
import json, sys
c, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
problems = []
def need(cond, msg):
    if not cond: problems.append(msg)
need(c["ok"] and s["ok"], "not ok: %s / %s" % (c.get("error"), s.get("error")))
need(c["verified"] is True and s["verified"] is True, "data not verified")
need(c["error_completions"] == 0 and s["error_completions"] == 0, "error completions")
mc, ms = c["mrc_counters"], s["mrc_counters"]
print("client: %.2f Gb/s average; link_downed %d; MRC retransmits %d, port_status_sent %d, "
      "ev_assumed_bad %d; server: link_downed %d, port_status_rcvd %d" % (
      c["bw_avg_gbps"], c["counters"]["link_downed"], mc["retransmits"], mc["port_status_sent"],
      mc["ev_assumed_bad"], s["counters"]["link_downed"], ms["port_status_rcvd"]))
need(c["counters"]["link_downed"] >= 1, "the client's engine did not see its veth go down")
need(s["counters"]["link_downed"] >= 1, "the server's engine did not see its veth lose the carrier")
need(mc["port_status_sent"] >= 1 and ms["port_status_rcvd"] >= 1, "no port status exchanged")
samples = c["progress"]
cut_at = None
for x in samples:
    if x["plane_gbps"][2] < 0.01 * max(sum(x["plane_gbps"]), 1e-9):
        cut_at = x["at_s"]
        break
need(cut_at is not None, "plane 2 never stopped carrying traffic")
before = [x for x in samples if x["at_s"] < 3.5]  # printed before the pull
# The seconds after the pull and before the veth came back (after the 5-second line).
after = [x for x in samples if cut_at is not None and cut_at <= x["at_s"] < 5.5]
need(len(before) >= 1 and all(all(g > 0 for g in x["plane_gbps"]) for x in before),
     "not every plane carried traffic before the pull")
need(len(after) >= 1, "too few seconds after the pull: %s" % cut_at)
need(all(x["plane_gbps"][2] < 0.01 * sum(x["plane_gbps"]) for x in after),
     "plane 2 carried traffic again after the pull")
need(all(all(x["plane_gbps"][i] > 0 for i in (0, 1, 3)) for x in after),
     "planes 0, 1 and 3 did not carry on")
def avg(xs, i):
    return sum(x["plane_gbps"][i] for x in xs) / len(xs) if xs else 0
def tot(xs):
    return sum(x["gbps"] for x in xs) / len(xs) if xs else 0
print("per plane [Gb/s], mean of the seconds before the pull: %s (completed %.2f)" % (
    " ".join("%.2f" % avg(before, i) for i in range(4)), tot(before)))
print("per plane [Gb/s], mean of the seconds after it:        %s (completed %.2f)" % (
    " ".join("%.2f" % avg(after, i) for i in range(4)), tot(after)))
tx = [p["tx_bytes"] for p in c["plane"]]
print("bytes sent per plane over the run: %s" % tx)
# The pull is an event of the run's report, as the run's own --plane-down would be: seen (not
# applied by droce-perf), plane 2 down, after the 3-second line, and a phase starts there with
# plane 2 silent.
ev = c.get("plane_events", [])
print("plane events: %s" % ev)
seen = [e for e in ev if e.get("seen")]
need(len(seen) >= 1 and seen[0]["plane"] == 2 and seen[0]["up"] is False and 3.0 <= seen[0]["at_s"] <= 5.0,
     "the pull is not among the plane events: %s" % ev)
# The run's own --plane-up 2@1 changed nothing (plane 2 was up): it must not take the veth's
# coming back for itself.
need(len(seen) == 2 and seen[1]["plane"] == 2 and seen[1]["up"] is True and 5.0 <= seen[1]["at_s"] <= 7.5,
     "the veth put back is not among the plane events: %s" % ev)
need([e["plane"] for e in ev if not e.get("seen")] == [2], "own events: %s" % ev)
ph = [x for x in c.get("phases", []) if x["after"] == "plane 2 lost"]
back = [x for x in c.get("phases", []) if x["after"] == "plane 2 back"]
need(len(back) == 1 and back[0]["plane_gbps"][2] > 0, "plane 2 carried nothing after it came back: %s" % back)
print("phases: %s" % [(x["after"], round(x["from_s"], 2), [round(g, 2) for g in x["plane_gbps"]]) for x in c.get("phases", [])])
need(len(ph) == 1 and ph[0]["plane_gbps"][2] < 0.05 * sum(ph[0]["plane_gbps"]),
     "no phase after the pull with plane 2 silent: %s" % c.get("phases"))
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
fi
echo "failures: $failures"
[ $failures = 0 ]
