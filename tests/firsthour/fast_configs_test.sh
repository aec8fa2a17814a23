#!/bin/bash
# The shipped memif configs are fast by default and fall back clearly (issue 15):
# config/memif-server.ini and memif-client.ini as shipped (hugepages = auto, path MTU 4096):
#   - without hugetlbfs: a droce-perf pair runs a verified 64 KiB WRITE at path MTU 4096, each
#     side prints exactly one line saying it fell back (--no-huge, memif in copy mode),
#     and droce's libibverbs.so.1 reports active_mtu 4096 with the same one line;
#   - with a hugetlbfs mount and free hugepages: the same pair runs with no fallback line, both
#     processes hold hugepage files of their prefix while they run, and nothing of theirs is left
#     in the mount or in /var/run/dpdk once they have ended;
#   - DPDK hugepage files that no process holds (a killed one's) count as free; held by a live
#     process they do not.
# Root only: runs in its own mount and network namespace (tmpfs on /var/run/dpdk, the host's
# hugetlbfs mounts hidden, its own loopback for memif's abstract socket and the TCP port); 2 MiB
# hugepages the host lacks are reserved for the run and given back. Exit 77 (skipped) when not
# root or when the host cannot reserve hugepages.
# usage: fast_configs_test.sh PATH/TO/droce-perf CONFIG_DIR BUILD/lib/verbs
set -u
perf=$1
cfg=$2
libdir=$3

. "$(dirname "$0")/private_hugepages.sh"
if [ -z "${DROCE_FAST_INNER:-}" ]; then
    run_in_private_namespaces DROCE_FAST_INNER 100 "$0" "$@"
fi

# ---- inside the namespaces
enter_private_dpdk_dirs
ip link set lo up
trap 'kill $(jobs -p) 2>/dev/null; wait; umount -l "$tmp/huge" 2>/dev/null; rm -rf "$tmp"' EXIT
port=18700
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
fallback_re='hugepages = auto, but .*--no-huge'

# pair NAME: the shipped server (--once) and client, a verified 64 KiB WRITE run with --json.
# While the client runs, the names of the hugepage files in the mount go to $tmp/NAME.held.
pair() {
    local name=$1 i
    "$perf" --server --once -c "$cfg/memif-server.ini" -p $port > "$tmp/$name.server" \
        2> "$tmp/$name.server.err" &
    local spid=$!
    for i in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/$name.server.err" && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    timeout 40 "$perf" 127.0.0.1 -c "$cfg/memif-client.ini" -p $port --op write -s 65536 -n 2000 \
        --bw --verify --json > "$tmp/$name.client" 2> "$tmp/$name.client.err" &
    local cpid=$!
    : > "$tmp/$name.held"
    while kill -0 "$cpid" 2>/dev/null; do
        ls "$tmp/huge" >> "$tmp/$name.held" 2>/dev/null
        sleep 0.2
    done
    wait "$cpid"
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2>/dev/null
    wait "$spid"
    local src=$?
    port=$((port + 1))
    if [ $crc != 0 ] || [ $src != 0 ]; then
        fail "$name: client exit $crc, server exit $src"
        tail -5 "$tmp/$name.client.err" "$tmp/$name.server.err"
        return 1
    fi
    /usr/bin/python3 - "$tmp/$name.client" <<'PY' || fail "$name: client JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j.get("ok") and j.get("verified"), "not ok or not verified"
assert j.get("path_mtu") == 4096, "path_mtu %s" % j.get("path_mtu")
PY
}

# 1. No hugetlbfs: the fallback, one line per process, the run as before.
echo "-- without hugepages"
if pair nohuge; then
    for side in server client; do
        n=$(grep -c -- "$fallback_re" "$tmp/nohuge.$side.err")
        [ "$n" = 1 ] || { fail "nohuge: $side printed $n fallback lines"; cat "$tmp/nohuge.$side.err"; }
    done
    grep -q "no hugetlbfs is mounted" "$tmp/nohuge.client.err" || fail "nohuge: the line does not say why"
    for side in client server; do # the same line on both sides (a new user's trial asked why not)
        grep -q "memif in copy mode" "$tmp/nohuge.$side.err" || fail "nohuge: the $side does not say copy mode"
    done
    grep -m1 -- "$fallback_re" "$tmp/nohuge.client.err"
fi
if command -v ibv_devinfo > /dev/null; then
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/memif-server.ini timeout 20 ibv_devinfo -v \
        > "$tmp/devinfo" 2> "$tmp/devinfo.err" || fail "ibv_devinfo on memif-server.ini failed"
    grep -Eq "active_mtu:[[:space:]]*4096" "$tmp/devinfo" || fail "ibv_devinfo: active_mtu is not 4096"
    n=$(grep -c -- "$fallback_re" "$tmp/devinfo.err")
    [ "$n" = 1 ] || fail "ibv_devinfo: $n fallback lines"
fi

