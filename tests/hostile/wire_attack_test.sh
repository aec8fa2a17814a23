#!/bin/bash
# Attack on the wire: two droce endpoints (wire-victim: a verified 4 KiB RDMA WRITE-with-immediate
# stream from A to B, eight idle connected QPs each side, a guarded MR each side) and an attacker, in
# three network namespaces on a Linux bridge (a fourth namespace holds the bridge). The attacker
# (wire_attack.py, scapy) sends forged RoCEv2 frames while the stream runs and against the idle
# QPs, and checks the IBTA outcome of each: wrong destination MAC / IP, wrong source, no such QPN,
# truncation at every length, a wrong ICRC, PSNs outside the window, guessed and stale rkeys,
# VAs and lengths at and past the MR's bounds, forged ACK / NAK / RNR / READ responses from the
# wrong and the right source, and a 100 k-frame flood; then that the stream lost nothing.
# droce's ports are net_af_packet on the veths (config/netns-{a,b}.ini copies: own iface, EAL
# prefix, droce address; ARP between the endpoints, no static neighbours).
# Needs root, iproute2 network namespaces and Debian's scapy (/usr/bin/python3); exits 77 without.
# usage: wire_attack_test.sh PATH/TO/wire-victim SOURCE_DIR/tests/hostile
set -u
victim=$1
here=$2
cfg=$here/../../config
[ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
command -v ip > /dev/null || { echo "no iproute2: skipped"; exit 77; }
timeout 10 ip netns list > /dev/null 2>&1 || { echo "ip netns unavailable: skipped"; exit 77; }
/usr/bin/python3 -c 'import scapy.contrib.roce' 2> /dev/null || { echo "no scapy: skipped"; exit 77; }

tag=wa$$
ns_s=droce-$tag-s
ns_a=droce-$tag-a
ns_b=droce-$tag-b
ns_m=droce-$tag-m
n=$(($$ % 250 + 1))
tmp=$(mktemp -d)
runtime=/var/run/dpdk
cleanup() {
    local ns
    for ns in "$ns_a" "$ns_b" "$ns_m" "$ns_s"; do timeout 10 ip netns pids "$ns" 2> /dev/null | xargs -r kill -9; done
    for ns in "$ns_a" "$ns_b" "$ns_m" "$ns_s"; do timeout 10 ip netns del "$ns" 2> /dev/null; done
    rm -rf "$tmp" "$runtime/droce-$tag-a" "$runtime/droce-$tag-b"
}
trap cleanup EXIT
for ns in "$ns_s" "$ns_a" "$ns_b" "$ns_m"; do
    timeout 10 ip netns add "$ns" || { echo "cannot create network namespaces: skipped"; exit 77; }
    timeout 10 ip -n "$ns" link set lo up
done
timeout 10 ip -n "$ns_s" link add br0 type bridge stp_state 0 forward_delay 0 || { echo "no bridge: skipped"; exit 77; }
# A plain learning switch: with br_netfilter loaded (Docker hosts), a bridge hands IPv4 frames to
# iptables, whose IP sanity checks drop the truncated and corrupted frames before they reach droce.
for t in iptables ip6tables arptables; do
    timeout 10 ip netns exec "$ns_s" sysctl -qw "net.bridge.bridge-nf-call-$t=0" 2> /dev/null
done
timeout 10 ip -n "$ns_s" link set br0 up
for x in a b m; do
    ns=droce-$tag-$x
    timeout 10 ip link add "${tag}$x" netns "$ns" type veth peer name "s$x" netns "$ns_s" ||
        { echo "cannot create a veth pair: skipped"; exit 77; }
    timeout 10 ip -n "$ns_s" link set "s$x" master br0 up
    timeout 10 ip -n "$ns" link set "${tag}$x" up
done
timeout 10 ip -n "$ns_a" addr add "10.99.$n.1/24" dev "${tag}a"
timeout 10 ip -n "$ns_b" addr add "10.99.$n.2/24" dev "${tag}b"
timeout 10 ip -n "$ns_m" addr add "10.99.$n.3/24" dev "${tag}m"
# The kernels answer no IPv6 traffic of their own on the bridge (fewer frames the filter counts).
for x in a b m; do timeout 10 ip netns exec "droce-$tag-$x" sysctl -qw net.ipv6.conf.all.disable_ipv6=1; done

sed -e "s|iface=veth0|iface=${tag}a|" -e "s|--file-prefix=droce-netns-a|--file-prefix=droce-$tag-a|" \
    -e "s|^ip = 10\.2\.0\.1/24|ip = 10.98.$n.1/24|" -e '/^10\.2\.0\.[0-9]* *=/d' "$cfg/netns-a.ini" > "$tmp/a.ini"
sed -e "s|iface=veth1|iface=${tag}b|" -e "s|--file-prefix=droce-netns-b|--file-prefix=droce-$tag-b|" \
    -e "s|^ip = 10\.2\.0\.2/24|ip = 10.98.$n.2/24|" -e '/^10\.2\.0\.[0-9]* *=/d' "$cfg/netns-b.ini" > "$tmp/b.ini"
for f in a b; do
    if grep -v '^ *#' "$tmp/$f.ini" | grep -q '10\.2\.0\.\|veth[01]\|droce-netns'; then
        echo "FAIL: config copy $f.ini still names the shipped iface, prefix or addresses"; exit 1
    fi
done

timeout 280 ip netns exec "$ns_m" /usr/bin/python3 "$here/wire_attack.py" "$victim" "$tmp" "$ns_a" "$ns_b" \
    "10.99.$n.2" "${tag}m" 18600 "10.98.$n.3" "10.98.$n.77"
rc=$?
[ $rc = 0 ] && echo "PASS: wire attacks" || echo "FAIL: wire attacks ($rc)"
exit $rc
