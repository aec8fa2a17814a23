/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Turning DPDK's failures into sentences that say what to do, and finding what a process leaves
 * behind. DPDK reports a second process on one file prefix as "rte_eal_init failed" with rte_errno
 * 0, a memif client without a server as rte_eth_dev_start's EPERM, a missing hugepage mount as
 * EACCES: these helpers look at the host (the runtime directory's lock, /proc/net/unix,
 * /proc/mounts) to name the cause and, where there is one, the process in the way.
 *
 * Thread rules: control path only; each function reads the file system and keeps no state, so any
 * thread may call them. None allocates on a datapath (none is called there).
 */
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

#include "common/socket_holder.h"

namespace droce::dpdk {

/** A process found holding something: its pid and its /proc/PID/comm (empty when unreadable). */
using Holder = SocketHolder;
using droce::to_string;

/**
 * The DPDK runtime directory that EAL arguments @p eal_args would use: `--file-prefix` (default
 * "rte") under /var/run/dpdk for root, else $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk, as DPDK 22.11's
 * eal_create_runtime_dir() decides. Empty when the arguments ask for no shared files
 * (`--in-memory`, `--no-shconf`).
 */
[[nodiscard]] std::string runtime_dir_for(const std::vector<std::string>& eal_args);

/**
 * The directory rte_eal_init() creates for @p eal_args, with or without shared files: DPDK 22.11
 * makes it also under `--no-shconf` and `--in-memory` (empty then), so it is what a process must
 * remove as it goes (dpdk/eal.h release_files_on_exit()).
 */
[[nodiscard]] std::string runtime_dir_made_by(const std::vector<std::string>& eal_args);

/** The `--file-prefix` of @p eal_args, "rte" (DPDK's default) when none is given. */
[[nodiscard]] std::string file_prefix_of(const std::vector<std::string>& eal_args);

/**
 * The process holding the write lock DPDK's primary process takes on @p runtime_dir/config (the
 * EAL's "is another primary running" check), found with fcntl(F_GETLK).
 * @return true and *who when a live process holds it; false when the file is absent or unlocked.
 */
[[nodiscard]] bool runtime_dir_holder(const std::string& runtime_dir, Holder* who);

/**
 * Why EAL arguments @p eal_args cannot start, known before rte_eal_init tries: the runtime
 * directory locked by another process, or hugepages asked for (no `--no-huge`) on a host with no
 * hugetlbfs mount or no free hugepage. @return empty when nothing is in the way, else the sentence
 * (cause and what to do).
 */
[[nodiscard]] std::string eal_obstacle(const std::vector<std::string>& eal_args);

/**
 * Why the host cannot give EAL arguments @p eal_args the hugepages they ask for, for a config
 * with `hugepages = auto` deciding before rte_eal_init (DPDK cannot be initialised a second time
 * after a failed try). Looks for a hugetlbfs mount (the `--huge-dir` one when given) this process
 * may write, and for enough free hugepages of the host's default size for `-m N` (N MiB; one page
 * without -m), counting as free the pages of DPDK hugepage files no process holds (a killed
 * process's, testpmd's: the EAL clears them before it reserves). @return empty when both are there,
 * else the reason as a phrase ("no hugetlbfs is mounted", "128 free 2048 kB hugepages are needed
 * for -m 256 and 0 are free"). Reads /proc and /sys, and takes and drops a flock on the mount's
 * directory (shared) and on each hugepage file in it (exclusive, non-blocking); the pages may still
 * be taken by another process before the EAL starts.
 */
[[nodiscard]] std::string hugepage_shortfall(const std::vector<std::string>& eal_args);

/**
 * The memif control socket named by net_memif @p devargs (`socket=`, DPDK's default
 * /run/memif.sock) and whether it is abstract (`socket-abstract=`, default yes).
 * @return false when @p devargs is not a net_memif device.
 */
[[nodiscard]] bool memif_socket_of(const std::string& devargs, std::string* path, bool* abstract,
                                   bool* client);

/**
 * The process with a listening AF_UNIX socket bound to @p path (abstract when @p abstract), found
 * through /proc/net/unix and /proc/PID/fd. @return false when none is listening (or /proc hides
 * it: another user's process without root).
 * @param who the holder (pid 0 when no process /proc shows holds it), or null: only whether
 * anyone listens (no scan of every process's descriptors).
 */
[[nodiscard]] bool unix_listener(const std::string& path, bool abstract, Holder* who);

/**
 * Why probing or starting net_memif @p devargs failed, as a sentence: a client with no server
 * listening on the socket; a server whose socket another process holds (named). @return empty when
 * neither applies (the caller keeps DPDK's message).
 */
[[nodiscard]] std::string memif_obstacle(const std::string& devargs);

/**
 * Before a net_memif server port is probed: removes its socket file (`socket-abstract=no`) when a
 * process that was killed (SIGKILL: nothing ran in it) left it and nobody listens on it any more
 * (connect() refused), since DPDK's bind would fail with EADDRINUSE. An abstract socket ends with
 * its process; a live server's file stays (memif_obstacle names it). A listener this network
 * namespace lists in /proc/net/unix is not touched; one only another namespace sees gets a probe
 * connection that waits up to 1 s for the server's HELLO before it closes. Control path.
 * @return true when a stale file was removed.
 */
bool remove_stale_memif_socket(const std::string& devargs);

/**
 * Why probing the PCI device named by @p devargs (a PCI address, "0000:03:00.0[,args]") failed, as
 * a sentence, from /sys/bus/pci and /proc: no such device on this host; no driver; a kernel driver
 * DPDK cannot share (not vfio-pci, uio or a bifurcated mlx4/mlx5), naming its interface; bound to
 * vfio-pci with its IOMMU group (/dev/vfio/N) open in another process (named). @p sysfs_root
 * replaces "/sys" (tests). @return empty when @p devargs is not a PCI address or none applies.
 */
[[nodiscard]] std::string pci_obstacle(const std::string& devargs,
                                       const std::string& sysfs_root = "/sys");

} // namespace droce::dpdk
