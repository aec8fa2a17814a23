#!/bin/bash
# droce-burnin between two processes over four net_memif pairs (private copies of
# config/memif4-server.ini and memif4-client.ini: their own socket and EAL file prefixes), one
# scenario per run:
#   pass      the four pairs cabled right: exit 0, every check PASS in the JSON, each plane-out run
#             with its plane silent (0 bytes sent, 0 delivered) and the three others carrying;
#   swapped   the client's memif interfaces of planes 1 and 2 trade ids (cables swapped): exit 1,
#             cabling FAIL naming ports 1 and 2 ("cables of planes 1 and 2 swapped"), planes 0 and 3
#             routable, 1 and 2 not, the bandwidth runs skipped;
#   down      the server's plane 3 interface has an id no client has (cable pulled; link down at
#             both ends): exit 1, cabling and routable FAIL for plane 3 only, the all-planes run FAIL
#             with plane 3 carrying nothing, the plane-out runs of planes 0..2 FAIL; before it, the
#             client with no peer at all: exit 3 and, with --json, one JSON object saying why.
# swapped also runs the client once against a fake peer of side-channel version 1 first: exit 3,
# one JSON object naming both versions, no report of checks.
# Thresholds: each client port shaped to 0.2 Gb/s. On a loaded 2-core host the engine threads wait
# for a CPU longer than the shaper's 1 ms of credit: runs at load average 7 - 12 reached 0.51 - 0.76
# of the expected goodput, and the plane-out runs 0.60 - 0.87 of the all-planes figure (at 0.5 Gb/s
# a host at load average 12 was CPU-bound already, and a plane out then cost less than its share).
# So the test states --min-fraction 0.3 and a plane-out window of 0.45 - 0.95; the defaults, 0.85
# and 0.65 - 0.85, are for a host with cores to spare (the logic of both is tested exactly in
# burnin-cabling). Every scenario also checks, from the peer's counters, that the probes sent down
# a cable to another plane were dropped by the peer's MAC filter (rx_dropped_dst_mac) and that it
# answered at least what the client counted. Every process runs under `timeout`; the trap kills
# what is left and removes the copies. About 10 - 20 s.
#   lossy     the client's port 1 drops 3 % of its frames (--impair loss=0.03,ports=1): exit 1,
#             the all-planes run and the plane-out runs of planes 0, 2, 3 FAIL naming plane 1's
#             loss share, no other plane is named, plane 1's out run names no loss.
# The all-planes run is made again after the plane-out runs (a check of its own; the plane-out
# runs are compared with the better of the two): each scenario checks it as the first.
# usage: burnin_memif_test.sh PATH/TO/droce-burnin CONFIG_DIR pass|swapped|down|lossy
set -u
bin=$1
cfg=$2
scenario=$3
tag=bi$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" memif4 # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
tcp_port=$((20000 + ($$ + 5000) % 20000))

extra=()
case $scenario in
pass) ;;
swapped)
    # Port 1 of the client takes interface id 2 and port 2 id 1: plane 1's cable in plane 2's
    # socket and the other way round.
    sed -i -e '/^\[port1\]/,/^\[port2\]/ s/,id=1,/,id=2,/' \
        -e '/^\[port2\]/,/^\[port3\]/ s/,id=2,/,id=1,/' "$tmp/client.ini"
    if ! grep -q 'net_memif1,role=client,id=2,' "$tmp/client.ini" ||
        ! grep -q 'net_memif2,role=client,id=1,' "$tmp/client.ini"; then
        echo "FAIL: sed"
        exit 1
    fi
    ;;
