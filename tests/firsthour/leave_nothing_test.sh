#!/bin/bash
# Nothing left behind (issue 17): a droce-perf server and client on hugepages (memif zero-copy,
# config/memif-zc-*.ini as shipped) stopped in every way a user stops them, and after each:
#   - SIGINT / SIGTERM in the middle of a run, a normal end of the client, SIGINT to the idle
#     server after it, an error exit (a client with no server): no hugepage file of theirs in the
#     hugetlbfs mount and no runtime directory (/var/run/dpdk/droce-memif-zc-*) left;
#   - SIGKILL: the dead processes leave both, and the server its memif socket file (nothing can run
#     in a killed process); the next start on the same configs must succeed at once and leave
#     nothing when it ends.
# The droce-perf pairs use the shipped configs with the memif socket moved from an abstract name to
# a file, which is also checked: a file is what a killed server can leave behind.
# After each stop the pair starts again at once and must reach its run (the next signal's run; after
# SIGKILL a verified WRITE run, its client's normal end and SIGINT to the idle server).
# Root only (hugepages, namespaces): the test runs in its own mount and network namespace, with
# its own tmpfs on /var/run/dpdk, its own hugetlbfs mount and its own loopback (memif's abstract
# sockets and the TCP port), so concurrent runs never meet; 2 MiB hugepages the host lacks are
# reserved for the run and given back. Exit 77 (skipped) when not root or when the host cannot
# reserve hugepages.
# Then the same for a verbs program under droce-run: perftest's ib_write_bw (which leaves SIGINT and
# SIGTERM at their defaults) on the shipped configs, stopped mid-run by SIGINT, SIGTERM and SIGKILL:
# each must die of its signal (exit 130 / 143 / 137, as without droce) and, but for SIGKILL, leave
# nothing; then a pair that ends normally (started at once after the SIGKILL) leaves nothing. Skipped (with a line) where perftest is not installed.
# usage: leave_nothing_test.sh PATH/TO/droce-perf CONFIG_DIR PATH/TO/droce-run
set -u
perf=$1
cfg=$2
droce_run=$3

. "$(dirname "$0")/private_hugepages.sh"
if [ -z "${DROCE_LNB_INNER:-}" ]; then
    run_in_private_namespaces DROCE_LNB_INNER 220 "$0" "$@"
fi

# ---- inside the namespaces
enter_private_dpdk_dirs
mount -t hugetlbfs -o pagesize=2M nodev "$tmp/huge"
ip link set lo up
trap 'kill $(jobs -p) 2>/dev/null; wait; umount -l "$tmp/huge"; rm -rf "$tmp"' EXIT
port=18515
# droce-perf's pairs run on copies of the shipped zero-copy configs whose memif socket is a file
# ($tmp/memif-zc.sock, socket-abstract=no) instead of an abstract name (which ends with its
# process): a file is what a killed server can leave, and the next server must take it back.
pcfg=$tmp/cfg
mkdir -p "$pcfg"
for side in server client; do
    sed -e "s|socket=/run/droce/memif-zc.sock,socket-abstract=yes|socket=$tmp/memif-zc.sock,socket-abstract=no|" \
        "$cfg/memif-zc-$side.ini" > "$pcfg/memif-zc-$side.ini"
    grep -q "socket-abstract=no" "$pcfg/memif-zc-$side.ini" || { echo "FAIL: memif-zc-$side.ini: no socket to change"; exit 1; }
done
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# leftovers: the hugepage files and runtime directories the two processes may have left, one a line.
leftovers() {
    ls "$tmp/huge"
    ls -d /var/run/dpdk/droce-memif-zc-* 2>/dev/null
    ls "$tmp/memif-zc.sock" 2>/dev/null
}

# stop_pair SIG SERVER_PID CLIENT_PID WHAT: SIG to both; each gets 10 s to exit (then a failure and
# SIGKILL); sets src and crc to their exit statuses.
stop_pair() {
    local sig=$1 s=$2 c=$3 what=$4 p
    kill -"$sig" "$s" "$c"
    for p in "$s" "$c"; do
        timeout 10 tail --pid="$p" -f /dev/null
        kill -0 "$p" 2>/dev/null && { fail "SIG$sig: $what $p still running 10 s after the signal"; kill -KILL "$p"; }
    done
    wait "$s"
    src=$?
    wait "$c"
    crc=$?
}

