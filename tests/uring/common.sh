#!/bin/bash
# Shared set-up of the uring system tests (sourced): a private directory, two uring configs on
# loopback addresses and a UDP port of this run only, and the privilege drop.
#   uring_setup TAG   sets $tmp (world-readable, removed on exit), $tmp/a.ini and $tmp/b.ini
#                     ($ip_a, $ip_b: 127.X.Y.1 and .2, $udp_port), $tcp_port, $run (the prefix that
#                     runs a command as nobody when we are root; empty otherwise).
uring_setup() {
    tmp=$(mktemp -d "/tmp/droce-$1.XXXXXX")
    chmod 755 "$tmp"
    trap 'uring_cleanup' EXIT
    local x=$((100 + $$ % 150)) y=$(($$ / 150 % 250 + 1))
    ip_a=127.$x.$y.1
    ip_b=127.$x.$y.2
    udp_port=$((20000 + ($$ * 13) % 20000))
    tcp_port=$((40000 + $$ % 20000))
    for side in a b; do
        local ip=$ip_a; [ $side = b ] && ip=$ip_b
        cat > "$tmp/$side.ini" <<INI
[device]
name = uring-$side

[port0]
driver = uring
ip = $ip/8
udp_port = $udp_port

[qp]
path_mtu = 4096
INI
    done
    run=
    if [ "$(id -u)" = 0 ]; then
        command -v setpriv > /dev/null || { echo "setpriv missing (util-linux)"; exit 77; }
        run="setpriv --reuid=nobody --regid=nogroup --clear-groups --"
    fi
    # A private runtime directory: were the DPDK EAL started, its files would land here.
    mkdir -p "$tmp/xdg"
    [ -n "$run" ] && chown nobody:nogroup "$tmp/xdg" "$tmp"
    export XDG_RUNTIME_DIR=$tmp/xdg HOME=$tmp
    pids=
}

# reachable PATH: PATH itself when the user of $run can read it, else a copy in $tmp (a build tree
# under a private home directory is out of nobody's reach). Echoes the path to use.
reachable() {
    if [ -z "$run" ] || $run test -r "$1"; then
        echo "$1"
        return
    fi
    mkdir -p "$tmp/copy"
    cp -L "$1" "$tmp/copy/" && chmod -R a+rX "$tmp/copy"
    echo "$tmp/copy/$(basename "$1")"
}

uring_cleanup() {
    local p
    for p in $pids; do kill "$p" 2> /dev/null; done
    wait 2> /dev/null
    rm -rf "$tmp"
}
