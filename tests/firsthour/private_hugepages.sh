# Sourced by the firsthour tests that run DPDK on hugepages (leave_nothing_test.sh,
# fast_configs_test.sh): their common prologue, one copy.
#
# run_in_private_namespaces INNER_VAR SECONDS SCRIPT ARGS...: outside the namespaces. Skips (exit 77)
# unless root; makes 300 free 2 MiB hugepages (two -m 256 processes and the EAL's own), reserving
# what the host lacks and giving it back at exit (exit 77 when it cannot); then runs SCRIPT again
# with INNER_VAR=1 in a new mount and network namespace, at most SECONDS, and exits with its status.
run_in_private_namespaces() {
    local inner=$1 secs=$2
    shift 2
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (hugepages, namespaces)"; exit 77; }
    local need=300 old free
    old=$(cat /proc/sys/vm/nr_hugepages)
    free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
    if [ "$free" -lt "$need" ]; then
        trap "echo $old > /proc/sys/vm/nr_hugepages" EXIT
        echo $((old + need - free)) > /proc/sys/vm/nr_hugepages 2>/dev/null
        free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
        if [ "$free" -lt "$need" ]; then
            echo "SKIP: the host has $free free 2 MiB hugepages and cannot reserve $need"
            exit 77
        fi
    fi
    env "$inner=1" timeout "$secs" unshare -m -n "$@"
    exit $?
}

# enter_private_dpdk_dirs: inside the namespaces. Sets tmp (a fresh directory, with tmp/huge for a
# private hugetlbfs the caller may mount), puts a tmpfs on /var/run/dpdk and hides the host's
# hugetlbfs mounts (DPDK would use the first).
enter_private_dpdk_dirs() {
    mount --make-rprivate /
    tmp=$(mktemp -d)
    mkdir -p /var/run/dpdk "$tmp/huge"
    mount -t tmpfs tmpfs /var/run/dpdk
    awk '$3 == "hugetlbfs" {print $2}' /proc/mounts | while read -r m; do umount -l "$m"; done
}
