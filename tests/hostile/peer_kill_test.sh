#!/bin/bash
# A peer killed with SIGKILL mid-transfer, and restarted: three wire-victim processes on memif
# zero-copy with hugepages. S, the survivor, streams verified 4 KiB WRITE-with-immediate messages to
# two servers, P on its port 0 and Q on its port 1 (each a memif pair of its own). P is killed with
# SIGKILL; peer_kill.py checks that S's stream to P ends in RETRY_EXC_ERR within the configured
# retry budget (timeout 14, retry_cnt 7: 8 x 67 ms), that S's stream to Q runs on unharmed meanwhile,
# that P starts again at once on the same config (its memif socket and hugepages are free), that
# S reconnects to it and streams again, and that every message completed was verified. Then nothing
# is left behind: no hugepage file, no runtime directory.
# Root only (hugepages, namespaces): runs in its own mount and network namespace with a private
# hugetlbfs and /var/run/dpdk (firsthour/private_hugepages.sh); exits 77 (skipped) without them.
# usage: peer_kill_test.sh PATH/TO/wire-victim SOURCE_DIR/tests/hostile
set -u
victim=$1
here=$2
. "$here/../firsthour/private_hugepages.sh"
if [ -z "${DROCE_PK_INNER:-}" ]; then
    run_in_private_namespaces DROCE_PK_INNER 200 "$0" "$@"
fi

# ---- inside the namespaces
enter_private_dpdk_dirs
mount -t hugetlbfs -o pagesize=2M nodev "$tmp/huge"
ip link set lo up
trap 'kill -9 $(jobs -p) 2>/dev/null; wait; umount -l "$tmp/huge"; rm -rf "$tmp"' EXIT

# conf NAME PREFIX PORT-LINES...: a device config; each port line is "ROLE SOCKET MAC IP".
conf() {
    local name=$1 i=0
    shift
    {
        echo "[device]"
        echo "name = droce_pk_$name"
        echo "eal = -m 128 --single-file-segments --no-pci --file-prefix=droce-pk-$name"
        echo "clock = tsc"
        for p in "$@"; do
            set -- $p
            echo "[port$i]"
            echo "devargs = net_memif$i,role=$1,id=0,socket=$2,socket-abstract=yes,bsize=2048,mac=$3,zero-copy=yes"
            echo "mac = $3"
            echo "ip = $4/24"
            echo "mtu = 1500"
            i=$((i + 1))
        done
        echo "[qp]"
        echo "path_mtu = 1024"
        echo "timeout = 14"
        echo "retry_cnt = 7"
        echo "[neighbors]"
        echo "10.77.0.2 = 02:00:00:77:00:02"
        echo "10.77.1.2 = 02:00:00:77:01:02"
        echo "10.77.0.1 = 02:00:00:77:00:01"
        echo "10.77.1.1 = 02:00:00:77:01:01"
    } > "$tmp/$name.ini"
}
# S owns both memif sockets (role server): a memif client connects only when its port starts
# (DPDK 22.11), so the side that stays up listens and the restarted P connects to it.
conf p "client pk-p.sock 02:00:00:77:00:02 10.77.0.2"
conf q "client pk-q.sock 02:00:00:77:01:02 10.77.1.2"
conf s "server pk-p.sock 02:00:00:77:00:01 10.77.0.1" "server pk-q.sock 02:00:00:77:01:01 10.77.1.1"

/usr/bin/python3 "$here/peer_kill.py" "$victim" "$tmp"
rc=$?
left=$( (ls "$tmp/huge"; ls -d /var/run/dpdk/droce-pk-* 2>/dev/null) | tr '\n' ' ')
if [ -n "$left" ]; then
    echo "FAIL left behind after every process ended: $left"
    [ $rc = 0 ] && rc=1
else
    echo "ok   nothing left behind: no hugepage file, no runtime directory"
fi
[ $rc = 0 ] && echo "PASS: peer kill" || echo "FAIL: peer kill ($rc)"
exit $rc
