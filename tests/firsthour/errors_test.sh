#!/bin/bash
# Every error says what to do (issue 17): the mistakes of a first hour, each made on purpose, and
# the one line droce prints for it checked for its cause and its remedy; never "errno 0".
#   - a memif client with no server listening;
#   - a second process on the same config (its DPDK file prefix is locked): names the first's PID;
#   - a memif server whose socket another process holds (another file prefix): names the holder;
#   - a uring port whose UDP port another program holds: names the holder;
#   - hugepages asked for on a host without a hugetlbfs mount;
#   - the shipped PCI NIC config (config/pci-nic.ini) on a host without that PCI address;
#   - unsupported verbs through the drop-in libibverbs.so.1 (ibv_srq_pingpong: SRQ,
#     ibv_ud_pingpong: UD QPs): "droce: VERB is not supported (README: Unsupported)", once;
#   - a device name the config does not have (ibv_rc_pingpong -d mlx5_0) and rdma_cm
#     (ib_write_bw -R, rping): droce's line at exit names the devices there are and says rdma_cm
#     is not.
#   - a verbs program (ibv_devinfo) on a memif client config with no server: the no-server line, no
#     exit hint blaming the device name; droce's exit lines after the program's own buffered output.
# Root only: it runs in its own mount and network namespace (a tmpfs on /var/run/dpdk, no
# hugetlbfs, its own loopback and abstract sockets), so it never meets another run. Exit 77 when
# not root.
# usage: errors_test.sh PATH/TO/droce-perf CONFIG_DIR VERBS_LIBDIR
set -u
perf=$1
cfg=$2
libdir=$3
if [ -z "${DROCE_ERR_INNER:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces)"; exit 77; }
    DROCE_ERR_INNER=1 timeout 100 unshare -m -n "$0" "$@"
    exit $?