# start_server NAME [--once]: a server in the background, $spid; waits for its TCP listener.
start_server() {
    "$perf" --server -c "$pcfg/memif-zc-server.ini" "${@:2}" > "$tmp/$1.server" 2>&1 &
    spid=$!
    local i
    for i in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/$1.server" && return 0
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    echo "-- server $1 did not start:"; tail -5 "$tmp/$1.server"
    return 1
}

# pair_ok NAME: a verified 64 KiB WRITE run against a server that serves until stopped, then the
# server, idle again, stopped by SIGINT; both must exit 0, and then nothing may be left.
pair_ok() {
    start_server "$1" || { fail "$1: server"; return; }
    timeout 40 "$perf" 127.0.0.1 -c "$pcfg/memif-zc-client.ini" --op write -s 65536 -n 300 --bw \
        --verify > "$tmp/$1.client" 2>&1
    local crc=$?
    for i in $(seq 1 100); do # the server is idle once it waits for its next client
        [ "$(grep -c "waiting for a client" "$tmp/$1.server")" -ge 2 ] && break
        sleep 0.1
    done
    kill -INT "$spid"
    timeout 20 tail --pid="$spid" -f /dev/null
    wait "$spid"
    local src=$?
    if [ $crc != 0 ] || [ $src != 0 ] || ! grep -q "data verified   : yes" "$tmp/$1.client"; then
        fail "$1: run failed (client $crc, server $src after SIGINT)"
        tail -n 5 "$tmp/$1.client" "$tmp/$1.server"
    else
        echo "== $1: run passed ($(grep -E '^ 65536' "$tmp/$1.client" | awk '{print $4 " Gb/s, " $7 " MB/sec"}')), idle server stopped by SIGINT: exit 0"
    fi
    local left
    left=$(leftovers | tr '\n' ' ')
    [ -z "$left" ] || fail "$1: left behind after a normal exit and an idle server's SIGINT: $left"
}

# An error exit: a client with no server (EAL up, the port fails) leaves nothing.
timeout 20 "$perf" 127.0.0.1 -c "$pcfg/memif-zc-client.ini" -n 10 > "$tmp/noserver" 2>&1
rc=$?
[ $rc = 1 ] || fail "client without a server exited $rc (expected 1)"
grep -q "no droce server is listening" "$tmp/noserver" || fail "client without a server: $(tail -1 "$tmp/noserver")"
left=$(leftovers | tr '\n' ' ')
[ -z "$left" ] || fail "left behind after an error exit: $left"
echo "== error exit (a client with no server): exit $rc; left: ${left:-nothing}"

# A live server's socket file is never taken for a stale one: a second server on it (another file
# prefix) is refused, naming the first, and the file stays.
if start_server live; then
    sed -e 's/--file-prefix=droce-memif-zc-server/--file-prefix=droce-memif-zc-second/' \
        "$pcfg/memif-zc-server.ini" > "$pcfg/second.ini"
    timeout 30 "$perf" --server --once -c "$pcfg/second.ini" -p 18601 > "$tmp/second" 2>&1
    rc=$?
    [ $rc = 1 ] && grep -q "memif socket $tmp/memif-zc.sock is in use by PID $spid" "$tmp/second" ||
        fail "a second server on a live socket file: exit $rc: $(tail -1 "$tmp/second")"
    grep -q "removed the stale memif socket" "$tmp/second" && fail "a live server's socket was taken for stale"
    [ -S "$tmp/memif-zc.sock" ] || fail "the live server's socket file is gone"
    # The same from another network namespace, where /proc/net/unix does not list the listener:
    # the second server probes it with a connection, which must not harm the live server (DPDK
    # 22.11's memif panicked when a peer left before its HELLO went out).
    for i in 1 2 3 4 5; do
        timeout 30 unshare -n "$perf" --server --once -c "$pcfg/second.ini" -p 18601 > "$tmp/second-ns" 2>&1
        rc=$?
        [ $rc = 1 ] || fail "a second server in another network namespace: exit $rc: $(tail -1 "$tmp/second-ns")"
        grep -q "removed the stale memif socket" "$tmp/second-ns" && fail "a live server's socket was taken for stale from another namespace"
        kill -0 "$spid" 2>/dev/null || { fail "the live server died when probed from another network namespace"; tail -n 8 "$tmp/live.server"; break; }
    done
    [ -S "$tmp/memif-zc.sock" ] || fail "the live server's socket file is gone"
    kill -INT "$spid"
    timeout 20 tail --pid="$spid" -f /dev/null
    wait "$spid"
    src=$?
    [ $src = 0 ] || { fail "the live server, probed by the second one, exited $src after SIGINT"; tail -n 15 "$tmp/live.server"; }
    echo "== a second server on a live socket file (here and 5 times from another network namespace): refused (exit $rc), the file stays; the first exits $src"
    [ -d /var/run/dpdk/droce-memif-zc-second ] && fail "the refused server left its runtime directory"
