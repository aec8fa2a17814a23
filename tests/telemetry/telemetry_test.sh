#!/bin/bash
# Counters on DPDK telemetry, read from a real droce process while it moves traffic: droce-perf server
# and client over net_memif (private copies of config/memif-*.ini, telemetry on), the client
# writing for DURATION seconds. Checked on the client process:
#   - dpdk-telemetry.py (Debian's, unmodified) reads /droce/devices, /droce/device, /droce/qps,
#     /droce/qp: the device is there, sent_pkts is non-zero, the QP is RTS;
#   - bad parameters get an "error" reply and the process goes on answering;
#   - droce-stat (text and --json): sent_pkts grows between two reads; the client QP's peer QPN is
#     the server QP's QPN and the other way round; the port line says ACTIVE with ethdev packets;
#     --watch --count 2 prints two reports with a non-zero sent_pkts rate;
#   - the capture switched on at run time by droce-stat, then off: the pcapng holds RoCE frames
#     (tshark decodes InfiniBand BTHs, droce-trace reads it), a second stop and a start over a
#     file that is not a capture are refused with exit status 1.
# usage: telemetry_test.sh DROCE_PERF DROCE_STAT DROCE_TRACE CONFIG_DIR
set -u
perf=$1
stat=$2
trace=$3
cfg=$4
py=/usr/bin/python3
tag=tele$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" # $tmp/server.ini, $tmp/client.ini (prefixes droce-$tag-s / -c); EXIT trap
tcp_port=$((20000 + $$ % 20000))
. "$(dirname "$0")/common.sh" # fail, failures, client_pid; the EXIT trap

grep -q -- "--no-telemetry" "$tmp/client.ini" && { echo "FAIL: config/memif-client.ini has --no-telemetry"; exit 1; }
timeout 55 "$perf" --server -c "$tmp/server.ini" -p "$tcp_port" --once > "$tmp/server.out" 2> "$tmp/server.err" &
server_pid=$!
wait_tcp_listener "$tcp_port" "$server_pid" || { cat "$tmp/server.err"; echo "FAIL: no server"; exit 1; }
timeout 55 "$perf" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --op write -s 4096 -D 22 --lat \
    > "$tmp/client.out" 2> "$tmp/client.err" &
client_pid=$!
C="droce-$tag-c"
S="droce-$tag-s"
# Until the client's QP is in RTS (the TCP exchange and connect done).
for i in $(seq 1 100); do
    "$stat" -f "$C" qp 2>/dev/null | grep -q "state RTS" && break
    kill -0 "$client_pid" 2>/dev/null || break
    sleep 0.1
done
sleep 1

# ---- Debian's dpdk-telemetry.py, commands on its stdin, one JSON reply per line.
printf '%s\n' /droce/devices /droce/device,droce_memif_c /droce/qps,droce_memif_c /droce/qps \
    /droce/port,droce_memif_c/1 \
    /droce/qp,droce_memif_c/99999 /droce/port,nodev/1 /droce/port,droce_memif_c/x \
    /droce/port,droce_memif_c/2 /droce/qp,droce_memif_c /droce/capture_start,relative.pcapng \
    /droce/capture_start,/etc/passwd "/droce/capture_start,$tmp/x.pcapng,7" /droce/capture_stop \
    /droce/devices |
    timeout 20 "$py" /usr/bin/dpdk-telemetry.py -f "$C" > "$tmp/py.out" 2>&1
