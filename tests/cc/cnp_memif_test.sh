#!/bin/bash
# DCQCN across two processes over net_memif (private copies of config/memif-*.ini with `dcqcn =
# nvidia` and `line_rate_gbps = 10` added): the client's impairment stage (--impair) models a
# 2 Gb/s egress queue with RED marking (40..160 KB, Pmax 0.2) on its transmit side, so the link
# between the processes congests as a switch port would. 2 Gb/s: well under what the client sends
# unpaced even on a loaded host (3.4 Gb/s seen in CI beside other work, which a 4 Gb/s model never
# overflowed).
#   DCQCN on:  the server (notification point) answers the CE marks with CNPs, which cross the
#              wire: every CNP it sent was handled by the client (reaction point); the server's
#              capture (--capture, pcapng) holds them and tshark decodes them (BTH opcode 129 =
#              0x81, P_Key 0xFFFF, dest QP the client's); droce-trace --explain names each one a
#              CNP and says which marked packet it answers; the client's rate came down to the
#              congested link's: at most the modelled 2 Gb/s, with at least 10 x fewer frames
#              tail-dropped by the modelled queue than without DCQCN; every byte verified.
#              Not "almost none": with the nvidia profile alpha decays to ~0 within a millisecond
#              without CNPs (dce_tcp_rtt 1 us, g 1019/1024) and the rate climbs back to the line,
#              so a notification point that loses its core for a few milliseconds (a busy CI
#              host, other guests on the same cores) lets the client send much of its 8 MB window
#              at 10 Gb/s into the 4 MB modelled queue. Quiet host, 2026-12-05: 0, 0 and 12.4 %
#              tail-dropped, DCQCN off over 500 x more (README, DCQCN).
#   DCQCN off: the same transfer sends at the line, the modelled queue overflows and tail-drops
#              (many times more than with DCQCN), and no CNP is sent.
# usage: cnp_memif_test.sh PATH/TO/droce-perf PATH/TO/droce-trace CONFIG_DIR
set -u
bin=$1
trace=$2
cfg=$3
tag=cnp$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
# Path MTU 1024 (the memif configs carry 4096 since issue 15): the queue model and the drop
# threshold below count frames of 1 KiB payload, four times as many per transfer.
for side in server client; do
    sed -i -e 's/^\[device\]$/[device]\ndcqcn = nvidia/' -e 's/^mtu = \(.*\)$/mtu = \1\nline_rate_gbps = 10/' \
        -e 's/^path_mtu = .*$/path_mtu = 1024/' "$tmp/$side.ini"