else
    fail "live: server"
fi

for sig in INT TERM KILL; do
    start_server "$sig" || { fail "$sig: server"; continue; }
    # Not under timeout(1): SIGKILL must reach droce-perf itself, and timeout cannot pass it on
    # (its child would live on and hold the config). -D 20 bounds the run.
    "$perf" 127.0.0.1 -c "$pcfg/memif-zc-client.ini" --op write -s 65536 -D 20 --bw \
        > "$tmp/$sig.client" 2>&1 &
    cpid=$!
    # Mid-run: the client prints its table head as the run starts. Reaching it is also the
    # restart at once after the previous stop.
    for i in $(seq 1 150); do
        grep -q "#bytes" "$tmp/$sig.client" 2>/dev/null && break
        sleep 0.1
    done
    grep -q "#bytes" "$tmp/$sig.client" || fail "$sig: the pair started after the previous stop did not reach a run"
    sleep 0.3
    [ -n "$(ls "$tmp/huge")" ] || fail "$sig: no hugepage file while running (not on hugepages?)"
    stop_pair "$sig" "$spid" "$cpid" droce-perf
    left=$(leftovers | tr '\n' ' ')
    echo "== SIG$sig mid-run: server exit $src, client exit $crc; left: ${left:-nothing}"
    if [ "$sig" = KILL ]; then
        [ -n "$left" ] || echo "   (SIGKILL left nothing this time)"
    else
        [ $src -ge 128 ] || [ $src = 0 ] || fail "SIG$sig: server exit $src"
        [ -z "$left" ] || fail "SIG$sig: left behind: $left"
    fi
done
pair_ok "after-KILL"

