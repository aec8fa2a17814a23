#!/bin/bash
# Two processes over net_memif with the shipped configs: config/memif-server.ini echoes,
# config/memif-client.ini pings, at the smallest and the largest frame of MTU 1500; then both again
# raised to MTU 4200 / path_mtu 4096 as the configs' comments say (4214-byte frames).
# usage: memif_test.sh PATH/TO/dpdk-port-ping CONFIG_DIR
set -u
bin=$1
cfg=$2
runtime=${XDG_RUNTIME_DIR:-/var/run}/dpdk
[ "$(id -u)" = 0 ] || runtime=${XDG_RUNTIME_DIR:-/tmp}/dpdk
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in memif-server memif-client; do
    sed -e 's/^mtu = 1500/mtu = 4200/' -e 's/^path_mtu = 1024/path_mtu = 4096/' "$cfg/$f.ini" > "$tmp/$f-4k.ini"
done
status=0
for size in 64 1514 4214; do
    if [ "$size" = 4214 ]; then dir=$tmp; sfx=-4k; else dir=$cfg; sfx=; fi
    "$bin" --config "$dir/memif-server$sfx.ini" --role echo --count 50 --timeout-ms 30000 &
    echo_pid=$!
    # The server must listen before the client starts: a memif client's rte_eth_dev_start fails
    # (EPERM) when the server's socket is not there yet.
    sleep 1
    "$bin" --config "$dir/memif-client$sfx.ini" --role ping --count 50 --size "$size" --timeout-ms 20000
    ping_rc=$?
    [ $ping_rc = 0 ] || kill "$echo_pid" 2>/dev/null
    wait "$echo_pid"
    echo_rc=$?
    echo "memif size $size: ping $ping_rc echo $echo_rc"
    [ $ping_rc = 0 ] && [ $echo_rc = 0 ] || status=1
done
# The configs' file prefixes: EAL leaves its runtime files behind.
rm -rf "$runtime/droce-memif-server" "$runtime/droce-memif-client"
exit $status
