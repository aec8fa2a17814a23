#!/bin/bash
# Debian's unmodified perftest over droce's libibverbs.so.1, two processes joined by net_memif
# (config/memif-server.ini and memif-client.ini, private copies per run). Every tool runs to
# completion with a non-zero figure, on each posting path:
#   old:  --use_old_post_send (ibv_post_send);
#   wr:   the ibv_wr_* path. perftest takes it only for devices it recognises by vendor_part_id, so
#         this run sets DROCE_VERBS_VENDOR_PART_ID=4119 (a part id perftest maps to its ibv_wr_*
#         path); the vendor id stays droce's (0). The script checks perftest says "ibv_wr* API : ON".
#   -e:   ib_send_lat in event mode beside a busy loop (old path), twice.
#   app:  ib_send_lat with DROCE_PROGRESS=app on both sides (no engine threads), as the README
#         suggests for it: its last SEND used to end in RETRY_EXC_ERR on the server, the client's
#         ACK held for a next request that never came (fixed 2026-12-06).
# Every process runs under `timeout`; the trap kills what is left and removes the copies and the EAL
# runtime directories.
# usage: perftest_test.sh BUILD/lib/verbs CONFIG_DIR [old|wr|app|all]
set -u
libdir=$1
cfg=$2
mode=${3:-all}
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_send_lat ib_read_lat; do
    command -v $t > /dev/null || { echo "SKIP: $t not installed (apt-get install perftest)"; exit 77; }
done
tag=vpt$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tcp_port=$((20000 + $$ % 20000))
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# run TOOL PATH ARGS...: server then client; checks exit codes and the result row.
run() {
    local tool=$1 path=$2
    shift 2
    local name=$tool-$path extra=()
    [ "$path" = old ] || [ "$path" = app ] && extra=(--use_old_post_send)
    local envs=()
    [ "$path" = wr ] && envs=(DROCE_VERBS_VENDOR_PART_ID=4119)
    [ "$path" = app ] && envs=(DROCE_PROGRESS=app)
    env "${envs[@]}" DROCE_CONFIG="$tmp/server.ini" timeout 60 $tool -d droce_memif_s -x 0 -F -p $tcp_port \
        "${extra[@]}" "$@" > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    server_pid=$!
    wait_tcp_listener $tcp_port "$server_pid"
    env "${envs[@]}" DROCE_CONFIG="$tmp/client.ini" timeout 60 $tool -d droce_memif_c -x 0 -F -p $tcp_port \
        "${extra[@]}" "$@" 127.0.0.1 > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$server_pid" 2>/dev/null
    wait "$server_pid"
    local src=$?
    server_pid=
    tcp_port=$((tcp_port + 1))
    if [ $crc != 0 ] || [ $src != 0 ]; then
        fail "$name: client exit $crc, server exit $src"
        tail -20 "$tmp/$name.client" "$tmp/$name.client.err" "$tmp/$name.server" "$tmp/$name.server.err"
        return
    fi
    if [ "$path" = wr ] && ! grep -Eq "ibv_wr\* API +: ON" "$tmp/$name.client"; then
        fail "$name: perftest did not use the ibv_wr_* API"
    fi
    # The result row: size, iterations, then figures (bandwidth in MB/s and Mpps, or latencies in us).
    # Every figure is positive except a latency row's standard deviation (its 7th column of 9), which
    # perftest prints with two decimals: rounds that all took about the same time print 0.00.
    local row
    row=$(awk '/^ *#bytes/ {getline; print; exit}' "$tmp/$name.client")
    if ! echo "$row" | awk '{ok = NF >= 4
            for (i = 3; i <= NF; ++i) {
                if ($i !~ /^[0-9.]+$/) ok = 0
                else if ($i + 0 <= 0 && !(NF == 9 && i == 7)) ok = 0
            }
            exit ok ? 0 : 1}'; then
        fail "$name: no sane result row: '$row'"
        tail -20 "$tmp/$name.client"
        return
    fi
    echo "== $name: $(echo $row | tr -s ' ')"
}

paths="old wr"
[ "$mode" = all ] || paths=$mode
[ "$mode" = app ] && paths= # only ib_send_lat, below: ib_write_lat spins on memory, which app mode never serves
for path in $paths; do
    run ib_write_bw $path -n 500
    run ib_read_bw $path -n 500
    run ib_send_bw $path -n 500
    run ib_atomic_bw $path -n 500
    run ib_write_lat $path -n 200
    run ib_send_lat $path -n 200
    run ib_read_lat $path -n 200
done
if [ "$mode" = all ] || [ "$mode" = app ]; then
    for round in 1 2 3; do
        run ib_send_lat app -n 200
    done
fi
if [ "$mode" = all ] || [ "$mode" = old ]; then
    # Event mode (-e) beside a busy loop: perftest waits for one completion event after each SEND
    # and then polls only its send CQ, so the ACK that completes a SEND must reach it before the
    # peer's answer. With the ACK held behind the answer every run hung here (5 of 5, 2026-12-06).
    (timeout 60 sh -c 'while :; do :; done') &
    hog=$!
    for round in 1 2; do
        run ib_send_lat old -n 200 -e
    done
    kill "$hog" 2> /dev/null
    wait "$hog" 2> /dev/null
fi
echo "failures: $failures"
[ $failures = 0 ]