# wait_for FILE PATTERN TENTHS: 0 once PATTERN shows in FILE, 1 after TENTHS tenths of a second.
wait_for() {
    local i
    for i in $(seq 1 "$3"); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# verbs_pair NAME PERFTEST_ARGS...: ib_write_bw server and client under droce-run in the
# background ($vspid, $vcpid); 0 once the client's run has started (its table head printed).
# SIGINT back at its default (a background job of a script starts with it ignored; a program run
# from a terminal has it at the default), stdout line-buffered (stdbuf) so the table head shows
# when printed.
verbs_pair() {
    local name=$1
    shift
    env --default-signal=INT stdbuf -oL "$droce_run" -c "$cfg/memif-zc-server.ini" ib_write_bw -d droce_memif_zs -x 0 -F "$@" \
        > "$tmp/$name.vserver" 2>&1 &
    vspid=$!
    local i
    for i in $(seq 1 100); do # perftest listens once its device is up
        ss -Hltn 'sport = :18515' 2>/dev/null | grep -q . && break
        sleep 0.1
    done
    env --default-signal=INT stdbuf -oL "$droce_run" -c "$cfg/memif-zc-client.ini" ib_write_bw -d droce_memif_zc -x 0 -F "$@" \
        127.0.0.1 > "$tmp/$name.vclient" 2>&1 &
    vcpid=$!
    wait_for "$tmp/$name.vclient" "#bytes" 150
}

if command -v ib_write_bw > /dev/null; then
    for sig in INT TERM KILL; do
        want=$((128 + $(kill -l "$sig")))
        verbs_pair "v$sig" -D 20 || fail "droce-run ib_write_bw (SIG$sig run): the run did not start"
        sleep 0.5
        [ -n "$(ls "$tmp/huge")" ] || fail "droce-run ib_write_bw: no hugepage file while running"
        stop_pair "$sig" "$vspid" "$vcpid" ib_write_bw
        left=$(leftovers | tr '\n' ' ')
        echo "== droce-run ib_write_bw, SIG$sig mid-run: server exit $src, client exit $crc (the signal's own: $want); left: ${left:-nothing}"
        [ $src = "$want" ] && [ $crc = "$want" ] || {
            fail "droce-run ib_write_bw SIG$sig: exits $src / $crc, not $want"
            tail -n 3 "$tmp/v$sig.vserver" "$tmp/v$sig.vclient"
        }
        # SIGKILL: nothing runs in the process; the next pair (below) must start at once anyway.
        [ "$sig" = KILL ] || [ -z "$left" ] || fail "droce-run ib_write_bw SIG$sig: left behind: $left"
    done
    verbs_pair vnormal -n 2000 || fail "droce-run ib_write_bw (normal run): the run did not start"
    timeout 30 tail --pid="$vcpid" -f /dev/null
    timeout 10 tail --pid="$vspid" -f /dev/null
    kill -KILL "$vspid" "$vcpid" 2>/dev/null
    wait "$vspid"
    src=$?
    wait "$vcpid"
    crc=$?
    left=$(leftovers | tr '\n' ' ')
    echo "== droce-run ib_write_bw, a normal end after SIGKILL: server exit $src, client exit $crc; left: ${left:-nothing}"
    [ $src = 0 ] && [ $crc = 0 ] || {
        fail "droce-run ib_write_bw normal run: exits $src / $crc"
        tail -n 3 "$tmp/vnormal.vserver" "$tmp/vnormal.vclient"
    }
    [ -z "$left" ] || fail "droce-run ib_write_bw normal run: left behind: $left"
else
    echo "-- ib_write_bw (perftest) not installed: the droce-run cases are skipped"
fi

# demo.ini runs its EAL with --no-shconf: DPDK still makes a (then empty) runtime directory, which
# used to stay after every program on the default config.
if command -v ibv_devinfo > /dev/null; then
    "$droce_run" -c "$cfg/demo.ini" ibv_devinfo > "$tmp/devinfo.out" 2>&1 ||
        fail "droce-run ibv_devinfo on demo.ini: $(tail -n 2 "$tmp/devinfo.out")"
    left=$(ls -d /var/run/dpdk/droce-demo* 2>/dev/null)
    echo "== droce-run ibv_devinfo on demo.ini (--no-shconf); left: ${left:-nothing}"
    [ -z "$left" ] || fail "droce-run ibv_devinfo on demo.ini left behind: $left"
fi

# Not root: DPDK makes the base of its runtime directory ($XDG_RUNTIME_DIR/dpdk, /tmp/dpdk without
# it) 0700 and keeps it; a shared /tmp/dpdk so left belonged to the first user who ran droce, and no
# other user's EAL could start. An error exit (a client with no server) as nobody, with a fresh
# XDG_RUNTIME_DIR: nothing may stay in it.
if command -v setpriv > /dev/null; then
    nb=$(mktemp -d /tmp/droce-lnb-nobody.XXXXXX)
    chmod 755 "$nb" && mkdir "$nb/xdg" && chown nobody:nogroup "$nb/xdg"
    cp -L "$perf" "$cfg/memif-client.ini" "$nb/" && chmod a+rX "$nb"/*
    setpriv --reuid=nobody --regid=nogroup --clear-groups -- env XDG_RUNTIME_DIR="$nb/xdg" \
        HOME="$nb" timeout 30 "$nb/droce-perf" 127.0.0.1 -c "$nb/memif-client.ini" -p $port \
        --op write -s 64 -D 1 --bw > "$nb/out" 2>&1
    rc=$?
    left=$(ls -A "$nb/xdg")
    echo "== not root, a client with no server: exit $rc; left in XDG_RUNTIME_DIR: ${left:-nothing}"
    [ $rc != 0 ] && grep -q "no droce server is listening" "$nb/out" ||
        fail "not root, a client with no server: exit $rc: $(tail -n 2 "$nb/out")"
    [ -z "$left" ] || fail "not root: left in XDG_RUNTIME_DIR: $left"
    rm -rf "$nb"
fi

if [ $failures = 0 ]; then
    echo "PASS: nothing left behind after normal, error, SIGINT, SIGTERM exits (droce-perf and droce-run ib_write_bw, ibv_devinfo on demo.ini; an error exit not as root); SIGKILL's leftovers cleared by the next start"
    exit 0
fi
echo "FAILED: $failures check(s)"
exit 1
