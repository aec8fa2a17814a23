# Sourced (bash) by the tests that run two processes over net_memif. After
#     tag=<unique, e.g. name$$>; memif_pair_setup CONFIG_DIR [BASE]
# $tmp is a fresh directory holding server.ini and client.ini: private copies of
# CONFIG_DIR/BASE-server.ini and BASE-client.ini (BASE: memif, the default, or memif4 for the
# four-plane files) with their own memif socket and EAL file prefixes (droce-$tag-s,
# droce-$tag-c), so that concurrent runs of any of these tests never meet, and with `hugepages =
# off` (no hugepages, memif copy mode): tests never take the hugepages a benchmark or another test
# on the host reserved (firsthour-fast-configs checks the shipped `auto`). An EXIT
# trap kills $server_pid (the caller sets it while a server runs) and removes $tmp and the EAL
# runtime directories the two prefixes leave behind.
memif_pair_cleanup() {
    [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp" "$runtime/droce-$tag-s" "$runtime/droce-$tag-c"
}

memif_pair_setup() {
    local cfg=$1 base=${2:-memif} side
    tmp=$(mktemp -d)
    runtime=${XDG_RUNTIME_DIR:-/var/run}/dpdk
    [ "$(id -u)" = 0 ] || runtime=${XDG_RUNTIME_DIR:-/tmp}/dpdk
    server_pid=
    trap memif_pair_cleanup EXIT
    for side in server client; do
        sed -e "s|socket=/run/droce/$base.sock|socket=/run/droce/memif-$tag.sock|" \
            -e "s|--file-prefix=droce-$base-$side|--file-prefix=droce-$tag-${side:0:1}|" \
            -e "s|^hugepages = auto|hugepages = off|" \
            "$cfg/$base-$side.ini" > "$tmp/$side.ini"
    done
}

# wait_tcp_listener PORT PID: returns once something listens on TCP PORT, PID has exited, or 20 s
# passed. A server's stdout redirected to a file is fully buffered, so its listener is what tells it
# is ready.
wait_tcp_listener() {
    local port=$1 pid=$2 i
    for i in $(seq 1 200); do
        [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