down)
    # First no peer at all: nothing can be checked (exit 3), and --json still puts one object on
    # stdout that says so (it printed nothing).
    timeout 60 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --json --plane-rate 0.2 \
        > "$tmp/nopeer.json" 2> "$tmp/nopeer.err"
    nrc=$?
    if [ $nrc != 3 ] || ! /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["ok"] is False and j["exit"] == 3 and j["error"] else 1)' "$tmp/nopeer.json"; then
        echo "FAIL: no peer: exit $nrc, stdout:"; cat "$tmp/nopeer.json"; tail -3 "$tmp/nopeer.err"; exit 1
    fi
    echo "== no peer: exit 3, JSON: $(tr -d '\n' < "$tmp/nopeer.json" | cut -c1-120)"
    rm -rf "$runtime/droce-$tag-c"
    sed -i -e '/^\[port3\]/,/^\[qp\]/ s/,id=3,/,id=7,/' "$tmp/server.ini"
    grep -q 'net_memif3,role=server,id=7,' "$tmp/server.ini" || { echo "FAIL: sed"; exit 1; }
    ;;
lossy)
    # The client's port 1 drops 3 % of what it sends (a bad cable or optic on plane 1, played by
    # an impairment stage on that port only): the bandwidth runs with plane 1 up fail naming it.
    extra=(--impair "loss=0.03,ports=1,seed=5")
    ;;
*)
    echo "unknown scenario $scenario"
    exit 2
    ;;
esac

timeout 80 "$bin" --server -c "$tmp/server.ini" -p "$tcp_port" \
    > "$tmp/server.out" 2> "$tmp/server.err" &
server_pid=$!
for _ in $(seq 1 300); do
    grep -q "waiting for a client" "$tmp/server.err" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$scenario" = swapped ]; then
# Before the real run, the client against a fake TCP peer (the real server's memif links up).
fake_port=$((tcp_port + 1))
# A peer of another side-channel version (a fake one: it echoes the client's identity with
# version 1): exit 3, one JSON object naming both versions, no report of checks.
/usr/bin/python3 - "$fake_port" > "$tmp/fake.err" 2>&1 <<'FAKE' &
import socket, struct, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); s.settimeout(50)
c, _ = s.accept(); c.settimeout(30)
buf = c.recv(65536)  # the client's identity (magic, version, ...), sent whole
c.settimeout(0.5)
try:
    while True:
        d = c.recv(65536)
        if not d: break
        buf += d
except socket.timeout:
    pass
c.settimeout(30)
ident = bytearray(buf); struct.pack_into("<I", ident, 4, 1)
c.sendall(bytes(ident)); c.recv(1)
FAKE
fake_pid=$!
sleep 0.5
timeout 60 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$fake_port" --json --plane-rate 0.2 \
    > "$tmp/oldpeer.json" 2> "$tmp/oldpeer.err"
orc=$?
kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null
if [ $orc != 3 ] || ! /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["ok"] is False and j["exit"] == 3 and "version 1, this one 2" in j["error"] and "checks" not in j else 1)' "$tmp/oldpeer.json"; then
    echo "FAIL: a peer of side-channel version 1: exit $orc, stdout:"; cat "$tmp/oldpeer.json"; tail -3 "$tmp/oldpeer.err"; cat "$tmp/fake.err"; exit 1
fi
echo "== a peer of version 1: exit 3, JSON: $(tr -d '\n' < "$tmp/oldpeer.json" | cut -c1-160)"
fi
timeout 70 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --json --plane-rate 0.2 -D 1.5 \
    --probes 10 --min-fraction 0.3 --out-low 0.45 --out-high 0.95 "${extra[@]}" \
    > "$tmp/client.json" 2> "$tmp/client.err"
crc=$?
wait "$server_pid"
src=$?
server_pid=
echo "== $scenario: client exit $crc, server exit $src"
grep -v '^EAL\|^TELEMETRY' "$tmp/server.err" | tail -8

/usr/bin/python3 - "$tmp/client.json" "$scenario" "$crc" "$src" <<'PY'
import json, sys
path, scenario, crc, src = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
problems = []
def need(cond, msg):
    if not cond:
        problems.append(msg)
try:
    r = json.load(open(path))
except Exception as e:
    print("  no JSON from the client: %s" % e)
    print(open(path).read()[-2000:])
    sys.exit(1)
