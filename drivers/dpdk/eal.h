/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * DPDK environment bring-up for droce: initialising the EAL once per process and turning a devargs
 * string from a droce config into an ethdev port id.
 *
 * How devices come to exist (a choice, written down once):
 *  - A config's `devargs` string is probed at run time with rte_dev_probe() (hot-plug), after
 *    eal_init(). Passing `--vdev=...` in the EAL arguments also works: probe_port() sees the port
 * is already there and returns it. Hot-plug keeps the EAL arguments of a config free of port
 * details.
 *  - One devargs form is droce's own, because no DPDK PMD offers it:
 * `droce_ringpair,name=N,end=a|b`
 *    [`,size=S`] makes one end of a point-to-point link between two ports in the same process,
 * built from two rte_rings with rte_eth_from_rings() (net_ring underneath). End a transmits into
 * ring "rp_N_ab" and receives from "rp_N_ba"; end b the opposite way. A plain `net_ring0` is a
 * loopback (what it sends it receives), which is no use to connect two devices.
 *
 * EAL arguments that work on Debian 12's DPDK 22.11 without hugepages (measured; see the .ini files
 * in config/):
 *  - `--no-huge -m N --no-shconf --file-prefix=P`: one process, no shared config files.
 * `--in-memory` is refused together with `--no-huge` ("Option --legacy-mem is not compatible with
 * --in-memory":
 *    --no-huge implies legacy memory).
 *  - net_memif needs the EAL's multi-process IPC (it registers an mp action at probe and fails
 *    without): no `--no-shconf` / `--in-memory` there, only a distinct `--file-prefix` per process.
 *
 * Thread rules: every function here is control path: call from one thread, before or between engine
 * polls of the ports concerned. None is safe to call concurrently with another.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace droce::dpdk {

/**
 * Initialises the DPDK EAL with @p args (argv[1..]; argv[0] is supplied as "droce").
 * Once per process: a second call returns "EAL already initialised" and changes nothing, because
 * DPDK cannot initialise twice. The calling thread keeps its CPU affinity unless @p args choose
 * the lcores (eal_args_choose_cores): DPDK would otherwise pin it, and every engine and
 * application thread started from it, to CPU 0. The control threads the EAL starts (interrupt,
 * multi-process, telemetry) get the same CPUs, where DPDK would pin them to CPU 0 too.
 * Before trying, eal_obstacle() (diagnose.h) looks for what DPDK would report badly: the file
 * prefix's runtime directory locked by another process (DPDK: rte_errno 0), hugepages asked for on
 * a host without them (DPDK: EACCES).
 * @return empty on success, else a sentence: the obstacle and what to do; or rte_eal_init's
 * rte_errno (EALREADY, EINVAL for bad arguments, ENOMEM, EACCES, EPROTO ...), never "errno 0".
 */
[[nodiscard]] std::string eal_init(const std::vector<std::string>& args);

/**
 * True when EAL arguments @p args choose the lcores (-l, -c, --lcores, --main-lcore, in any
 * spelling DPDK accepts). Without them DPDK takes the calling thread's CPUs as its lcores and pins
 * the thread to the first one, a side effect eal_init() undoes (the caller's thread, and every
 * thread it starts afterwards, keeps the CPUs it had); with them the pinning was asked for and
 * stays.
 */
[[nodiscard]] bool eal_args_choose_cores(const std::vector<std::string>& args) noexcept;

/**
 * Gives back what the EAL holds outside this process, at its end: the runtime directory DPDK
 * leaves behind (/var/run/dpdk/PREFIX: config, hugepage_info, fbarray_*, mp_socket, the telemetry
 * socket) and this file prefix's hugepage files, which DPDK 22.11 keeps in hugetlbfs after exit
 * (held pages a next process on another prefix cannot use). Call last, after every port is
 * closed, just before the process exits: the EAL stays up (its memory stays mapped until exit) but
 * another process may take the file prefix from here on. Does not call rte_eal_cleanup() (see
 * eal.cc). No-op when the EAL is not initialised.
 */
void eal_release() noexcept;

/**
 * Removes the files a primary DPDK process keeps in @p dir (config, hugepage_info, fbarray_*,
 * mp_socket*, the telemetry socket), then @p dir if that emptied it. For eal_release() and for a
 * process stopped by a signal while the EAL is up (it only unlinks files: the mappings go when
 * the process exits). Nothing else in @p dir is touched.
 */
void remove_runtime_dir(const std::string& dir) noexcept;

/**
 * For a process about to _exit() with the EAL up (stopped by a signal in the middle of work, when
 * closing ports in order is not possible): removes the runtime directory's files and unlinks this
 * file prefix's hugepage files (PREFIXmap_* in every hugetlbfs mount), so that nothing outlives
 * the process. Not async-signal-safe: call from an ordinary thread (a sigwait() watcher).
 */
void release_files_on_exit() noexcept;

/**
 * release_files_on_exit() for a signal handler: the same files (runtime directory, this file
 * prefix's hugepage files in the hugetlbfs mounts there were at eal_init()), removed with
 * async-signal-safe calls only (open, getdents64, unlinkat, rmdir, close; no allocation, no lock)
 * from paths eal_init() wrote down. For a library that cannot own the process's signals (droce's
 * libibverbs under a program that leaves SIGINT/SIGTERM at their defaults): its handler calls
 * this, then lets the signal end the process. No-op before eal_init() succeeded. Any thread.
 */
void release_files_from_signal() noexcept;

/** The runtime directory this process's EAL made (also without shared files: empty then);
 *  empty before eal_init(). */
[[nodiscard]] const std::string& eal_runtime_dir() noexcept;

/**
 * Gives the calling thread, one the EAL did not create (an engine thread), an lcore id of its own
 * (rte_thread_register), so that DPDK's per-lcore mempool caches serve its mbuf allocations and
 * frees: without an id every rte_pktmbuf_alloc / free from it goes to the pool's shared ring.
 * Call on the thread itself, after eal_init(); pair with unregister_thread() on the same thread
 * before it ends. When the EAL is not up, or the thread has an id already, nothing happens. When
 * DPDK refuses (no id free: an EAL that took every CPU of a host with RTE_MAX_LCORE or more as its
 * lcores; or a DPDK secondary process already attached to this file prefix), the thread goes on
 * without one (correct, uncached) and one line on stderr says so, once per process. The first
 * registration disables DPDK multi-process for the file prefix (rte_mp_disable; the flag lives in
 * the shared config): secondary-process tools (dpdk-proc-info, dpdk-pdump, dpdk-dumpcap) cannot
 * attach to a droce process whose engine threads run; droce's own capture and telemetry do not
 * need them. Any non-EAL thread; not async-signal-safe.
 */
void register_thread() noexcept;

/**
 * Gives back the calling thread's lcore id from register_thread(): first returns the objects its
 * mempool caches hold to their pools (rte_mempool_walk + rte_mempool_cache_flush: a cache of a
 * thread that ended would otherwise keep up to 1.5 x the cache size of mbufs of every pool out of
 * use until another thread got the same id), then rte_thread_unregister(). A thread whose
 * registration got no id only has its EAL state freed; no-op for a thread that never called
 * register_thread() (and for the EAL's main thread). No mempool may be freed while it runs
 * (DPDK 22.11 unlinks a freed pool under another lock than the walk's): droce frees pools only
 * when ports close, after the engines stopped.
 */
void unregister_thread() noexcept;

/** True once eal_init() (or anyone else in this process) initialised the EAL successfully. */
[[nodiscard]] bool eal_initialized() noexcept;

/** Splits an EAL argument string on ASCII whitespace (no quoting: EAL values contain no spaces). */
[[nodiscard]] std::vector<std::string> split_args(const std::string& s);

/**
 * The copy-mode fallback of a config with `hugepages = auto` or `off` (lib/config), EAL side:
 * @p args without what asks for hugepages (`--single-file-segments`, `--huge-dir D`,
 * `--huge-unlink`, `--socket-mem`, `--socket-limit`, `--in-memory`) and with `--no-huge`; `-m`
 * is kept (256 added when absent: --no-huge needs a size). Arguments that already say --no-huge
 * come back unchanged.
 */
[[nodiscard]] std::vector<std::string> no_huge_args(const std::vector<std::string>& args);

/**
 * The copy-mode fallback, port side: net_memif @p devargs with `zero-copy=no` in place of
 * `zero-copy=yes` (memif zero-copy lends the peer this process's mempool, which must be hugepage
 * memory). Any other devargs come back unchanged.
 */
[[nodiscard]] std::string memif_copy_mode(const std::string& devargs);

/**
 * Finds or creates the ethdev named by @p devargs and returns its port id in @p port_id.
 *  - `droce_ringpair,...`: see the file comment; rings are created on first use and shared by the
 *    two ends.
 *  - anything else is DPDK devargs (`net_memif0,role=server,...`, `net_af_packet0,iface=veth0,...`,
 *    `0000:03:00.0`): if a port of that device name exists it is returned (it came from --vdev or
 *    the PCI scan), else rte_dev_probe(@p devargs) hot-plugs it.
 * Requires eal_init().
 * @return empty on success, else a message: EAL not initialised; devargs unparseable
 * (rte_devargs_parse -EINVAL/-EFAULT/-ENODEV: no bus or driver knows the name); probe failed
 * (rte_dev_probe's errno, e.g. ENOENT no such device, EINVAL bad PMD arguments); probed but no
 * ethdev of that name (a device of another class); ring pair name too long, bad end, size not a
 * power of two or rte_ring_create / rte_eth_from_rings failure (rte_errno).
 */
[[nodiscard]] std::string probe_port(const std::string& devargs, std::uint16_t* port_id);

/**
 * Creates one end of an in-process ring pair (what `droce_ringpair,name=N,end=E,size=S` does).
 * @param name 1..16 characters [A-Za-z0-9_]
 * @param end 'a' or 'b'
 * @param ring_size ring slots, a power of two in 2..65536; a ring holds ring_size - 1 frames
 * @return empty on success (port id in @p port_id), else the reason (see probe_port()).
 */
[[nodiscard]] std::string create_ring_pair_end(const std::string& name, char end,
                                               unsigned ring_size, std::uint16_t* port_id);

} // namespace droce::dpdk
