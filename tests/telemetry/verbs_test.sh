#!/bin/bash
# Telemetry in a verbs program: Debian's unmodified ibv_rc_pingpong on droce's libibverbs.so.1, two
# processes over net_memif (private copies of config/memif-*.ini, telemetry on). While they
# exchange messages, droce-stat reads both (the verbs library brings up the runtime that registers
# the /droce/ commands, with its provider mutex as the control lock):
#   - one QP each, RTS, each naming the other's QPN; sent_pkts grows between two reads;
#   - dpdk-telemetry.py reads the same QP;
#   - the capture switched on and off at run time in the server process holds RoCE SENDs (tshark).
# usage: verbs_test.sh BUILD/lib/verbs DROCE_STAT CONFIG_DIR
set -u
libdir=$1
stat=$2
cfg=$3
py=/usr/bin/python3
command -v ibv_rc_pingpong > /dev/null || { echo "SKIP: ibv_rc_pingpong not installed (apt-get install ibverbs-utils)"; exit 77; }
tag=vtel$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg"
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tcp_port=$((20000 + ($$ + 9000) % 20000))
. "$(dirname "$0")/common.sh" # fail, failures, client_pid; the EXIT trap
C="droce-$tag-c"
S="droce-$tag-s"
# Many iterations: the run is ended by the test once it has looked (kill), not by the count.
DROCE_CONFIG="$tmp/server.ini" timeout 50 ibv_rc_pingpong -d droce_memif_s -g 0 -p $tcp_port -n 100000000 \
    > "$tmp/server.out" 2>&1 &
server_pid=$!
wait_tcp_listener $tcp_port "$server_pid" || { cat "$tmp/server.out"; echo "FAIL: no server"; exit 1; }
DROCE_CONFIG="$tmp/client.ini" timeout 50 ibv_rc_pingpong -d droce_memif_c -g 0 -p $tcp_port -n 100000000 127.0.0.1 \
    > "$tmp/client.out" 2>&1 &
client_pid=$!
for i in $(seq 1 100); do
    "$stat" -f "$C" qp 2>/dev/null | grep -q "state RTS" && break
    kill -0 "$client_pid" 2>/dev/null || break
    sleep 0.1
done
"$stat" -f "$C" qp > "$tmp/qp_c1" || fail "droce-stat qp (client)"
"$stat" -f "$S" qp > "$tmp/qp_s" || fail "droce-stat qp (server)"
sleep 1
"$stat" -f "$C" qp > "$tmp/qp_c2" || fail "droce-stat qp (client, again)"
cat "$tmp/qp_c1" "$tmp/qp_s" "$tmp/qp_c2"
lc=$(grep -o "lqpn [0-9]* rqpn [0-9]*" "$tmp/qp_c1")
ls=$(grep -o "lqpn [0-9]* rqpn [0-9]*" "$tmp/qp_s")
set -- $lc $ls
[ $# = 8 ] && [ "$2" = "$8" ] && [ "$4" = "$6" ] || fail "QPs do not name each other: client '$lc', server '$ls'"
grep -q "^link droce_memif_c/1 lqpn [0-9]* rqpn [0-9]* type RC state RTS " "$tmp/qp_c1" || fail "client QP line"
s1=$(grep -o " sent_pkts [0-9]*" "$tmp/qp_c1" | cut -d' ' -f3)
s2=$(grep -o " sent_pkts [0-9]*" "$tmp/qp_c2" | cut -d' ' -f3)
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] || fail "sent_pkts did not grow: '$s1' then '$s2'"
qpn=$(grep -o "lqpn [0-9]*" "$tmp/qp_c1" | cut -d' ' -f2)
echo "/droce/qp,droce_memif_c/$qpn" | timeout 20 "$py" /usr/bin/dpdk-telemetry.py -f "$C" > "$tmp/py.out" 2>&1
"$py" -c '
import json, sys
j = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][0])["/droce/qp"]
assert j["state"] == "RTS" and j["transport"] == "RC" and j["counters"]["sent_pkts"] > 0, j
print("dpdk-telemetry.py: QP %d %s %s sent_pkts %d rcvd_pkts %d" % (j["qpn"], j["transport"], j["state"], j["counters"]["sent_pkts"], j["counters"]["rcvd_pkts"]))
' "$tmp/py.out" || { fail "dpdk-telemetry.py /droce/qp"; cat "$tmp/py.out"; }
"$stat" -f "$S" capture start "$tmp/verbs.pcapng" || fail "capture start (server)"
sleep 1
"$stat" -f "$S" capture stop > "$tmp/cap" || fail "capture stop (server)"
cat "$tmp/cap"
grep -Eq "^capture stopped file $tmp/verbs.pcapng snaplen [0-9]+ frames [1-9]" "$tmp/cap" || fail "capture figures"
sends=$(timeout 30 tshark -r "$tmp/verbs.pcapng" -c 20000 -Y "infiniband.bth.opcode <= 5" 2>/dev/null | wc -l)
echo "capture: $sends RoCE SEND frames (opcodes 0-5) (tshark)"
[ "$sends" -gt 0 ] || fail "no RoCE SEND in the capture"
kill "$client_pid" "$server_pid" 2>/dev/null
wait "$client_pid" 2>/dev/null; client_pid=
wait "$server_pid" 2>/dev/null; server_pid=
echo "failures: $failures"
[ $failures = 0 ]
