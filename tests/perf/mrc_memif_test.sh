#!/bin/bash
# droce-perf --mrc between two processes over four net_memif pairs (private copies of
# config/memif4-server.ini and memif4-client.ini: their own socket and EAL file prefixes):
#   1. 64 KiB RDMA WRITE bandwidth on one MRC QP, --verify: completes, every byte right on the
#      server, no error completion, and every one of the four planes carried a share of the bytes
#      (from the client's --json per-plane figures; the server's received bytes agree);
#   2. a timed run with plane 1 taken down at 1.3 s and given back at 2.6 s (--plane-down /
#      --plane-up: set_port_admin on the client while the engine runs): verified, no error
#      completion, plane 1 silent between the two events and carrying again after, the engine saw
#      the change (link_downed) and the server heard it (port_status_rcvd);
#   3. MRC WRITE latency (WRITE with immediate), --verify.
# Every process runs under `timeout`; the trap kills what is left and removes the copies and the
# EAL runtime directories. About 20 s.
# usage: mrc_memif_test.sh PATH/TO/droce-perf CONFIG_DIR
set -u
bin=$1
cfg=$2
tag=mrcm$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" memif4 # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
tcp_port=$((20000 + ($$ + 3000) % 20000))
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# run_pair NAME CLIENT_ARGS...: the server (its JSON in $tmp/NAME.server), then the client (its
# JSON in $tmp/NAME.client, progress lines in $tmp/NAME.client.err). Returns 0 when both exit 0.
run_pair() {
    local name=$1
    shift
    timeout 60 "$bin" --server -c "$tmp/server.ini" -p "$tcp_port" --once --json \
        > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    server_pid=$!
    local i
    for i in $(seq 1 300); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2>/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    timeout 50 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --json "$@" \
        > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    local src=$?
    server_pid=
    echo "== $name: client $crc server $src"
    grep '^ \[' "$tmp/$name.client.err"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        echo "-- client"; tail -c 1500 "$tmp/$name.client"; tail -5 "$tmp/$name.client.err"
        echo "-- server"; tail -c 1500 "$tmp/$name.server"; tail -5 "$tmp/$name.server.err"
        return 1
    fi
    return 0
}

# check NAME WHAT: the JSON checks of one run (python3), WHAT = bw | events | lat.
check() {
    python3 - "$tmp/$1.client" "$tmp/$1.server" "$2" <<'PY'
import json, sys
c, s, what = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
problems = []
def need(cond, msg):
    if not cond: problems.append(msg)
need(c["ok"] and s["ok"], "not ok: %s / %s" % (c.get("error"), s.get("error")))
need(c["transport"] == "mrc" and c["planes"] == 4, "not an MRC run over four planes")
need(c["verified"] is True and s["verified"] is True, "data not verified")
need(c["error_completions"] == 0 and s["error_completions"] == 0, "error completions")
tx = [p["tx_bytes"] for p in c["plane"]]
rx = [p["rx_bytes"] for p in s["plane"]]
total = sum(tx)
print("  client per plane tx [Gb/s]: %s, shares %s, retransmits %d" % (
    " ".join("%.2f" % p["tx_gbps"] for p in c["plane"]),
    " ".join("%.3f" % (t / total if total else 0) for t in tx), c["mrc_counters"]["retransmits"]))
print("  server per plane rx [Gb/s]: %s" % " ".join("%.2f" % p["rx_gbps"] for p in s["plane"]))
need(all(t > 0 for t in tx), "a plane carried nothing: %s" % tx)
# What the server received on each plane is what the client sent there (a retransmission
# counts on both sides; the receiver may see fewer if a copy was in flight at the end).
need(all(r <= t and r >= 0.9 * t for r, t in zip(rx, tx)), "tx %s vs rx %s" % (tx, rx))
if what == "bw":
    need(c["iterations"] == 2000, "iterations %s" % c["iterations"])
    need(all(abs(t / total - 0.25) < 0.05 for t in tx), "planes not sharing equally: %s" % tx)
if what == "events":
    ev = c["plane_events"]
    need([(e["plane"], e["up"], e["error"]) for e in ev] == [(1, False, 0), (1, True, 0)],
         "plane events %s" % ev)
    ph = c["phases"]
    for p in ph:
        print("  %5.2f - %5.2f s after %-13s %6.2f Gb/s = %s" % (
            p["from_s"], p["to_s"], p["after"], p["gbps"], " + ".join("%.2f" % g for g in p["plane_gbps"])))
    need([p["after"] for p in ph] == ["start", "plane 1 down", "plane 1 up"], "phases %s" % ph)
    if len(ph) == 3:
        start, down, up = ph
        need(all(g > 0 for g in start["plane_gbps"]), "a plane idle before the event")
        # The engine sees the admin change at its next link check (within microseconds).
        need(down["plane_gbps"][1] < 0.02 * sum(down["plane_gbps"]), "plane 1 carried traffic while down")
        need(all(down["plane_gbps"][i] > 0 for i in (0, 2, 3)), "planes 0, 2, 3 not carrying on")
        need(up["plane_gbps"][1] > 0.1 * sum(up["plane_gbps"]), "plane 1 idle after it came back")
    need(c["counters"]["link_downed"] >= 1 and c["counters"]["link_upped"] >= 1,
         "the client's engine did not count the change")
    need(s["mrc_counters"]["port_status_rcvd"] >= 1, "the server heard no port status")
if what == "lat":
    need(c["iterations"] == 300 and c["t_typical_usec"] > 0, "latency figures")
    need(c["mrc_counters"]["imm_delivered"] == 300, "immediates delivered %s" % c["mrc_counters"]["imm_delivered"])
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
}

run_pair bw --mrc --op write -s 65536 -n 2000 --bw --verify || fail "bw"
check bw bw || fail "bw: checks"
run_pair events --mrc --op write -s 65536 -D 4 --bw --verify --plane-down 1@1.3 --plane-up 1@2.6 ||
    fail "plane down / up"
check events events || fail "plane down / up: checks"
run_pair lat --mrc --op write -s 4096 -n 300 --lat --verify || fail "lat"
check lat lat || fail "lat: checks"

echo "failures: $failures"
[ $failures = 0 ]
