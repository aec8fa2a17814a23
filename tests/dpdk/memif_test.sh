#!/bin/bash
# Two processes over net_memif with the shipped configs: config/memif-server.ini echoes,
# config/memif-client.ini pings, at the smallest and the largest frame of MTU 1500 (the configs
# lowered to MTU 1500 / path_mtu 1024); then as shipped, MTU 4200 / path_mtu 4096 (4214-byte frames).
# Each run uses private copies of the configs (its own memif socket and EAL file prefixes, and
# hugepages = off: copy mode, no hugepages taken from a benchmark on the host), so that runs of this
# test, droce-perf's memif tests and the verbs tests never meet on one socket.
# usage: memif_test.sh PATH/TO/dpdk-port-ping CONFIG_DIR
set -u
bin=$1
cfg=$2
tag=ping$$
runtime=${XDG_RUNTIME_DIR:-/var/run}/dpdk
[ "$(id -u)" = 0 ] || runtime=${XDG_RUNTIME_DIR:-/tmp}/dpdk
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$runtime/droce-$tag-s" "$runtime/droce-$tag-c"' EXIT
for side in server client; do
    sed -e "s|socket=/run/droce/memif.sock|socket=/run/droce/memif-$tag.sock|" \
        -e "s|--file-prefix=droce-memif-$side|--file-prefix=droce-$tag-${side:0:1}|" \
        -e "s|^hugepages = auto|hugepages = off|" \
        "$cfg/memif-$side.ini" > "$tmp/memif-$side-4k.ini"
    sed -e 's/^mtu = 4200/mtu = 1500/' -e 's/^path_mtu = 4096/path_mtu = 1024/' \
        "$tmp/memif-$side-4k.ini" > "$tmp/memif-$side.ini"
done
status=0
dir=$tmp
for size in 64 1514 4214; do
    if [ "$size" = 4214 ]; then sfx=-4k; else sfx=; fi
    "$bin" --config "$dir/memif-server$sfx.ini" --role echo --count 50 --timeout-ms 30000 &
    echo_pid=$!
    # The server must listen before the client starts: a memif client's rte_eth_dev_start fails
    # (EPERM) when the server's socket is not there yet.
    sleep 1
    "$bin" --config "$dir/memif-client$sfx.ini" --role ping --count 50 --size "$size" --timeout-ms 20000 \
        --expect-mapped-in 1
    ping_rc=$?
    [ $ping_rc = 0 ] || kill "$echo_pid" 2>/dev/null
    wait "$echo_pid"
    echo_rc=$?
    echo "memif size $size: ping $ping_rc echo $echo_rc"
    [ $ping_rc = 0 ] && [ $echo_rc = 0 ] || status=1
done
exit $status
