#!/bin/bash
# Shared set-up of the uring tests over a veth pair between two network namespaces (sourced, after
# common.sh). Root only: the namespaces need it; the droce processes of the uring side still drop to
# nobody ($run).
#   uring_netns_setup TAG  calls uring_setup TAG, then makes namespaces $nsa and $nsb joined by a veth
#                          pair ($va in $nsa, $vb in $nsb, MTU 1500, lo up in both), gives the kernel
#                          $ip_a/24 on $va and $ip_b/24 on $vb (10.93.N.1 and .2), and rewrites
#                          $tmp/a.ini and $tmp/b.ini as uring ports on those addresses and interfaces
#                          (UDP 4791, path MTU 1024). Exits 77 (skipped) when not root or without
#                          iproute2 namespaces. The trap removes the namespaces (and the veths with
#                          them) on every exit.
#                          $net is the /24 (10.93.N), free for more addresses.
#   uring_netns_conf FILE NAME ADDRESS INTERFACE  writes a uring port config.
#   in_a CMD... / in_b CMD...  run CMD in $nsa / $nsb.
uring_netns_setup() {
    [ "$(id -u)" = 0 ] || { echo "not root (network namespaces): skipped"; exit 77; }
    command -v ip > /dev/null || { echo "no iproute2: skipped"; exit 77; }
    timeout 10 ip netns list > /dev/null 2>&1 || { echo "ip netns unavailable: skipped"; exit 77; }
    uring_setup "$1"
    nsa=droce-$1-$$-a
    nsb=droce-$1-$$-b
    va=du$$a
    vb=du$$b
    net=10.93.$(($$ % 250 + 1))
    ip_a=$net.1
    ip_b=$net.2
    trap 'uring_netns_cleanup' EXIT
    timeout 10 ip netns add "$nsa" || { echo "cannot create a network namespace: skipped"; exit 77; }
    timeout 10 ip netns add "$nsb" || { echo "cannot create a network namespace: skipped"; exit 77; }
    timeout 10 ip link add "$va" netns "$nsa" type veth peer name "$vb" netns "$nsb" ||
        { echo "cannot create a veth pair: skipped"; exit 77; }
    local ns dev ip side
    for side in a b; do
        ns=$nsa dev=$va ip=$ip_a
        [ $side = b ] && ns=$nsb dev=$vb ip=$ip_b
        timeout 10 ip -n "$ns" link set lo up
        timeout 10 ip -n "$ns" link set "$dev" up
        timeout 10 ip -n "$ns" addr add "$ip/24" dev "$dev"
        uring_netns_conf "$tmp/$side.ini" "uring-$side" "$ip" "$dev"
    done
    # A new veth pair reports carrier after a moment (no ping on this host: the link state).
    local _
    for _ in $(seq 1 50); do
        ip -n "$nsa" link show "$va" | grep -q LOWER_UP && ip -n "$nsb" link show "$vb" | grep -q LOWER_UP &&
            return 0
        sleep 0.1
    done
    echo "FAIL: the veth pair has no carrier"
    exit 1
}

# uring_netns_conf FILE DEVICE_NAME ADDRESS INTERFACE: a uring port config on ADDRESS/24.
uring_netns_conf() {
    cat > "$1" << INI
[device]
name = $2

[port0]
driver = uring
ip = $3/24
interface = $4

[qp]
path_mtu = 1024
INI
}

in_a() { ip netns exec "$nsa" "$@"; }
in_b() { ip netns exec "$nsb" "$@"; }

uring_netns_cleanup() {
    uring_cleanup
    timeout 10 ip netns del "$nsa" 2> /dev/null
    timeout 10 ip netns del "$nsb" 2> /dev/null
}
