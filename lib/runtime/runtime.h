/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce::Runtime — brings up the droce devices of one config file on DPDK ports and owns them:
 *
 *     config file → load_config → eal_init (once per process, and only when some port is DPDK)
 *       → probe_port + EthPort per DPDK port, UringPort per uring port (drivers/uring: kernel
 *       UDP sockets, no EAL, no root; PortSpec::l3, so the engine resolves no neighbour there)
 *       → [optional impairment stage, sim::ImpairedPort, on every port]
 *       → [optional transmit shaper, TxShaper, on every port] → Device per [device]
 *       (PortSpec from the port's mac / ip / mtu; [neighbors] as static neighbours)
 *
 * and runs their engines: one EngineThread per device, or one thread polling every device (best on
 * a 2-core host with two devices in one process). This is the bring-up sequence
 * drivers/dpdk/README.md describes, in one place, for droce's apps (droce-perf, later droce-burnin
 * and the verbs layer).
 *
 * Capture: the config's `capture` keys or RuntimeOptions::capture_path start a live capture
 * (lib/capture) when the devices are up; start_capture() / stop_capture() switch it later, from
 * the owner's thread or from a telemetry client (/droce/capture_start, /droce/capture_stop).
 *
 * Telemetry: create() attaches the devices to lib/telemetry (RuntimeOptions::telemetry), so that
 * the /droce/ commands of DPDK's telemetry socket read their counters (the EAL must not have
 * --no-telemetry for the socket to exist); the destructor detaches them first.
 *
 * Ownership: the Runtime owns the EthPorts and UringPorts, the impairment stages, the shapers, the
 * Devices, the Clock, the captures and the engine threads. Destruction order: engines stopped,
 * captures stopped (reported on stderr), devices destroyed, ports drained, shapers and stages
 * destroyed, EthPorts, then UringPorts destroyed. The DPDK EAL stays initialised for the life of
 * the process.
 *
 * Thread rules: every member function is control path, called from one thread, except
 * start_capture(), stop_capture(), capturing() and capture_status(), which a mutex of the runtime
 * (capture_mu_) also serialises with the telemetry thread that switches the capture. Device control
 * calls (create_qp, modify_qp ...) must be made while engines are stopped (stop_engines(), or
 * before start_engines()); post_send / post_recv / poll_cq may run on application threads while
 * they run. The owner's lock around its control calls, if it has one, is
 * RuntimeOptions::control_mutex: telemetry commands take it too.
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capture/capture.h"
#include "common/clock.h"
#include "config/config.h"
#include "engine/device.h"
#include "engine/engine_thread.h"
#include "runtime/shaper.h"
#include "telemetry/telemetry.h"