# 2. Hugepages: no fallback line, hugepage files held while running, none left after.
echo "-- with hugepages"
mount -t hugetlbfs -o pagesize=2M nodev "$tmp/huge"
if pair huge; then
    for side in server client; do
        if grep -q -- "$fallback_re" "$tmp/huge.$side.err"; then
            fail "huge: $side fell back with hugepages free"
            cat "$tmp/huge.$side.err"
        fi
        grep -q "^droce-memif-${side}map_" "$tmp/huge.held" || fail "huge: no hugepage file of the $side seen"
    done
fi
left=$(ls "$tmp/huge"; ls -d /var/run/dpdk/droce-memif-* 2>/dev/null)
[ -z "$left" ] || fail "left behind: $left"

# 3. Hugepage files a killed process left (DPDK keeps them after a process ends and clears every
# unused `*map_*` file when the next process starts its EAL): free
# for hugepages = auto, which fell back to copy mode while they were there (bench/e2e/run's first
# droce pair after testpmd did, 2026-12-07); held by a live process (flock, as a running EAL holds
# its files), they are not. Another program's file takes all but 200 of the free pages, the
# leftover 150 of those: 50 free, 128 needed for -m 256, 200 once the leftover goes.
if command -v ibv_devinfo > /dev/null && command -v fallocate > /dev/null; then
    echo "-- with a killed process's hugepage files left in the mount"
    page_kb=$(awk '/Hugepagesize/ {print $2}' /proc/meminfo)
    free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
    leftover=$tmp/huge/rtemap_0 # testpmd's, of the default prefix: any prefix is cleared
    fallocate -l $(((free - 200) * page_kb))K "$tmp/huge/another-program"
    fallocate -l $((150 * page_kb))K "$leftover"
    devinfo_server() { # NAME: ibv_devinfo on the shipped server config, stderr in $tmp/NAME.err
        LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/memif-server.ini timeout 20 ibv_devinfo \
            > "$tmp/$1.out" 2> "$tmp/$1.err" || fail "$1: ibv_devinfo failed"
    }
    # falls_back NAME WHY: devinfo_server NAME printed exactly one fallback line (else a failure
    # saying WHY).
    falls_back() {
        local n
        n=$(grep -c -- "$fallback_re" "$tmp/$1.err")
        [ "$n" = 1 ] || { fail "$1: $n fallback lines $2"; cat "$tmp/$1.err"; }
    }
    # devinfo_server_locked NAME FLOCK_MODE PATH: devinfo_server NAME while another process holds
    # PATH with flock FLOCK_MODE (-o: the lock is flock's own, gone when it is killed).
    devinfo_server_locked() {
        flock "$2" -o "$3" sleep 30 &
        local holder=$!
        sleep 0.3
        devinfo_server "$1"
        kill $holder 2>/dev/null
        wait $holder 2>/dev/null
    }
    devinfo_server_locked held -s "$leftover"
    falls_back held "with a live process holding the file"
    # Made again, in case the held run's clean-up at exit took it.
    rm -f "$leftover"
    fallocate -l $((150 * page_kb))K "$leftover"
    devinfo_server leftover
    if grep -q -- "$fallback_re" "$tmp/leftover.err"; then
        fail "leftover: fell back with the killed process's pages there to be cleared"
        cat "$tmp/leftover.err"
    fi
    [ -e "$leftover" ] && fail "leftover: the EAL did not clear the file"
    # A sparse *map_* file (a size without pages: ftruncate, or the holes of the segments a
    # --single-file-segments process freed) frees nothing when the EAL clears it: not free.
    # 50 free again, the file "150 pages".
    free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
    fallocate -l $(((free - 50) * page_kb))K "$tmp/huge/another-program2"
    truncate -s $((150 * page_kb))K "$tmp/huge/rtemap_1"
    devinfo_server sparse
    falls_back sparse "with a *map_* file that holds no hugepage"
    rm -f "$tmp/huge/rtemap_1" "$tmp/huge/another-program2"
    # A DPDK process starting holds the mount's directory exclusively while it clears it: nothing
    # counts then (the leftover is that process's to take). 50 free, a leftover of 150 pages.
    fallocate -l $((150 * page_kb))K "$leftover" || fail "dirheld: no room for the leftover"
    devinfo_server_locked dirheld -x "$tmp/huge"
    falls_back dirheld "while another process clears the mount"
    rm -f "$leftover" "$tmp/huge/another-program"
fi
for name in nohuge huge; do
    [ -s "$tmp/$name.client" ] && /usr/bin/python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print("%s: 64 KiB WRITE %.2f Gb/s, path MTU %d (a check, not a figure)" % (sys.argv[2], j.get("bw_avg_gbps", 0), j.get("path_mtu", 0)))' "$tmp/$name.client" "$name"
done

if [ $failures = 0 ]; then
    echo "PASS: shipped memif configs: fallback said once without hugepages, hugepages used and given back with them"
    exit 0
fi
echo "FAIL: $failures check(s) failed"
exit 1
