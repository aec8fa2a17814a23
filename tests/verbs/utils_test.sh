#!/bin/bash
# Debian's unmodified ibverbs-utils over droce's libibverbs.so.1:
#   - ibv_devices / ibv_devinfo with the default config (config/demo.ini: droce_a, droce_b) list the
#     devices with their ports PORT_ACTIVE, link layer Ethernet and a RoCE v2 IPv4-mapped GID;
#     with DROCE_CONFIG the config's device instead;
#   - ibv_rc_pingpong -c (the receiver checks every byte) between two processes over net_memif
#     (private copies of config/memif-*.ini), sizes 1 B, 4 KiB and 64 KiB, plus completion events
#     (-e) and the ibv_wr_* API (-N).
# usage: utils_test.sh BUILD/lib/verbs CONFIG_DIR
set -u
libdir=$1
cfg=$2
for t in ibv_devinfo ibv_devices ibv_rc_pingpong; do
    command -v $t > /dev/null || { echo "SKIP: $t not installed (apt-get install ibverbs-utils)"; exit 77; }
done
tag=vut$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# ---- ibv_devices / ibv_devinfo
unset DROCE_CONFIG
timeout 60 ibv_devices > "$tmp/devices" 2>&1 || fail "ibv_devices exited $?"
grep -q droce_a "$tmp/devices" && grep -q droce_b "$tmp/devices" || { fail "ibv_devices: no droce_a / droce_b"; cat "$tmp/devices"; }
timeout 60 ibv_devinfo -v > "$tmp/devinfo" 2> "$tmp/devinfo.err" || fail "ibv_devinfo exited $?"
for want in "hca_id:.droce_a" "hca_id:.droce_b" "state:.*PORT_ACTIVE" "link_layer:.*Ethernet" \
            "GID\[ *0\]:.*::ffff:10.0.0.1, RoCE v2" "atomic_cap:.*ATOMIC_HCA" "vendor_id:.*0x0*2d0ce"; do
    grep -Eq "$want" "$tmp/devinfo" || fail "ibv_devinfo -v: no line matching '$want'"
done
[ "$(grep -Ec 'state:.*PORT_ACTIVE' "$tmp/devinfo")" = 8 ] || fail "ibv_devinfo: expected 8 active ports (2 devices x 4 planes)"
grep -q . "$tmp/devinfo.err" && echo "-- ibv_devinfo stderr:" && head -5 "$tmp/devinfo.err"
[ $failures = 0 ] && echo "== ibv_devinfo: droce_a, droce_b, 8 ports PORT_ACTIVE, RoCE v2 GIDs"
DROCE_CONFIG="$tmp/server.ini" timeout 60 ibv_devinfo > "$tmp/devinfo.s" 2>&1
grep -q "hca_id:.droce_memif_s" "$tmp/devinfo.s" && grep -q PORT_ACTIVE "$tmp/devinfo.s" ||
    { fail "ibv_devinfo with DROCE_CONFIG"; cat "$tmp/devinfo.s"; }
# A malformed DROCE_* variable fails the open with one line naming it and what it takes, not the
# exit hint that blames the device name (the demo config; nothing is brought up).
for bad in DROCE_PROGRESS=fast DROCE_PROGRESS_PASSES=0 DROCE_ENGINE_WAKE=bogus DROCE_ENGINE_NICE=-30 \
           DROCE_ENGINE_NICE=5x DROCE_ENGINE_BACKOFF=20,2000 DROCE_ENGINE_BACKOFF=20,2000,1e6 \
           DROCE_ENGINE_STEP_ASIDE_US=5ms DROCE_ENGINE_STEP_ASIDE_US=2000000 DROCE_CAPTURE_SNAPLEN=10; do
    env "$bad" timeout 60 ibv_devinfo > "$tmp/badenv" 2>&1
    rc=$?
    if [ $rc = 0 ] || ! grep -q "^droce: $bad is not " "$tmp/badenv" || grep -q "opened none" "$tmp/badenv"; then
        fail "ibv_devinfo with $bad exited $rc"; cat "$tmp/badenv"
    fi
done
[ $failures = 0 ] && echo "== malformed DROCE_* variables: each refused with its own line ($(grep -m1 '^droce:' "$tmp/badenv"))"

