#!/bin/bash
# Shared set-up of the uring link tests (sourced): two network namespaces joined by N veth pairs,
# one per plane, with the kernel holding each plane's addresses (the uring driver binds them), and
# the droce-perf runs inside them as nobody.
#   link_setup TAG N  needs root and iproute2 (exits 77, skipped, without); sets $tmp, $nsa, $nsb,
#                     $va0.. (veth of plane P on side a: ${tag}aP, side b: ${tag}bP), $ip_a P and
#                     $ip_b P (functions: 10.<pid-derived>.P.1 / .2), $tcp_port, $run (the prefix
#                     that drops to nobody), and a trap that kills what is left and removes the
#                     namespaces (with them the veths) and $tmp.
#   link_config SIDE N TIMEOUT RETRY  writes $tmp/SIDE.ini: N uring ports on the plane addresses.
#   link_wait_server FILE PID  waits until the server printed that it waits for a client.
link_setup() {
    [ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
    command -v ip > /dev/null || { echo "no iproute2: skipped"; exit 77; }
    command -v setpriv > /dev/null || { echo "setpriv missing (util-linux): skipped"; exit 77; }
    timeout 10 ip netns list > /dev/null 2>&1 || { echo "ip netns unavailable: skipped"; exit 77; }
    tag=$1$$
    nsa=droce-$tag-a
    nsb=droce-$tag-b
    net=$((100 + $$ % 150))
    tcp_port=$((40000 + $$ % 20000))
    tmp=$(mktemp -d "/tmp/droce-$1.XXXXXX")
    chmod 755 "$tmp"
    pids=
    trap 'link_cleanup' EXIT
    timeout 10 ip netns add "$nsa" || { echo "cannot create network namespaces: skipped"; exit 77; }
    timeout 10 ip netns add "$nsb" || { echo "cannot create network namespaces: skipped"; exit 77; }
    local p
    for ns in "$nsa" "$nsb"; do timeout 10 ip -n "$ns" link set lo up; done
    for p in $(seq 0 $(($2 - 1))); do
        timeout 10 ip link add "${tag}a$p" netns "$nsa" type veth peer name "${tag}b$p" netns "$nsb" ||
            { echo "cannot create veth pairs: skipped"; exit 77; }
        timeout 10 ip -n "$nsa" addr add "$(ip_a $p)/24" dev "${tag}a$p"
        timeout 10 ip -n "$nsb" addr add "$(ip_b $p)/24" dev "${tag}b$p"
        timeout 10 ip -n "$nsa" link set "${tag}a$p" up
        timeout 10 ip -n "$nsb" link set "${tag}b$p" up
    done
    run="setpriv --reuid=nobody --regid=nogroup --clear-groups --"
    chown nobody:nogroup "$tmp"
    export HOME=$tmp XDG_RUNTIME_DIR=$tmp
}
ip_a() { echo "10.$net.$1.1"; }
ip_b() { echo "10.$net.$1.2"; }

link_cleanup() {
    local p
    for p in $pids; do kill "$p" 2> /dev/null; done
    wait 2> /dev/null
    timeout 10 ip netns del "$nsa" 2> /dev/null
    timeout 10 ip netns del "$nsb" 2> /dev/null
    rm -rf "$tmp"
}

link_config() { # SIDE N TIMEOUT RETRY
    local side=$1 p ip
    {
        printf '[device]\nname = uring-%s\n\n' "$side"
        for p in $(seq 0 $(($2 - 1))); do
            if [ "$side" = a ]; then ip=$(ip_a $p); else ip=$(ip_b $p); fi
            printf '[port%d]\ndriver = uring\nip = %s/24\n\n' "$p" "$ip"
        done
        # veth MTU 1500: a 1024-byte RoCE path MTU fits.
        printf '[qp]\npath_mtu = 1024\ntimeout = %d\nretry_cnt = %d\n' "$3" "$4"
    } > "$tmp/$side.ini"
}

link_wait_server() { # FILE PID
    local i
    for i in $(seq 1 300); do
        grep -q "waiting for a client" "$1" 2> /dev/null && return 0
        kill -0 "$2" 2> /dev/null || return 1
        sleep 0.05
    done
    return 1
}
