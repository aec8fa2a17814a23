#!/bin/bash
# Telemetry of an MRC QP over four planes: droce-perf --mrc between two processes over four
# net_memif pairs (private copies of config/memif4-*.ini, telemetry on), 64 KiB WRITEs for
# DURATION seconds, plane 2 (port 3) taken down administratively at 2 s by the client
# (--plane-down). While it runs:
#   - /droce/qp of the client's QP (dpdk-telemetry.py): transport MRC, 128 paths in the ev_*
#     columns, each plane's tx_bytes non-zero, the MRC counters block present;
#   - after the plane went down: droce-stat port says link droce_memif4_c/3 state DOWN
#     physical_state DISABLED and the other three ACTIVE; the MRC plane bytes of port 3 stop
#     growing while port 1's grow (droce-stat port --json, two reads); the server's port lines
#     show received MRC bytes on every plane.
# usage: mrc_test.sh DROCE_PERF DROCE_STAT CONFIG_DIR
set -u
perf=$1
stat=$2
cfg=$3
py=/usr/bin/python3
tag=tmrc$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" memif4
tcp_port=$((20000 + ($$ + 5000) % 20000))
. "$(dirname "$0")/common.sh" # fail, failures, client_pid; the EXIT trap
C="droce-$tag-c"
S="droce-$tag-s"
timeout 50 "$perf" --server -c "$tmp/server.ini" -p "$tcp_port" --once > "$tmp/server.out" 2> "$tmp/server.err" &
server_pid=$!
wait_tcp_listener "$tcp_port" "$server_pid" || { cat "$tmp/server.err"; echo "FAIL: no server"; exit 1; }
timeout 50 "$perf" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --mrc -s 65536 -D 12 --bw \
    --plane-down 2@2 > "$tmp/client.out" 2> "$tmp/client.err" &
client_pid=$!
for i in $(seq 1 100); do
    "$stat" -f "$C" qp 2>/dev/null | grep -q "type MRC state RTS" && break
    kill -0 "$client_pid" 2>/dev/null || break
    sleep 0.1
done
sleep 1
qpn=$("$stat" -f "$C" qp | grep -o "lqpn [0-9]*" | cut -d' ' -f2)
echo "/droce/qp,droce_memif4_c/$qpn" | timeout 20 "$py" /usr/bin/dpdk-telemetry.py -f "$C" > "$tmp/qp.json" 2>&1
"$py" - "$tmp/qp.json" <<'PY' || fail "/droce/qp of the MRC QP"
import json, sys
q = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][0])["/droce/qp"]
bad = []
if q.get("transport") != "MRC" or q.get("state") != "RTS": bad.append("%s %s" % (q.get("transport"), q.get("state")))
evs = q.get("ev_state", [])
if len(evs) != 128 or len(q.get("ev_plane", [])) != 128 or len(q.get("ev_udp_sport", [])) != 128:
    bad.append("%d paths in ev_state" % len(evs))
if sorted(set(q.get("ev_plane", []))) != [0, 1, 2, 3]: bad.append("paths not on four planes")
for p in range(4):
    if q.get("plane%d" % p, {}).get("tx_bytes", 0) == 0: bad.append("plane%d tx_bytes 0" % p)
if "mrc" not in q or q["mrc"].get("data_pkts_sent", 0) == 0: bad.append("no MRC counters")
print("MRC QP %d: %d paths (%s), plane tx_bytes %s" % (q["qpn"], len(evs),
      ", ".join("%s %d" % (s, evs.count(s)) for s in sorted(set(evs))),
      [q["plane%d" % p]["tx_bytes"] for p in range(4)]))
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY
# The plane goes down at 2 s of the run: wait for it, then two reads one second apart.
for i in $(seq 1 60); do
    "$stat" -f "$C" port 2>/dev/null | grep -q "^link droce_memif4_c/3 state DOWN physical_state DISABLED" && break
    sleep 0.1
done
"$stat" -f "$C" port --json > "$tmp/port1.json" || fail "droce-stat port --json"
sleep 1
"$stat" -f "$C" port > "$tmp/port2.txt" || fail "droce-stat port"
"$stat" -f "$C" port --json > "$tmp/port2.json" || fail "droce-stat port --json (2)"
"$stat" -f "$S" port > "$tmp/port_s.txt" || fail "droce-stat port (server)"
cat "$tmp/port2.txt" "$tmp/port_s.txt"
grep -q "^link droce_memif4_c/3 state DOWN physical_state DISABLED " "$tmp/port2.txt" || fail "port 3 not DOWN / DISABLED"
[ "$(grep -c "state ACTIVE physical_state LINK_UP" "$tmp/port2.txt")" = 3 ] || fail "not three ports ACTIVE"
[ "$(grep -Ec " mrc_rx_bytes [1-9]" "$tmp/port_s.txt")" = 4 ] || fail "server: MRC bytes not received on four planes"
"$py" - "$tmp/port1.json" "$tmp/port2.json" <<'PY' || fail "plane bytes while port 3 is down"
import json, sys
a = {p["port"]["port"]: p["port"]["mrc"]["tx_bytes"] for p in json.load(open(sys.argv[1]))}
b = {p["port"]["port"]: p["port"]["mrc"]["tx_bytes"] for p in json.load(open(sys.argv[2]))}
print("MRC tx_bytes per port over one second:", {p: b[p] - a[p] for p in sorted(a)})
bad = []
if b[3] != a[3]: bad.append("port 3 (down) still sending: %d bytes" % (b[3] - a[3]))
for p in (1, 2, 4):
    if b[p] <= a[p]: bad.append("port %d not sending" % p)
for x in bad: print("  " + x)
sys.exit(1 if bad else 0)
PY
wait "$client_pid"; crc=$?; client_pid=
wait "$server_pid"; src=$?; server_pid=
echo "client exit $crc, server exit $src"
[ $crc = 0 ] && [ $src = 0 ] || { fail "droce-perf exit: client $crc server $src"; tail -5 "$tmp/client.err" "$tmp/server.err"; }
echo "failures: $failures"
[ $failures = 0 ]