namespace droce {

namespace dpdk {
class EthPort;
}
namespace sim {
class ImpairedPort;
}
namespace uring {
class UringPort;
}

/** How Runtime::create() builds the devices. */
struct RuntimeOptions {
    /**
     * An impairment spec (sim::parse_impair_spec syntax: "loss=0.01,seed=3"); when not empty every
     * port of every device is wrapped in a sim::ImpairedPort built from it (transmit side unless
     * the spec says side=rx; `ports=` names a subset). Empty: the engine talks to the EthPorts
     * directly.
     */
    std::string impair_spec;
    /**
     * Which devices of the file to bring up (indices into ConfigFile::devices); empty = all of
     * them.
     */
    std::vector<unsigned> devices;
    /**
     * EAL log level appended as --log-level=N unless the config's eal arguments set one
     * (1 = emergency .. 8 = debug; 0 = leave DPDK's default). DPDK's log goes to stderr, never
     * stdout, so that an app's stdout carries only its own output.
     */
    int eal_log_level = 4;
    /**
     * Back-off of the engine threads. The default spins only briefly before yielding: on a host
     * with fewer cores than busy threads (two processes, each with an engine and an application
     * thread, on 2 cores) a long spin phase holds a core for milliseconds while the thread that
     * would give it work waits to run. EngineMode::shared uses the same budget, and naps on the
     * first device (Runtime::shared_loop).
     */
    EngineThread::Options engine{20, 200'000, 100'000};
    /**
     * Puts a TxShaper (runtime/shaper.h) in front of every port (over the impairment stage when
     * there is one), with tx_rate_gbps as its rate (0 = unlimited until set_rate()). The rate of a
     * link, so that ports, not the CPU, bound what goes out; Runtime::shaper() reaches each one.
     */
    bool tx_shaper = false;
    double tx_rate_gbps = 0;
    /**
     * Live capture of every device to this pcapng file (lib/capture), overriding the config's
     * `capture` keys; empty: the config decides (devices naming the same file share it).
     * DROCE_CAPTURE in the verbs library and droce-perf --capture set it.
     */
    std::string capture_path;
    /** Bytes kept per captured frame (64..65535), overriding `capture_snaplen`; 0 = the config's
     *  (whole frames when it sets none). */
    std::uint32_t capture_snaplen = 0;
    /** Frames that may wait for the capture writer, per device (capture::CaptureOptions). */
    std::uint32_t capture_ring_slots = 4096;
    /**
     * Attach the devices to the /droce/ telemetry commands (lib/telemetry). Off: nothing is
     * registered for them (tests that make several runtimes may leave it on: each is listed).
     */
    bool telemetry = true;
    /**
     * The owner's control mutex, held by every thread that makes control calls on the devices
     * (the verbs library passes its provider mutex). Telemetry commands that read QP or port
     * state, or switch the capture, take it too (telemetry::Source::control_mutex). Null: the
     * owner does not lock its control calls; a QP's state may then be read while it changes.
     * Must outlive the runtime; the runtime must not be destroyed while it is held.
     */
    std::mutex* control_mutex = nullptr;
    /**
     * uring ports whose config says `taskrun = auto` (the default) use cooperative task running
     * (drivers/uring TaskRun::coop): set by an owner whose own threads poll the devices and take no
     * long naps (droce-perf --inline-progress, the verbs library with DROCE_PROGRESS=app).
     * DROCE_URING_TASKRUN=signal|coop overrides every uring port.
     */
    bool uring_coop_taskrun = false;
};

/** How Runtime::start_engines() runs the devices. */
enum class EngineMode : std::uint8_t {
    per_device, ///< one droce::EngineThread per device (spin, yield, doorbell sleep)
    shared,     ///< one thread polls every device in turn (spin, yield, then naps on device 0)
};

class Runtime {
  public:
    /**
     * Loads @p config_path and brings up its devices (see the file comment).
     * @param err on failure, one line: the config loader's "path:line: [section] key: reason", or
     *        "device D port P (devargs): reason" for EAL / probe / port / impairment failures.
     * @return the runtime, or nullptr with *err set. A config with `clock = virtual` is refused
     *         (virtual time is for tests that advance it by hand).
     * Calls eal_init() with devices[0]'s eal arguments unless the EAL is already initialised or
     * no port of the devices brought up is a DPDK port (all uring: no EAL, no hugepages, no
     * root). Before that the config's `hugepages` key is settled (config.h HugepageMode): with
     * `auto` on a host without a writable hugetlbfs mount or enough free pages for `-m`, and with
     * `off`, the EAL gets --no-huge and net_memif ports zero-copy=no; `auto` then writes one line
     * on stderr saying why (droce: PATH: hugepages = auto, but REASON: running ...). The uring
     * ports' errors read "device D port P (uring ADDR udp PORT): reason".
     */
    [[nodiscard]] static std::unique_ptr<Runtime>
    create(const std::string& config_path, const RuntimeOptions& opts, std::string* err);
    ~Runtime();
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    /** Devices brought up, in the order of RuntimeOptions::devices (file order by default). */
    [[nodiscard]] unsigned num_devices() const noexcept {
        return static_cast<unsigned>(devices_.size());
    }
    /** Device @p i (0 <= i < num_devices()). */
    [[nodiscard]] Device& device(unsigned i) noexcept { return *devices_[i].dev; }
    /** The config section device @p i was built from. */
    [[nodiscard]] const DeviceConfig& device_config(unsigned i) const noexcept {
        return devices_[i].cfg;
    }
    /** The DPDK port under port @p port of device @p dev, or nullptr when it is a uring port. */
    [[nodiscard]] dpdk::EthPort* eth_port(unsigned dev, unsigned port) noexcept;
    /** The uring port under port @p port of device @p dev, or nullptr when it is a DPDK port. */
    [[nodiscard]] uring::UringPort* uring_port(unsigned dev, unsigned port) noexcept;
    /** The impairment stage over port @p port of device @p dev, or nullptr without impair_spec
     *  or for a port its `ports=` leaves out. */
    [[nodiscard]] sim::ImpairedPort* impair_stage(unsigned dev, unsigned port) noexcept;
    /** The transmit shaper in front of port @p port of device @p dev, or nullptr without
     *  RuntimeOptions::tx_shaper. */
    [[nodiscard]] TxShaper* shaper(unsigned dev, unsigned port) noexcept;
    /**
     * Largest RoCE path MTU (256..4096 bytes) that port @p port of device @p dev carries: the
     * largest power of two that fits its IP MTU with the IPv4/IPv6, UDP, BTH, RETH and ICRC
     * headers.
     */
    [[nodiscard]] std::uint32_t max_path_mtu(unsigned dev, unsigned port) const noexcept;
    /** The clock every device uses (TSC). */
    [[nodiscard]] Clock& clock() noexcept { return clock_; }
    /** The loaded file. */
    [[nodiscard]] const ConfigFile& config() const noexcept { return file_; }

