#!/bin/bash
# Teardown races over net_memif (issue 17). In each round one dpdk-port-ping echoes until its link
# goes down and then closes its port at once, while its peer pings 20 frames and closes its own:
# the peer's leaving makes the echo side's EAL interrupt thread run net_memif's disconnect (which
# unmaps and frees the shared regions) in the same microseconds as the echo side's own close.
# Two process pairs of ROUNDS/2 rounds each (a port's whole life per round, one EAL per process):
# first the memif client races (the server pings), then the memif server races (the client pings).
# Fails when a process dies of a signal or exits non-zero, or when dmesg gains a segfault of one of
# this test's threads (eal-intr-thread or any other).
# Root only (dmesg). usage: memif_teardown_test.sh PATH/TO/dpdk-port-ping CONFIG_DIR [ROUNDS]
set -u
bin=$1
cfg=$2
rounds=${3:-10}
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: needs root (reads dmesg)"
    exit 77
fi
per_pair=$(((rounds + 1) / 2))
tag=td$$
runtime=${XDG_RUNTIME_DIR:-/var/run}/dpdk
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp" "$runtime/droce-$tag-s" "$runtime/droce-$tag-c"
}
trap cleanup EXIT
for side in server client; do
    # Private copies: their own EAL file prefixes and a socket file in $tmp (not abstract: a
    # client's next round waits for the server's next socket file, see port_ping.cc); copy mode,
    # as on a host without hugepages: in zero-copy mode a client's second start in one process is
    # refused (README, When something goes wrong), which is not the race this test is about.
    sed -e "s|socket=/run/droce/memif.sock,socket-abstract=yes|socket=$tmp/memif.sock,socket-abstract=no|" \
        -e "s|--file-prefix=droce-memif-$side|--file-prefix=droce-$tag-${side:0:1}|" \
        -e "s|^hugepages = auto|hugepages = off|" \
        "$cfg/memif-$side.ini" > "$tmp/$side.ini"
    grep -q "socket=$tmp/memif.sock" "$tmp/$side.ini" || { echo "FAIL: $cfg/memif-$side.ini: no socket= to replace"; exit 1; }
done

dmesg_segv() { dmesg | grep -E '\]: segfault at'; }
dmesg_segv > "$tmp/segv.before"

# wait_for FILE TEXT: until FILE holds TEXT (at most 20 s).
wait_for() {
    for _ in $(seq 1 400); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

failures=0
# pair SERVER_ROLE CLIENT_ROLE: one pair of processes, per_pair rounds.
pair() {
    local s_role=$1 c_role=$2 s_args=() c_args=()
    s_args=(--config "$tmp/server.ini" --role "$s_role" --count 20 --timeout-ms 20000 --rounds "$per_pair")
    c_args=(--config "$tmp/client.ini" --role "$c_role" --count 20 --timeout-ms 20000 --rounds "$per_pair")
    [ "$s_role" = echo ] && s_args+=(--until-link-down 1)
    [ "$c_role" = echo ] && c_args+=(--until-link-down 1)
    # The memif server must listen before the client's first start.
    "$bin" "${s_args[@]}" > "$tmp/server.out" 2>&1 &
    local s_pid=$!
    pids+=("$s_pid")
    wait_for "$tmp/server.out" "(net_memif)"
    "$bin" "${c_args[@]}" > "$tmp/client.out" 2>&1 &
    local c_pid=$!
    pids+=("$c_pid")
    wait "$c_pid"
    local c_rc=$?
    wait "$s_pid"
    local s_rc=$?
    local racer=server
    [ "$c_role" = echo ] && racer=client
    local raced
    raced=$(grep -c "link went down" "$tmp/$racer.out")
    echo "$racer races: $raced teardown(s) at the link's going down; server exit $s_rc, client exit $c_rc"
    for rc in $s_rc $c_rc; do
        [ "$rc" -gt 128 ] && echo "  a process died of signal $((rc - 128))"
    done
    if [ $s_rc != 0 ] || [ $c_rc != 0 ] || [ "$raced" != "$per_pair" ]; then
        failures=$((failures + 1))
        grep -v '^EAL\|^TELEMETRY' "$tmp/server.out" | tail -4 | sed 's/^/  server: /'
        grep -v '^EAL\|^TELEMETRY' "$tmp/client.out" | tail -4 | sed 's/^/  client: /'
    fi
}
pair ping echo
pair echo ping

# A segfault of this test's threads (dmesg names the thread: eal-intr-thread, dpdk-port-ping ...):
# a thread id just after one of its process ids (threads take the next ids).
dmesg_segv > "$tmp/segv.after"
while read -r line; do
    [ -n "$line" ] || continue
    tid=$(sed -n 's/.*\[\([0-9]*\)\]: segfault at.*/\1/p' <<< "$line")
    for p in "${pids[@]}"; do
        if [ -n "$tid" ] && [ "$tid" -ge "$p" ] && [ "$tid" -le $((p + 16)) ]; then
            echo "dmesg: $line"
            failures=$((failures + 1))
            break
        fi
    done
done < <(comm -13 <(sort "$tmp/segv.before") <(sort "$tmp/segv.after"))

if [ $failures = 0 ]; then
    echo "PASS: $((2 * per_pair)) memif teardown races (client and server side), no process died, no segfault in dmesg"
    exit 0
fi
echo "FAIL: $failures failure(s) in $((2 * per_pair)) memif teardown races"
exit 1