done
tcp_port=$((20000 + ($$ + 13000) % 20000))
link_gbps=2
impair="bw=$link_gbps,queue=4000000,red_kmin=40000,red_kmax=160000,red_pmax=0.2"
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# run NAME [server args...]: server then client (64 KiB WRITEs, --verify, the impairment above);
# JSON in $tmp/NAME.server / $tmp/NAME.client.
run() {
    local name=$1
    shift
    timeout 90 "$bin" --server -c "$tmp/server.ini" -p "$tcp_port" --once --json "$@" \
        > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    server_pid=$!
    local i
    for i in $(seq 1 300); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2>/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    timeout 90 "$bin" 127.0.0.1 -c "$tmp/client.ini" -p "$tcp_port" --op write -s 65536 -n 3000 \
        --bw --verify --json --impair "$impair" > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    local src=$?
    server_pid=
    if [ $crc != 0 ] || [ $src != 0 ]; then
        fail "$name: client $crc server $src"
        tail -5 "$tmp/$name.client.err" "$tmp/$name.server.err"
        return 1
    fi
}
# field FILE EXPR: a value from a JSON file (python expression over `j`).
field() { /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

run on --capture "$tmp/on.pcapng" --snaplen 128 || true
sed -i 's/^dcqcn = nvidia$/dcqcn = off/' "$tmp/server.ini" "$tmp/client.ini"
run off || true

if [ -s "$tmp/on.client" ] && [ -s "$tmp/off.client" ]; then
    verified_on=$(field "$tmp/on.client" "j['verified']")
    gbps_on=$(field "$tmp/on.client" "round(j['bw_avg_gbps'], 2)")
    gbps_off=$(field "$tmp/off.client" "round(j['bw_avg_gbps'], 2)")
    handled=$(field "$tmp/on.client" "j['counters']['rp_cnp_handled'] + j['counters']['rp_cnp_ignored']")
    cut=$(field "$tmp/on.client" "j['counters']['rp_cnp_handled']")
    sent=$(field "$tmp/on.server" "j['counters']['np_cnp_sent']")
    marked=$(field "$tmp/on.server" "j['counters']['np_ecn_marked_roce_packets']")
    drops_on=$(field "$tmp/on.client" "j['impair']['dropped_queue_full']")
    drops_off=$(field "$tmp/off.client" "j['impair']['dropped_queue_full']")
    tx_on=$(field "$tmp/on.client" "j['impair']['tx_frames']")
    sent_off=$(field "$tmp/off.server" "j['counters']['np_cnp_sent']")
    echo "DCQCN on : $gbps_on Gb/s, $marked CE-marked packets received, $sent CNPs sent, $handled received ($cut cut the rate)," \
        "$drops_on of $tx_on frames tail-dropped by the modelled $link_gbps Gb/s queue"
    echo "DCQCN off: $gbps_off Gb/s, $sent_off CNPs sent, $drops_off frames tail-dropped"
    [ "$verified_on" = True ] || fail "DCQCN on: data not verified"
    [ "$sent" -gt 0 ] || fail "the server sent no CNP"
    [ "$handled" = "$sent" ] || fail "CNPs sent $sent, received $handled: some did not cross"
    [ "$cut" -gt 0 ] || fail "no CNP cut the client's rate"
    /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.05 * float(sys.argv[2]) else 1)" \
        "$gbps_on" "$link_gbps" || fail "DCQCN on: $gbps_on Gb/s is above the congested link's $link_gbps Gb/s"
    echo "tail-dropped: $(/usr/bin/python3 -c "import sys; print(round(100 * int(sys.argv[1]) / int(sys.argv[2]), 2))" \
        "$drops_on" "$tx_on") % of the frames sent with DCQCN on"
    [ "$drops_off" -gt $((drops_on * 10 + 1000)) ] || fail "DCQCN off should overflow the queue far more"
    [ "$sent_off" = 0 ] || fail "DCQCN off: $sent_off CNPs sent"
    # tshark: the CNPs in the server's capture, decoded as BTH opcode 129 with P_Key 0xFFFF.
    cnps=$(tshark -r "$tmp/on.pcapng" -Y 'infiniband.bth.opcode == 129 && infiniband.bth.p_key == 0xffff' \
        2>/dev/null | wc -l)
    ce=$(tshark -r "$tmp/on.pcapng" -Y 'ip.dsfield.ecn == 3 && infiniband.bth.opcode != 129' 2>/dev/null | wc -l)
    echo "tshark: $cnps CNPs (opcode 129, P_Key 0xFFFF) and $ce CE-marked RoCE packets in the server's capture"
    # The capture leaves frames out (counted) when its writer falls behind the engine.
    cap_dropped=$(sed -n 's/^droce: capture .*: [0-9]* frames, \([0-9]*\) dropped (ring full).*/\1/p' \
        "$tmp/on.server.err" | head -1)
    echo "capture: ${cap_dropped:-?} frames left out (ring full)"
    [ -n "$cap_dropped" ] || fail "the server did not report its capture"
    [ "$cnps" -le "$sent" ] && [ "$cnps" -ge $((sent - ${cap_dropped:-0})) ] ||
        fail "tshark decoded $cnps CNPs, the server sent $sent and its capture left out ${cap_dropped:-?} frames"
    [ "$ce" -gt 0 ] || fail "no CE-marked packet in the capture"
    tshark -r "$tmp/on.pcapng" -Y 'infiniband.bth.opcode == 129' -V -c 1 2>/dev/null |
        sed -n '/InfiniBand/,/Packet Sequence/p'
    # droce-trace explains them and says why.
    "$trace" read --explain "$tmp/on.pcapng" > "$tmp/on.explained" 2>&1 || fail "droce-trace failed"
    grep -m1 -B1 -A3 "CNP, congestion notification packet" "$tmp/on.explained"
    grep -m1 "^    why " "$tmp/on.explained"
    grep -q "CNP, congestion notification packet" "$tmp/on.explained" || fail "droce-trace: no CNP"
    why=$(grep -c "^    why  *the receiver got ECN-CE marked packets" "$tmp/on.explained")
    [ "$why" -gt 0 ] || fail "droce-trace gave no reason for the CNPs"
fi
echo "failures: $failures"
[ $failures = 0 ]
