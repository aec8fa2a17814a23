#!/bin/bash
# The README's examples run as written (issue 17): every shell block of README.md preceded by a
# `<!-- readme-test: NAME -->` line is run line by line, verbatim, from a directory where
# `build/` is this build tree and `config/` the source tree's configs (the paths the README uses);
# every line must exit 0. A line ending in `&` starts a background job, and the next line waits
# until a TCP listener appears (a user waits for the server's "waiting for a client" line the same
# way). Background jobs still running at the end of a block are stopped with SIGINT and must exit
# 0 (a droce-perf server that serves until stopped). Root only: each block runs in its own mount
# and network namespace (tmpfs on /var/run/dpdk, its own loopback, abstract sockets and TCP
# ports), so the README's fixed names never meet another run. Exit 77 when not root.
# usage: readme_examples_test.sh SOURCE_ROOT BUILD_ROOT
set -u
src=$1
build=$2
if [ -z "${DROCE_README_INNER:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces)"; exit 77; }
    DROCE_README_INNER=1 timeout 280 unshare -m -n "$0" "$@"
    exit $?
fi
mount --make-rprivate /
mkdir -p /var/run/dpdk
mount -t tmpfs tmpfs /var/run/dpdk
ip link set lo up
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
ln -s "$build" "$work/build"
ln -s "$src/config" "$work/config"
cd "$work" || exit 1

# blocks NAME<TAB>line ... from the README: the marked ```sh blocks, one command a line (a line
# ending in a backslash continues on the next).
/usr/bin/python3 - "$src/README.md" > "$work/blocks.txt" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split('\n')
i = 0
while i < len(lines):
    m = re.match(r'<!-- readme-test: ([\w-]+) -->', lines[i])
    if m and i + 1 < len(lines) and lines[i + 1].startswith('```'):
        i += 2
        cmd = ''
        while i < len(lines) and not lines[i].startswith('```'):
            cmd += lines[i]
            if cmd.endswith('\\'):
                cmd = cmd[:-1] + ' '
            else:
                if cmd.strip():
                    print(m.group(1) + '\t' + cmd)
                cmd = ''
            i += 1
    i += 1
PY
nblocks=$(cut -f1 "$work/blocks.txt" | sort -u | grep -c .)
[ "$nblocks" -ge 1 ] || { echo "FAIL: no <!-- readme-test: NAME --> block in README.md"; exit 1; }
failures=0
n=0
listeners() { ss -Hltn 2>/dev/null | grep -c .; }
# Every background job of a block, also one that ended by itself (a perftest server after its
# client; `jobs -p` no longer lists it): each must exit 0, on its own or after SIGINT.
bg_pids=()
stop_jobs() {
    local j rc
    for j in "${bg_pids[@]}"; do
        kill -INT "$j" 2>/dev/null
        timeout 15 tail --pid="$j" -f /dev/null
        wait "$j"
        rc=$?
        [ $rc = 0 ] || { echo "FAIL: a background job of block $1 exited $rc"; failures=$((failures + 1)); }
    done
    bg_pids=()
}
prev=
while IFS=$'\t' read -r name cmd; do
    if [ -n "$prev" ] && [ "$name" != "$prev" ]; then stop_jobs "$prev"; fi
    prev=$name
    n=$((n + 1))
    echo "== [$name] \$ $cmd"
    # A shell variable for the lines after it (v=$PWD/build/lib/verbs): set in this shell.
    if [[ $cmd =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]\;\&\|]*[[:space:]]*(#.*)?$ ]]; then
        eval "$cmd"
        continue
    fi
    case "$cmd" in
    *'&')
        before=$(listeners)
        eval "${cmd%&} > $work/bg$n.out 2>&1 < /dev/null &"
        bg_pids+=($!)
        for i in $(seq 1 300); do
            [ "$(listeners)" -gt "$before" ] && break
            sleep 0.1
        done
        ;;
    *)
        # env: a line may start with VAR=value assignments for its command (LD_LIBRARY_PATH=$v).
        eval "timeout 60 env $cmd" > "$work/out$n" 2>&1 < /dev/null
        rc=$?
        tail -4 "$work/out$n" | sed 's/^/   /'
        if [ $rc != 0 ]; then
            echo "FAIL: [$name] exited $rc:"
            sed 's/^/   /' "$work/out$n" | tail -15
            failures=$((failures + 1))
        fi
        ;;
    esac
done < "$work/blocks.txt"
[ -n "$prev" ] && stop_jobs "$prev"

# `./droce trace` as the README names it: FILE explains it; no FILE or a missing one says what to
# give (it used to print droce-trace's "A subcommand is required").
trace_check() { # NAME EXPECTED_RC PATTERN ARGS...
    local name=$1 want=$2 pat=$3 rc
    shift 3
    DROCE_NO_BUILD=1 DROCE_BUILD_DIR=$build "$src/droce" trace "$@" > "$work/trace.out" 2>&1
    rc=$?
    if [ $rc != "$want" ] || ! grep -Eq -- "$pat" "$work/trace.out"; then
        echo "FAIL: ./droce trace $name: exit $rc (expected $want), no /$pat/ in:"
        head -5 "$work/trace.out" | sed 's/^/   /'
        failures=$((failures + 1))
    else
        echo "== ./droce trace $name: $(grep -E -m1 -- "$pat" "$work/trace.out" | cut -c1-150)"
    fi
}
capture=$(ls "$src"/tests/data/captures/*.pcapng | head -1)
trace_check "FILE" 0 "^Connection 1: " "$capture"
trace_check "read FILE" 0 "ICRC ok" read "$capture"
cp "$capture" "$work/relative.pcapng" # a FILE relative to where the user is, not to the tree
trace_check "relative FILE" 0 "^Connection 1: " relative.pcapng
trace_check "(no file)" 2 "^usage: ./droce trace FILE"
trace_check "missing.pcapng" 2 "no capture file missing.pcapng" missing.pcapng
if [ $failures = 0 ]; then
    echo "PASS: $n README command(s) in $nblocks block(s) ran as written"
    exit 0
fi
echo "FAILED: $failures"
exit 1