"$py" - "$tmp/py.out" <<'PY' || fail "dpdk-telemetry.py replies"
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
r = [json.loads(l) for l in lines]
bad = []
if len(r) != 15: bad.append("%d replies, 15 expected" % len(r))
else:
    dev = r[0]["/droce/devices"]
    if dev["devices"] != ["droce_memif_c"] or dev["ports"] != [1]: bad.append("devices: %s" % dev)
    total = r[1]["/droce/device"]["total"]
    if total["sent_pkts"] == 0: bad.append("device total sent_pkts 0")
    if "device/parse" not in r[1]["/droce/device"]: bad.append("no device/parse block")
    q = r[2]["/droce/qps"]
    if len(q["qpn"]) != 1 or q["state"] != ["RTS"] or q["transport"] != ["RC"]: bad.append("qps: %s" % q)
    if r[3]["/droce/qps"].get("qpn") != q["qpn"]: bad.append("qps without DEV (one device): %s" % r[3])
    p = r[4]["/droce/port"]
    if p["state"] != "ACTIVE" or p["ethdev"]["opackets"] == 0: bad.append("port: %s" % p)
    for i in range(5, 14):
        v = list(r[i].values())[0]
        if not isinstance(v, dict) or "error" not in v: bad.append("no error reply: %s" % r[i])
        else: print("error reply as expected:", v["error"])
    if r[14] != r[0] and r[14]["/droce/devices"]["devices"] != ["droce_memif_c"]:
        bad.append("not answering after the bad commands")
    print("dpdk-telemetry.py: sent_pkts %d, QPN %s, port opackets %d" % (total["sent_pkts"], q["qpn"], p["ethdev"]["opackets"]))
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY

# ---- droce-stat, text: sent_pkts grows between two reads.
"$stat" -f "$C" > "$tmp/show1" || fail "droce-stat show"
sleep 1
"$stat" -f "$C" show > "$tmp/show2" || fail "droce-stat show (2)"
cat "$tmp/show1" "$tmp/show2"
s1=$(grep -o "sent_pkts [0-9]*" "$tmp/show1" | head -1 | cut -d' ' -f2)
s2=$(grep -o "sent_pkts [0-9]*" "$tmp/show2" | head -1 | cut -d' ' -f2)
grep -q "^link droce_memif_c/1 " "$tmp/show1" || fail "show: no 'link droce_memif_c/1' line"
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] || fail "sent_pkts did not grow: '$s1' then '$s2'"
"$stat" -f "$C" port > "$tmp/port" || fail "droce-stat port"
cat "$tmp/port"
grep -Eq "^link droce_memif_c/1 state ACTIVE physical_state LINK_UP .* tx_packets [1-9]" "$tmp/port" \
    || fail "port line"
"$stat" -f "$C" -a show | grep -q " rnr_nak_retry_err 0" || fail "-a: zero counters not shown"
"$stat" -f "$C" show | grep -q " rnr_nak_retry_err 0" && fail "zero counters shown without -a"

# ---- droce-stat --json, both processes: the QPs name each other.
"$stat" -f "$C" qp --json > "$tmp/qp_c.json" || fail "droce-stat qp --json (client)"
"$stat" -f "$S" qp --json > "$tmp/qp_s.json" || fail "droce-stat qp --json (server)"
"$stat" -f "$C" qp > "$tmp/qp_c.txt" || fail "droce-stat qp (client)"
cat "$tmp/qp_c.txt"
"$py" - "$tmp/qp_c.json" "$tmp/qp_s.json" "$tmp/qp_c.txt" <<'PY' || fail "QP JSON"
import json, sys
c = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2])); txt = open(sys.argv[3]).read()
bad = []
if len(c) != 1 or len(s) != 1: bad.append("%d client QPs, %d server QPs" % (len(c), len(s)))
else:
    cq, sq = c[0]["qp"], s[0]["qp"]
    if cq["dest_qpn"] != sq["qpn"] or sq["dest_qpn"] != cq["qpn"]:
        bad.append("client QP %d -> %d, server QP %d -> %d" % (cq["qpn"], cq["dest_qpn"], sq["qpn"], sq["dest_qpn"]))
    if cq["counters"]["sent_pkts"] == 0 or sq["counters"]["rcvd_pkts"] == 0: bad.append("QP counters zero")
    if cq["state"] != "RTS" or cq["transport"] != "RC": bad.append("client QP %s %s" % (cq["transport"], cq["state"]))
    want = "link droce_memif_c/1 lqpn %d rqpn %d type RC state RTS " % (cq["qpn"], cq["dest_qpn"])
    if want not in txt: bad.append("text line lacks '%s'" % want)
    print("client QP %d <-> server QP %d; client sent_pkts %d, server rcvd_pkts %d"
          % (cq["qpn"], sq["qpn"], cq["counters"]["sent_pkts"], sq["counters"]["rcvd_pkts"]))
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY

# ---- rate view: two reports, a non-zero sent_pkts rate.
timeout 20 "$stat" -f "$C" --watch 1 --count 2 > "$tmp/watch" || fail "droce-stat --watch"
cat "$tmp/watch"
[ "$(grep -c '^droce-stat: per second' "$tmp/watch")" = 2 ] || fail "--watch --count 2: not two reports"
grep -Eq "^link droce_memif_c/1 .*sent_pkts [1-9]" "$tmp/watch" || fail "--watch: no sent_pkts rate"
timeout 20 "$stat" -f "$C" -w 1 -c 1 --json qp > "$tmp/watch.json" || fail "droce-stat --watch --json"
"$py" -c 'import json,sys; j=json.loads(open(sys.argv[1]).readline()); r=j["lines"][0]["rates"]; assert r["sent_pkts"] > 0, j; print("qp rate: sent_pkts %d/s" % r["sent_pkts"])' \
    "$tmp/watch.json" || fail "--watch --json: no sent_pkts rate"

# ---- the capture, switched at run time.
"$stat" -f "$C" capture | grep -q "^capture off" || fail "capture status before start"
echo "not a capture" > "$tmp/notpcap.pcapng"
"$stat" -f "$C" capture start "$tmp/notpcap.pcapng" > "$tmp/cap_bad" 2>&1
rc=$?; [ $rc = 1 ] || fail "start over a non-capture file: exit $rc"; cat "$tmp/cap_bad"
grep -q "not a capture" "$tmp/notpcap.pcapng" || fail "the non-capture file was touched"
"$stat" -f "$C" capture start "$tmp/live.pcapng" --snaplen 128 || fail "capture start"
"$stat" -f "$C" capture start "$tmp/live2.pcapng" > "$tmp/cap_twice" 2>&1 && fail "a second start was accepted"
cat "$tmp/cap_twice"
sleep 1.5
"$stat" -f "$C" capture > "$tmp/cap_status" || fail "capture status"
cat "$tmp/cap_status"
grep -Eq "^capture running file $tmp/live.pcapng snaplen 128 frames [1-9]" "$tmp/cap_status" \
    || fail "capture status while running"
"$stat" -f "$C" capture stop > "$tmp/cap_stop" || fail "capture stop"
cat "$tmp/cap_stop"
frames=$(grep -o "frames [0-9]*" "$tmp/cap_stop" | cut -d' ' -f2)
[ -n "$frames" ] && [ "$frames" -gt 0 ] || fail "capture stop: no frames"
"$stat" -f "$C" capture stop > /dev/null 2>&1; rc=$?
[ $rc = 1 ] || fail "second stop: exit $rc"
roce=$(timeout 30 tshark -r "$tmp/live.pcapng" -c 20000 -Y "infiniband.bth" 2>/dev/null | wc -l)
echo "capture: $frames frames reported, tshark decodes $roce InfiniBand frames"
[ "$roce" -gt 0 ] || fail "tshark finds no RoCE frame in the live capture"
timeout 30 "$trace" read "$tmp/live.pcapng" > "$tmp/trace.out" 2>&1 || fail "droce-trace read"
grep -q "RDMA_WRITE\|ACKNOWLEDGE" "$tmp/trace.out" || { fail "droce-trace: no WRITE or ACK"; head -5 "$tmp/trace.out"; }

# ---- the traffic finished cleanly.
wait "$client_pid"; crc=$?; client_pid=
wait "$server_pid"; src=$?; server_pid=
echo "client exit $crc, server exit $src"
[ $crc = 0 ] && [ $src = 0 ] || { fail "droce-perf exit: client $crc server $src"; tail -5 "$tmp/client.err" "$tmp/server.err"; }
"$stat" -f "$C" > /dev/null 2>&1; rc=$?
[ $rc = 1 ] || fail "droce-stat with the process gone: exit $rc (1 expected)"
echo "failures: $failures"
[ $failures = 0 ]
