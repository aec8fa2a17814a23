#!/bin/bash
# Two processes in two network namespaces joined by a veth pair, net_af_packet on veth0/veth1, with
# the shipped config/netns-a.ini (ping) and config/netns-b.ini (echo). Needs root and iproute2;
# exits 77 (skipped) without them. The namespaces get unique names and are removed on exit.
# Frames of 64 and 1514 bytes with the configs as shipped (MTU 1500), then 4214 bytes with both raised
# to MTU 4200 / path_mtu 4096 and the veths to MTU 4200, as the configs' comments say.
# usage: netns_test.sh PATH/TO/dpdk-port-ping CONFIG_DIR
set -u
bin=$1
cfg=$2
[ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
command -v ip >/dev/null || { echo "no iproute2: skipped"; exit 77; }
a=droce-t$$-a
b=droce-t$$-b
ip netns add "$a" || { echo "cannot create network namespaces: skipped"; exit 77; }
if ! ip netns add "$b"; then ip netns del "$a"; echo "skipped"; exit 77; fi
tmp=$(mktemp -d)
for f in netns-a netns-b; do
    sed -e 's/^mtu = 1500/mtu = 4200/' -e 's/^path_mtu = 1024/path_mtu = 4096/' "$cfg/$f.ini" > "$tmp/$f-4k.ini"
done
trap 'rm -rf "$tmp"; ip netns del "$a"; ip netns del "$b"; rmdir /var/run/dpdk/droce-netns-a /var/run/dpdk/droce-netns-b 2>/dev/null' EXIT
ip link add veth0 netns "$a" type veth peer name veth1 netns "$b" || { echo "cannot create veth: skipped"; exit 77; }
ip -n "$a" link set veth0 up
ip -n "$b" link set veth1 up
status=0
for size in 64 1514 4214; do
    if [ "$size" = 4214 ]; then
        dir=$tmp; sfx=-4k
        ip -n "$a" link set veth0 mtu 4200
        ip -n "$b" link set veth1 mtu 4200
    else
        dir=$cfg; sfx=
    fi
    ip netns exec "$b" "$bin" --config "$dir/netns-b$sfx.ini" --role echo --count 50 --timeout-ms 30000 &
    echo_pid=$!
    ip netns exec "$a" "$bin" --config "$dir/netns-a$sfx.ini" --role ping --count 50 --size "$size" --timeout-ms 20000
    ping_rc=$?
    [ $ping_rc = 0 ] || kill "$echo_pid" 2>/dev/null
    wait "$echo_pid"
    echo_rc=$?
    echo "netns size $size: ping $ping_rc echo $echo_rc"
    [ $ping_rc = 0 ] && [ $echo_rc = 0 ] || status=1
done
exit $status