# ---- ibv_rc_pingpong NAME ARGS...
tcp_port=$((20000 + ($$ + 7000) % 20000))
pingpong() {
    local name=$1
    shift
    DROCE_CONFIG="$tmp/server.ini" timeout 60 ibv_rc_pingpong -d droce_memif_s -g 0 -p $tcp_port -c "$@" \
        > "$tmp/$name.server" 2>&1 &
    server_pid=$!
    wait_tcp_listener $tcp_port "$server_pid"
    env ${PP_CLIENT_ENV:-} DROCE_CONFIG="$tmp/client.ini" timeout 60 ibv_rc_pingpong -d droce_memif_c -g 0 -p $tcp_port -c "$@" 127.0.0.1 \
        > "$tmp/$name.client" 2>&1
    local crc=$?
    [ $crc = 0 ] || kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    local src=$?
    server_pid=
    tcp_port=$((tcp_port + 1))
    if [ $crc != 0 ] || [ $src != 0 ] || grep -qi "fail\|error" "$tmp/$name.client" "$tmp/$name.server" ||
       ! grep -q "iters in" "$tmp/$name.client" || ! grep -q "iters in" "$tmp/$name.server"; then
        fail "ibv_rc_pingpong $name: client $crc server $src"
        tail -n 8 "$tmp/$name.client" "$tmp/$name.server"
        return
    fi
    echo "== ibv_rc_pingpong $name: $(grep 'iters in' "$tmp/$name.client")"
}
# Negative: a memif client with no server cannot bring its port up: ibv_open_device fails (ENODEV,
# the reason on stderr) and the tool exits non-zero at once, no hang.
DROCE_CONFIG="$tmp/client.ini" timeout 60 ibv_rc_pingpong -d droce_memif_c -g 0 -p $tcp_port 127.0.0.1 \
    > "$tmp/noserver" 2>&1
rc=$?
if [ $rc = 0 ] || [ $rc = 124 ] || ! grep -q "droce: device droce_memif_c" "$tmp/noserver"; then
    fail "ibv_rc_pingpong without a server exited $rc"; cat "$tmp/noserver"
else
    echo "== no server: ibv_rc_pingpong exited $rc: $(grep -m1 'droce:' "$tmp/noserver" | cut -c1-100)"
fi
rm -rf "$runtime/droce-$tag-c"
# Negative: without -g, ibv_rc_pingpong connects with no GRH, which RoCE refuses (EINVAL, as a
# ConnectX or rxe port does): the server, which connects first, fails at RTR and droce says why,
# once; the client then fails too.
DROCE_CONFIG="$tmp/server.ini" timeout 60 ibv_rc_pingpong -d droce_memif_s -p $tcp_port > "$tmp/nogrh.server" 2>&1 &
server_pid=$!
wait_tcp_listener $tcp_port "$server_pid"
DROCE_CONFIG="$tmp/client.ini" timeout 60 ibv_rc_pingpong -d droce_memif_c -p $tcp_port 127.0.0.1 > "$tmp/nogrh.client" 2>&1
crc=$?
wait "$server_pid"
src=$?
server_pid=
tcp_port=$((tcp_port + 1))
hint="droce: ibv_modify_qp: an address without a GRH"
if [ $crc = 0 ] || [ $crc = 124 ] || [ $src = 0 ] || [ $src = 124 ] ||
   [ "$(grep -c "$hint" "$tmp/nogrh.server")" != 1 ] || ! grep -qi "modify QP to RTR" "$tmp/nogrh.server"; then
    fail "ibv_rc_pingpong without -g: client $crc server $src"; cat "$tmp/nogrh.client" "$tmp/nogrh.server"
else
    echo "== no GID (-g): ibv_rc_pingpong server exited $src at RTR: $(grep -m1 "$hint" "$tmp/nogrh.server" | cut -c1-90)"
fi
rm -rf "$runtime/droce-$tag-c" "$runtime/droce-$tag-s"
pingpong size1 -s 1 -n 200
pingpong size4096 -s 4096 -n 200
pingpong size65536 -s 65536 -n 50
pingpong events -s 4096 -n 200 -e
pingpong wr-api -s 4096 -n 200 -N
# DROCE_CAPTURE: the client writes every frame to a pcapng file, reports the count at exit, and
# tshark reads the file (RoCE frames decoded as InfiniBand BTH, none malformed).
PP_CLIENT_ENV="DROCE_CAPTURE=$tmp/pp.pcapng" pingpong capture -s 4096 -n 20
if ! grep -q "droce: capture $tmp/pp.pcapng: [1-9][0-9]* frames, 0 dropped" "$tmp/capture.client"; then
    fail "DROCE_CAPTURE: no report line"; tail -3 "$tmp/capture.client"
elif command -v tshark > /dev/null; then
    bth=$(tshark -n -r "$tmp/pp.pcapng" -Y infiniband.bth 2>/dev/null | wc -l)
    bad=$(tshark -n -r "$tmp/pp.pcapng" -Y '_ws.malformed' 2>/dev/null | wc -l)
    if [ "$bth" -lt 40 ] || [ "$bad" != 0 ]; then
        fail "DROCE_CAPTURE: tshark found $bth BTH frames, $bad malformed"
    else
        echo "== DROCE_CAPTURE: $(grep -m1 'droce: capture' "$tmp/capture.client" | sed "s|$tmp/||"); tshark: $bth BTH frames"
    fi
fi
echo "failures: $failures"
[ $failures = 0 ]