cab, rt, all_, out = r["cabling"], r["routable"], r["bandwidth_all"], r["plane_out"]
again = r.get("bandwidth_all_again")
need(again is not None, "no second all-planes run in the JSON")
again = again or {"status": "missing", "why": "", "plane_losses": [0, 0, 0, 0], "plane_tx_bytes": [0, 0, 0, 0]}
print("  cabling %s %s; reaches %s" % (cab["status"], cab["findings"], [p["reaches"] for p in cab["ports"]]))
for p in rt["planes"]:
    print("  routable plane %d %s: %d/%d answered, RTT min %.1f avg %.1f max %.1f us %s" % (
        p["plane"], p["status"], p["answered"], p["sent"], p["rtt_min_us"], p["rtt_avg_us"], p["rtt_max_us"], p["why"]))
for b in [all_] + out + [again]:
    print("  bandwidth out=%2d %s: %.2f Gb/s of %.2f (%.2f), to all %.2f, planes %s, lost %s (declared %s) %s" % (
        b["plane_out"], b["status"], b["gbps"], b["expected_gbps"], b["ratio"], b.get("ratio_to_all", 0),
        " ".join("%.2f" % g for g in b["plane_gbps"]), b.get("plane_wire_losses"), b.get("plane_losses"),
        b["why"]))
need(src == 0, "server exit %d" % src)
pc = r.get("peer_counters")
need(pc is not None, "no counters from the peer")
pc = pc or {"rx_dropped_dst_mac": 0, "ep_probe_replies_sent": 0}
print("  peer: %d MRC_PROBEs answered, %d frames dropped by its MAC filter" % (
    pc["ep_probe_replies_sent"], pc["rx_dropped_dst_mac"]))
# The design the cabling check rests on: a probe down a cable to another plane carries that
# plane's MAC and is dropped by the receiving port's filter, never answered. Three rounds from
# every port with a link to every peer plane: 3 x (planes reached x 3 other planes) at least.
answered = cab["replies"] + sum(p["answered"] for p in rt["planes"])
need(pc["ep_probe_replies_sent"] >= answered, "the peer answered %d, the client counted %d" % (
    pc["ep_probe_replies_sent"], answered))
links = sum(1 for p in cab["ports"] if p["link_up"])
need(pc["rx_dropped_dst_mac"] >= 3 * links * 3, "the peer dropped %d for another MAC, expected %d" % (
    pc["rx_dropped_dst_mac"], 3 * links * 3))
need(r["planes"] == 4 and len(out) == 4, "not four planes")
status = lambda x: x["status"]
if scenario == "pass":
    need(crc == 0 and r["ok"] is True and r["failed"] == 0, "client exit %d, ok %s" % (crc, r["ok"]))
    need(status(cab) == "PASS" and [p["reaches"] for p in cab["ports"]] == [[0], [1], [2], [3]],
         "cabling")
    need(all(p["status"] == "PASS" and p["answered"] >= 9 and p["rtt_min_us"] > 0 for p in rt["planes"]),
         "routable")
    need(status(all_) == "PASS" and all(b > 0 for b in all_["plane_tx_bytes"]), "all planes")
    need(status(again) == "PASS" and all(b > 0 for b in again["plane_tx_bytes"]), "all planes again")
    need(r["checks"] == 8, "checks %s" % r["checks"])
    # memif loses nothing: every packet sent on a plane reached the peer on it.
    for b in [all_] + out + [again]:
        need(sum(b["plane_wire_losses"]) == 0 and b["peer_rx_pkts"] == b["plane_tx_pkts"],
             "out=%d: lost on the way %s (sent %s, the peer received %s)" % (
                 b["plane_out"], b["plane_wire_losses"], b["plane_tx_pkts"], b["peer_rx_pkts"]))
    for k, b in enumerate(out):
        need(status(b) == "PASS", "plane %d out: %s" % (k, b["why"]))
        need(b["plane_out"] == k and b["plane_tx_bytes"][k] == 0 and b["peer_rx_bytes"][k] == 0,
             "plane %d out carried traffic" % k)
        need(all(b["plane_tx_bytes"][j] > 0 for j in range(4) if j != k),
             "plane %d out: another plane idle" % k)
        need(0.45 <= b["ratio_to_all"] <= 0.95, "plane %d out: ratio %.2f" % (k, b["ratio_to_all"]))
