#!/bin/bash
# Two droce-perf processes over loopback on the io_uring socket driver (drivers/uring), as an
# unprivileged user (root drops to nobody with setpriv): RDMA WRITE, READ and SEND with --verify at
# 0, 1, 4095, 4097 bytes and 1 MiB. No DPDK EAL may run: no "EAL" line on
# stderr, the private runtime directory stays empty, no hugepage mapping and no EAL thread in the
# server, and no file of the test's user in /dev/hugepages, /var/run/dpdk or /tmp/dpdk.
# usage: uring_perf_test.sh PATH/TO/droce-perf
set -u
bin=$1
. "$(dirname "$0")/common.sh"
uring_setup uperf
bin=$(reachable "$bin")
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
# Files the test's user made in the EAL's places since the start (other DPDK processes on the
# host may come and go there meanwhile; only ours matter).
touch "$tmp/start"
owned() {
    find /dev/hugepages /var/run/dpdk /tmp/dpdk -user "$($run id -un)" -newer "$tmp/start" \
        2> /dev/null
}

server_args="" # extra arguments of the next servers
run_pair() { # NAME CLIENT_ARGS...
    local name=$1
    shift
    # shellcheck disable=SC2086
    $run timeout 50 "$bin" --server -c "$tmp/b.ini" -p "$tcp_port" --once $server_args \
        > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    local spid=$!
    pids="$pids $spid"
    local i
    for i in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2> /dev/null && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.05
    done
    # The server while it waits: no hugepage file or EAL memory segment mapped, and none of the
    # threads rte_eal_init starts (interrupt, multi-process, telemetry).
    local dp
    dp=$(pgrep -f -n "droce-perf --server -c $tmp/b.ini")
    if [ -z "$dp" ]; then
        fail "$name: no server process to inspect"
    else
        if grep -Eq "hugepages|rtemap_" "/proc/$dp/maps" 2> /dev/null; then
            fail "$name: the server maps hugepage / EAL memory"
        fi
        if cat /proc/"$dp"/task/*/comm 2> /dev/null | grep -Eq "eal-intr|rte_mp"; then
            fail "$name: the server runs EAL threads"
        fi
        [ -S "$tmp/xdg/dpdk/droce-uring-$dp/dpdk_telemetry.v2" ] ||
            fail "$name: no telemetry socket for the server"
    fi
    $run timeout 40 "$bin" "$ip_b" -c "$tmp/a.ini" -p "$tcp_port" "$@" \
        > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2> /dev/null
    wait "$spid"
    local src=$?
    echo "== $name: client $crc server $src: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$tmp/$name.client" | head -1)"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        tail -n 5 "$tmp/$name.client.err" "$tmp/$name.server.err" "$tmp/$name.server"
        return 1
    fi
    grep -q "data verified   : yes" "$tmp/$name.client" || { fail "$name: data not verified"; return 1; }
    if grep -h "EAL" "$tmp/$name.client.err" "$tmp/$name.server.err"; then
        fail "$name: a process started the DPDK EAL"
    fi
    return 0
}

[ -n "$run" ] && echo "running as: $($run id -un)"
for op in write read send; do
    for size in 0 1 4095 4097 1048576; do
        n="-n 50"; [ $size = 1048576 ] && n="-n 8 -t 4" # 4 slots of 1 MiB, not 128: a short set-up
        # shellcheck disable=SC2086
        run_pair "$op-$size" --op $op -s $size $n --bw --verify || fail "$op $size"
    done
done
# One latency run; then both sides in inline-progress mode, whose uring ports take completions
# cooperatively (drivers/uring TaskRun::coop: no interrupt; the polling thread runs the kernel's
# flagged work itself): a transfer and a latency run, every byte verified.
run_pair "write-lat" --op write -s 64 -n 200 --lat --verify || fail "write lat"
server_args="--inline-progress"
run_pair "write-4097-inline" --op write -s 4097 -n 50 --bw --verify --inline-progress ||
    fail "write 4097 inline"
run_pair "read-1M-inline" --op read -s 1048576 -n 8 -t 4 --bw --verify --inline-progress ||
    fail "read 1 MiB inline"
run_pair "write-lat-inline" --op write -s 64 -n 200 --lat --verify --inline-progress ||
    fail "write lat inline"
server_args=""

# The telemetry sockets' directories are gone; their base (dpdk/) may stay (only the process that
# made it removes it, when it is empty then).
left=$(ls -A "$tmp/xdg" | grep -vx dpdk; ls -A "$tmp/xdg/dpdk" 2> /dev/null)
[ -z "$left" ] || fail "files in the runtime directory: $left"
[ -z "$(owned)" ] || fail "EAL files of ours: $(owned)"
echo "failures: $failures"
[ $failures = 0 ]