fi
mount --make-rprivate /
mkdir -p /var/run/dpdk
mount -t tmpfs tmpfs /var/run/dpdk
awk '$3 == "hugetlbfs" {print $2}' /proc/mounts | while read -r m; do umount -l "$m"; done
ip link set lo up
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
# expect NAME FILE PATTERN...: FILE holds every PATTERN (grep -E) and no "errno 0".
expect() {
    local name=$1 file=$2 pat
    shift 2
    for pat in "$@"; do
        grep -Eq -- "$pat" "$file" || { fail "$name: no /$pat/ in:"; sed 's/^/    /' "$file"; return; }
    done
    if grep -q "errno 0" "$file"; then fail "$name: says errno 0"; return; fi
    echo "== $name: $(grep -E -m1 -- "$1" "$file" | cut -c1-220)"
}
wait_server() { # FILE PID
    local i
    for i in $(seq 1 200); do
        grep -q "waiting for a client" "$1" && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# 1. A client with no server.
timeout 30 "$perf" 127.0.0.1 -c "$cfg/memif-client.ini" -n 10 > "$tmp/noserver" 2>&1
rc=$?
[ $rc = 1 ] || fail "no server: exit $rc, expected 1"
expect "client, no server" "$tmp/noserver" \
    "no droce server is listening on memif socket /run/droce/memif.sock" "start the server first"

# 2. A second server on the same config, 3. another server on the same socket.
"$perf" --server -c "$cfg/memif-server.ini" > "$tmp/first" 2>&1 &
first=$!
wait_server "$tmp/first" "$first" || fail "first server did not start: $(tail -2 "$tmp/first")"
timeout 30 "$perf" --server --once -c "$cfg/memif-server.ini" -p 18600 > "$tmp/second" 2>&1
rc=$?
[ $rc = 1 ] || fail "second process on one config: exit $rc, expected 1"
expect "same config twice" "$tmp/second" \
    "file prefix \"droce-memif-server\" .* is in use by PID $first \(droce-perf\)" "a config of its own .*another --file-prefix.*socket="
sed -e 's/--file-prefix=droce-memif-server/--file-prefix=droce-errtest-other/' \
    "$cfg/memif-server.ini" > "$tmp/other-prefix.ini"
timeout 30 "$perf" --server --once -c "$tmp/other-prefix.ini" -p 18601 > "$tmp/socket" 2>&1
rc=$?
[ $rc = 1 ] || fail "memif socket in use: exit $rc, expected 1"
expect "memif socket in use" "$tmp/socket" \
    "memif socket /run/droce/memif.sock .* is in use by PID $first \(droce-perf\)" "another socket="
[ -d /var/run/dpdk/droce-errtest-other ] && fail "the failed server left its runtime directory"
kill -INT "$first"
wait "$first"

# 3b. A uring port's UDP port held by another program (share = no): names it.
/usr/bin/python3 -c 'import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 4791)); time.sleep(60)' &
holder=$!
for i in $(seq 1 50); do ss -Hlun 2>/dev/null | grep -q ':4791 ' && break; sleep 0.1; done
timeout 30 "$perf" --server --once -c "$cfg/uring-a.ini" > "$tmp/udp" 2>&1
rc=$?
[ $rc = 1 ] || fail "UDP port in use: exit $rc, expected 1"
expect "UDP port in use" "$tmp/udp" "UDP port 4791 on 127.0.0.1 is in use by PID $holder \(python3\)" \
    "another udp_port" "share = yes"
kill "$holder"
wait "$holder" 2>/dev/null

# 4. Hugepages asked for, none mounted (this namespace has no hugetlbfs).
# (Without `hugepages = auto`: the shipped file would fall back to --no-huge and run.)
sed -e '/^hugepages = auto/d' "$cfg/memif-server.ini" > "$tmp/huge.ini"
timeout 30 "$perf" --server --once -c "$tmp/huge.ini" > "$tmp/huge" 2>&1
expect "no hugepages" "$tmp/huge" "asks for hugepages .* no hugetlbfs is mounted" "--no-huge"

# 4b. The shipped PCI NIC example on a host without that PCI address (without hugepages here).
sed -e 's/^eal = -a 0000:03:00.0 -l 0 /eal = -a 0000:03:00.0 -l 0 --no-huge -m 256 /' \
    "$cfg/pci-nic.ini" > "$tmp/pci.ini"
if [ -e /sys/bus/pci/devices/0000:03:00.0 ]; then
    echo "-- this host has a PCI device 0000:03:00.0: the no-device case is not checked"
else
    timeout 30 "$perf" --server --once -c "$tmp/pci.ini" > "$tmp/pci" 2>&1
    rc=$?
    [ $rc = 1 ] || fail "no PCI device: exit $rc, expected 1"
    expect "no PCI device" "$tmp/pci" "no PCI device 0000:03:00.0 on this host" \
        "README: Two hosts, or a real NIC"
fi

# 5. Unsupported verbs, through the drop-in library (one line per verb, the program's own after).
for tool in ibv_srq_pingpong:ibv_create_srq ibv_ud_pingpong:"UD QP"; do
    prog=${tool%%:*}
    verb=${tool#*:}
    if ! command -v "$prog" > /dev/null; then
        echo "-- $prog not installed (ibverbs-utils): not checked"
        continue
    fi
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/memif-server.ini timeout 20 "$prog" \
        -d droce_memif_s -g 0 > "$tmp/$prog" 2>&1
    expect "$prog" "$tmp/$prog" "^droce: .*$verb.* is not supported \(README: Unsupported\)"
    n=$(grep -c "^droce: .* is not supported" "$tmp/$prog")
    [ "$n" = 1 ] || fail "$prog: $n 'not supported' lines, expected 1"
done

# 6. A device name the config does not have; 7. rdma_cm (perftest -R): the programs print their own
# words only, droce adds one line at exit naming both causes.
if command -v ibv_rc_pingpong > /dev/null; then
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/memif-server.ini timeout 20 ibv_rc_pingpong \
        -d mlx5_0 -g 0 > "$tmp/badname" 2>&1
    expect "wrong device name" "$tmp/badname" "opened none: a device name it did not find takes one of these" \
        "droce_memif_s, from $cfg/memif-server.ini"
fi
if command -v ib_write_bw > /dev/null; then
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/memif-server.ini timeout 20 ib_write_bw -R \
        -d droce_memif_s -x 0 -F > "$tmp/rdmacm" 2>&1
    expect "perftest -R (rdma_cm)" "$tmp/rdmacm" "which has no rdma_cm; exchange QP information out of band"
fi

# 7a. A QP type droce refuses (ib_send_bw -c UD): its "not supported" line, and not the rdma_cm
# hint, which would contradict it (perftest loads librdmacm; the program did ask for a QP).
if command -v ib_send_bw > /dev/null; then
    # perftest asks for its QPs once the client has connected: a uring pair, no memif needed.
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/uring-b.ini timeout 20 ib_send_bw -c UD -p 18631 \
        -d droce_uring_b -x 0 -F > "$tmp/ud" 2>&1 &
    udpid=$!
    sleep 1
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/uring-a.ini timeout 20 ib_send_bw -c UD -p 18631 \
        -d droce_uring_a -x 0 -F 127.0.0.2 > "$tmp/ud-client" 2>&1
    wait "$udpid"
    expect "ib_send_bw -c UD" "$tmp/ud" "ibv_create_qp of a UD QP \(IBV_QPT_UD\) is not supported"
    grep -q "rdma_cm" "$tmp/ud" "$tmp/ud-client" && fail "ib_send_bw -c UD: the exit hint blames rdma_cm"
fi

# 7c. GID index 3 (RoCE v2 over IPv4 on a ConnectX or rxe): the program says only that it cannot
# read the GID; droce says once that its ports have index 0 alone.
if command -v ibv_rc_pingpong > /dev/null; then
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/uring-a.ini timeout 20 ibv_rc_pingpong -g 3 \
        > "$tmp/gid3" 2>&1
    expect "ibv_rc_pingpong -g 3" "$tmp/gid3" "droce: GID index 3 does not exist: a droce port has one GID, index 0" \
        "ibv_rc_pingpong -g 0"
fi

# 7b. rping: librdmacm lists the devices and asks their GUIDs, then fails on its own ("failed to
# create RDMA CM event channel"); droce's line at exit says rdma_cm is not there.
if command -v rping > /dev/null; then
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/uring-a.ini timeout 20 rping -s -a 127.0.0.1 -C 1 \
        > "$tmp/rping" 2>&1
    expect "rping (rdma_cm)" "$tmp/rping" "through librdmacm and opened none" \
        "cannot run on droce, which has no rdma_cm" "README: Unsupported"
else
    echo "-- rping not installed (rdmacm-utils): not checked"
fi

# 8. A verbs program on a memif client config with no server: droce says so when the program
# opens the device, and its exit hint (which would blame the device name) stays silent.
if command -v ibv_devinfo > /dev/null; then
    LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/memif-client.ini timeout 20 ibv_devinfo \
        > "$tmp/devinfo-noserver" 2>&1
    expect "ibv_devinfo, no server" "$tmp/devinfo-noserver" "no droce server is listening"
    grep -q "opened none" "$tmp/devinfo-noserver" &&
        fail "ibv_devinfo, no server: the exit hint blames the device name: $(grep "opened none" "$tmp/devinfo-noserver" | cut -c1-120)"
fi

# 9. droce's lines at exit come after the program's own output, also when that goes to a file
# (buffered: exit() flushes it after droce's exit handlers ran).
if command -v ibv_devinfo > /dev/null; then
    DROCE_CAPTURE=$tmp/devinfo.pcapng LD_LIBRARY_PATH=$libdir DROCE_CONFIG=$cfg/uring-a.ini \
        timeout 20 ibv_devinfo > "$tmp/devinfo-order" 2>&1
    expect "ibv_devinfo, a capture" "$tmp/devinfo-order" "^droce: capture .*frames" "hca_id"
    last=$(grep -n "hca_id\|phys_port_cnt\|GID" "$tmp/devinfo-order" | tail -1 | cut -d: -f1)
    cap=$(grep -n "^droce: capture" "$tmp/devinfo-order" | cut -d: -f1)
    [ -n "$last" ] && [ -n "$cap" ] && [ "$cap" -gt "$last" ] ||
        fail "droce's capture line (line ${cap:-none}) is not after ibv_devinfo's output (last line ${last:-none})"
fi

if [ $failures = 0 ]; then
    echo "PASS: each error names its cause and what to do"
    exit 0
fi
echo "FAILED: $failures check(s)"
exit 1
