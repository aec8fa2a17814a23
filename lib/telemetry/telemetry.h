/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce's counters on DPDK's telemetry socket (rte_telemetry): the `/droce/...` commands that
 * `dpdk-telemetry.py` and `droce-stat` read, and the capture switch.
 *
 * Commands (parameters after the first comma, as DPDK passes them; DEV is a device name as
 * ibv_get_device_name() reports it, and may be left out when the process has one device; PORT is
 * the verbs port number 1..4, plane PORT - 1; QPN is decimal or 0x-prefixed hex):
 *
 *     /droce/devices                      every device: name, ports, QPs, capture
 *     /droce/device,DEV                   every counter block of the device except the QPs' (scopes
 *                                         "device", "device/parse", "capture", "portN/neigh") and
 *                                         "total": the device block plus every QP's block summed,
 *                                         what `rdma statistic show` gives for a device
 *     /droce/port,DEV/PORT                link and admin state, MAC, GID, MTU, the DPDK ethdev
 *                                         stats, the neighbour counters, and for MRC the plane's
 *                                         bytes / packets summed over the device's MRC QPs
 *     /droce/qps,DEV[/FROM]               QPNs with transport and state, at most kMaxQpsPerReply
 *                                         from QPN FROM on ("next": where to go on, 0 = done)
 *     /droce/qp,DEV/QPN                   the QP's state, port, counters, and for MRC its counters,
 *                                         plane stats and every path (EV) in columns
 *     /droce/capture                      the live capture: running, file, snaplen, frames,
 *                                         dropped, truncated, bytes (written to the file: known
 *                                         once stopped, 0 while running), write_errno; when none
 *                                         runs, the last one stopped (running 0)
 *     /droce/capture_start,FILE[,SNAPLEN] starts capturing every device to FILE (an absolute path;
 *                                         a file that exists must be a pcapng capture; SNAPLEN
 *                                         64..65535, default whole frames)
 *     /droce/capture_stop                 stops it; the reply gives the final figures
 *
 * A bad command gets a reply whose only key is "error" (one line saying what is wrong), never a
 * crash. Counter names are those of lib/common/counters.h (`rdma statistic` / mlx5 names).
 *
 * Thread rules: the handlers run on DPDK's telemetry threads (one per client connection);
 * a mutex of this library serialises them. Counter blocks are read through the devices'
 * CounterRegistry (CounterRegistry::for_each, any thread). What is not a counter (QP state, MRC
 * paths, port admin state) is read inside the device's ControlSection (the engine between passes:
 * a pause of microseconds, only while such a command runs) with Source::control_mutex held when
 * the owner gives one, so that no control call changes it meanwhile; a QP is reached only while
 * its counter block is listed in the registry and the registry's lock is held, so it cannot be
 * freed under the reader (the registry's rule: a block is unlisted before its owner is freed).
 * The engines never wait for a telemetry client and nothing on the datapath changes.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "capture/capture.h"
#include "engine/device.h"

namespace droce::telemetry {

/** QPs one /droce/qps reply lists at most (DPDK limits an array to 512 entries and a reply to 16
 *  KiB). */
inline constexpr unsigned kMaxQpsPerReply = 256;

/** One device as the commands see it. */
struct DeviceEntry {
    Device* dev = nullptr; ///< not owned; must stay until detach()
    /** Per port: the DPDK ethdev port id under it, or -1 (no ethdev: a uring port, the sim
     *  fabric in tests). */
    std::vector<int> ethdev;
};

/** The live capture as /droce/capture reports it. */
struct CaptureStatus {
    bool running = false;
    /** While running: its file; otherwise the last capture stopped through telemetry or by the
     *  owner (empty when none). */
    std::string file;
    std::uint32_t snaplen = 0; ///< bytes kept per frame (the slot size)
    capture::CaptureStats stats;
};

/**
 * What one owner (a droce::Runtime) gives the commands. The callbacks run on a telemetry thread
 * with control_mutex held (when given); they may block for a short while (start and stop open and
 * close a file and wait for the engines to be between passes).
 */
struct Source {
    std::vector<DeviceEntry> devices;
    /**
     * The owner's control mutex: held by every thread that makes control calls on these devices
     * (the verbs library's provider mutex). The commands that read control state or switch the
     * capture take it (waiting at most kLockWaitMs, then answering "busy"). Null: the owner's
     * control calls are not locked; QP state may then be read while a modify_qp changes it.
     */
    std::mutex* control_mutex = nullptr;
    /** Starts capturing every device to @p path keeping @p snaplen bytes (0 = whole frames).
     *  @return "" or one line saying why not. Null: the capture commands answer an error. */
    std::function<std::string(const std::string& path, std::uint32_t snaplen)> capture_start;
    /** Stops the capture. @return its final figures (running false). */
    std::function<CaptureStatus()> capture_stop;
    /** The capture now. */
    std::function<CaptureStatus()> capture_status;
};

/** How long a command waits for Source::control_mutex before answering "busy" (ms). */
inline constexpr unsigned kLockWaitMs = 2000;

/**
 * Registers the /droce/ commands with rte_telemetry (once per process; they answer as long as the
 * process lives) and adds @p src to what they answer. Devices of every attached source are
 * listed, in attach order; the capture commands act on the first source that has capture_start.
 * Control path, any thread. Works with or without EAL's telemetry socket (--no-telemetry: the
 * commands are registered and never asked).
 * @return a handle for detach() (never 0), or 0 when rte_telemetry refused a command (*err says
 *  which; nothing is attached).
 */
[[nodiscard]] std::uint64_t attach(Source src, std::string* err);
/**
 * Removes what attach() returned @p id for: waits for a command in progress to finish and, from
 * then on, no command touches that source's devices. The owner calls it before destroying them,
 * without holding its control_mutex. 0 or an unknown id: no-op.
 */
void detach(std::uint64_t id) noexcept;

/**
 * Opens DPDK's telemetry socket in a process without the EAL (one whose ports are all uring), so
 * that droce-stat and dpdk-telemetry.py reach it as they reach a DPDK process. Call it only when
 * the EAL is not up (the EAL opens its own, unless --no-telemetry; lib/runtime checks). The
 * socket goes where DPDK would put a file prefix's:
 * <base>/dpdk/droce-uring-<pid>/dpdk_telemetry.v2, base /var/run as root, else $XDG_RUNTIME_DIR,
 * else /tmp (it must be this user's and writable by no one else; made if absent, and then removed
 * at exit when empty, so that a shared /tmp/dpdk does not stay one user's). The process holds a
 * lock (flock) on a file in its directory while it lives; the directory is removed at exit (not by
 * a forked child), and directories whose lock no process holds are removed first (with a process of
 * the same PID alive in another PID namespace, the name gets a suffix, -1 ..). Nothing is removed
 * through a symbolic link or outside this user's own private directories. DPDK 22.11's telemetry
 * library (rte_telemetry_init, an internal symbol of that release, declared by droce) opens and
 * serves it from its own threads. Once per process; control path.
 * @param dir set to the directory (the file prefix is its last component) when opened.
 * @return true when the socket is open (a second call: true at once); false with *err: a DPDK
 *  release other
 *  than 22.11 (the internal signature is not known), the directory cannot be made, or the
 *  library refused (its reason is logged on stderr).
 */
[[nodiscard]] bool open_socket_without_eal(std::string* dir, std::string* err);
/**
 * What the exit handler does, for a process ended by a signal (lib/verbs' stop-signal handler, a
 * watcher that calls _exit): unlinks the socket and the lock, removes the directory. Only system
 * calls on paths prepared beforehand: async-signal-safe. No-op in a forked child, or when
 * open_socket_without_eal() never opened one.
 */
void remove_socket_dir_on_signal() noexcept;

/**
 * Checks a capture file named in /droce/capture_start: absolute, no comma or control character,
 * at most PATH_MAX bytes, its directory exists, and when the file exists it is a regular file
 * (not a link) beginning with a pcapng section header (so a telemetry client cannot make the
 * process truncate an arbitrary file). @return "" or the reason.
 */
[[nodiscard]] std::string check_capture_path(const std::string& path);

} // namespace droce::telemetry