elif scenario == "swapped":
    need(crc == 1 and r["ok"] is False, "client exit %d" % crc)
    need(status(cab) == "FAIL" and cab["miswired"], "cabling not FAIL")
    need([p["reaches"] for p in cab["ports"]] == [[0], [2], [1], [3]], "reaches")
    need([p["ok"] for p in cab["ports"]] == [True, False, False, True], "ports ok")
    need(len(cab["findings"]) == 1 and "cables of planes 1 and 2 swapped" in cab["findings"][0]
         and "local port 1 reaches the peer's plane 2" in cab["findings"][0]
         and "port 2 reaches plane 1" in cab["findings"][0], "findings %s" % cab["findings"])
    need([p["status"] for p in rt["planes"]] == ["PASS", "FAIL", "FAIL", "PASS"], "routable")
    need(status(all_) == "SKIP" and all(status(b) == "SKIP" for b in out) and status(again) == "SKIP",
         "bandwidth not skipped")
elif scenario == "down":
    need(crc == 1 and r["ok"] is False, "client exit %d" % crc)
    need(status(cab) == "FAIL" and not cab["miswired"], "cabling")
    need([p["reaches"] for p in cab["ports"]] == [[0], [1], [2], []], "reaches")
    need(cab["ports"][3]["link_up"] is False, "port 3 link")
    need(len(cab["findings"]) == 1 and cab["findings"][0].startswith("local port 3 reaches no plane"),
         "findings %s" % cab["findings"])
    need([p["status"] for p in rt["planes"]] == ["PASS", "PASS", "PASS", "FAIL"], "routable")
    need(rt["planes"][3]["answered"] == 0, "plane 3 answered")
    need(status(all_) == "FAIL" and "plane 3 carried nothing" in all_["why"], "all planes: %s" % all_["why"])
    need(all_["plane_tx_bytes"][3] == 0 and all(all_["plane_tx_bytes"][k] > 0 for k in range(3)),
         "all planes: bytes %s" % all_["plane_tx_bytes"])
    need(status(again) == "FAIL" and "plane 3 carried nothing" in again["why"], "all planes again: %s" % again["why"])
    for k in range(3):
        need(status(out[k]) == "FAIL" and "plane 3 carried nothing" in out[k]["why"],
             "plane %d out: %s" % (k, out[k]["why"]))
    need(out[3]["plane_tx_bytes"][3] == 0, "plane 3 out carried traffic")
elif scenario == "lossy":
    need(crc == 1 and r["ok"] is False, "client exit %d" % crc)
    need(status(cab) == "PASS", "cabling")
    lossy = lambda b: [k for k in range(4) if ("plane %d lost" % k) in b["why"]]
    print("  never reached the peer, per plane: all %s; out %s" % (
        all_["plane_wire_losses"], [b["plane_wire_losses"] for b in out]))
    for b in [all_] + out: print("   ", b["plane_out"], b["mrc_counters"])
    need(status(all_) == "FAIL" and lossy(all_) == [1], "all planes: %s" % all_["why"])
    need(status(again) == "FAIL" and lossy(again) == [1], "all planes again: %s" % again["why"])
    w = all_["plane_wire_losses"]
    need(w[1] > 0 and w[1] > 10 * max(w[k] for k in (0, 2, 3)), "all planes: losses %s" % w)
    # About the 3 % the impairment drops of what port 1 sends.
    need(0.015 < w[1] / max(all_["plane_tx_pkts"][1], 1) < 0.05, "all planes: plane 1 lost %d of %d" % (
        w[1], all_["plane_tx_pkts"][1]))
    for k in (0, 2, 3):
        need(status(out[k]) == "FAIL" and lossy(out[k]) == [1], "plane %d out: %s" % (k, out[k]["why"]))
    need(lossy(out[1]) == [] and out[1]["plane_wire_losses"][1] == 0, "plane 1 out: %s" % out[1]["why"])
for p in problems:
    print("  FAIL: " + p)
if problems:
    print(open(path).read()[-600:])
sys.exit(1 if problems else 0)
PY