    /**
     * Starts polling every device. @return false if already running or a thread cannot be created
     * (then nothing runs).
     */
    bool start_engines(EngineMode mode = EngineMode::per_device);
    /** Stops and joins the engine thread(s); no-op when none runs. */
    void stop_engines() noexcept;
    /** Device::send_held_acks() on every device (a process exiting with QPs alive). */
    void send_held_acks() noexcept;
    /**
     * Takes every shared uring port (share = yes) out of its group now, the way its destructor
     * would (drivers/uring README: the others keep their slots), for a process that exits without
     * destroying the runtime (the verbs library at exit). The ports receive nothing afterwards.
     * Control path, with no engine running (stop_engines() first).
     */
    void leave_shared_ports() noexcept;
    [[nodiscard]] bool engines_running() const noexcept {
        return !threads_.empty() || shared_.joinable();
    }

    /**
     * Starts capturing every frame of the devices @p devices (indices; empty = all) to the pcapng
     * file @p path (capture::Capture::start: one interface per device port). For the telemetry
     * command that switches capture at run time, and for create() (config keys,
     * RuntimeOptions::capture_path). Control path, any thread (serialised by capture_mu_); the
     * engines may be running (each device's hook is set inside its ControlSection).
     * @return "" or one line: "capture FILE: reason" (the file cannot be written, bad snap length,
     *  a device already captured, no such device).
     */
    std::string start_capture(const std::string& path, const capture::CaptureOptions& opts,
                              const std::vector<unsigned>& devices = {});
    /**
     * Stops every capture: the devices' hooks are cleared, the writers write what their rings
     * hold, the files are closed. When @p report, one line per file on stderr (droce:
     * capture FILE: N frames, M dropped (ring full), ...). Control path, any thread (capture_mu_);
     * no-op when none runs.
     * @return the figures summed over the files.
     */
    capture::CaptureStats stop_capture(bool report = true) noexcept;
    /** True while a capture runs. */
    [[nodiscard]] bool capturing() const {
        std::lock_guard g(capture_mu_);
        return !captures_.empty();
    }
    /**
     * The capture now (running: its files, separated by spaces when several, the figures summed
     * over them, live), or, when none runs, the last one stopped (running false; file empty when
     * none ever ran). Any thread.
     */
    [[nodiscard]] telemetry::CaptureStatus capture_status() const;
    /** The running captures (live figures: Capture::stats()). The owner's thread only, and only
     *  while no telemetry client can switch the capture (capture_status() is safe anywhere). */
    [[nodiscard]] const std::vector<std::unique_ptr<capture::Capture>>& captures() const noexcept {
        return captures_;
    }

  private:
    Runtime();
    struct DeviceSlot {
        DeviceConfig cfg;
        std::vector<std::unique_ptr<dpdk::EthPort>> eth;        ///< per port; null for a uring port
        std::vector<std::unique_ptr<uring::UringPort>> uring;   ///< per port; null for a DPDK port
        std::vector<std::unique_ptr<sim::ImpairedPort>> stages; ///< empty without impair_spec
        std::vector<std::unique_ptr<TxShaper>> shapers;         ///< empty without tx_shaper
        std::unique_ptr<Device> dev;
    };
    void shared_loop() noexcept;

    ConfigFile file_;
    Clock clock_;
    std::vector<DeviceSlot> devices_;
    /** Guards captures_ and last_capture_: the owner's thread and the telemetry thread switch
     *  captures. */
    mutable std::mutex capture_mu_;
    /** Running captures, one per file; stopped before the devices are destroyed. */
    std::vector<std::unique_ptr<capture::Capture>> captures_;
    /** What the last stop_capture() stopped (capture_status() when none runs). */
    telemetry::CaptureStatus last_capture_;
    std::uint32_t capture_ring_slots_ = 4096;
    /** lib/telemetry's handle for these devices, or 0. */
    std::uint64_t telemetry_id_ = 0;
    /** The devices the shared engine thread serves (EngineMode::shared), for its naps. */
    std::vector<Device*> shared_devices_;
    std::vector<std::unique_ptr<EngineThread>> threads_;
    std::thread shared_;
    std::atomic<bool> shared_stop_{false};
    EngineThread::Options engine_opts_;
};

} // namespace droce
