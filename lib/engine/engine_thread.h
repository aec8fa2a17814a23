/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The engine thread: the "NIC" of a device. It polls the device and backs off when idle so that two
 * processes, each with an engine thread and a busy application thread, can share a 2-core host:
 *   1. spin: poll back to back for spin_polls idle passes;
 *   2. yield: sched_yield() between polls for yield_polls more idle passes;
 *   3. sleep: block on the device's doorbell eventfd and the ports' receive interrupts
 *      (PortDriver::rx_interrupt_fd, e.g. drivers/uring's eventfd) until an application posts
 *      work, a frame arrives, the next timer deadline, or max_sleep_ns passes (frames arriving on
 *      a port without an interrupt are noticed at the latest then).
 * Any work returns it to the spin phase. Thread rules: start() and stop() from one control thread.
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "engine/device.h"

namespace droce {

class EngineThread {
  public:
    struct Options {
        std::uint32_t spin_polls = 20'000;
        std::uint32_t yield_polls = 20'000;
        std::uint64_t max_sleep_ns =
            100'000; ///< longest nap; bounds the added latency of an rx frame
        /**
         * Nice value the thread sets for itself when it starts (-20..19; 0 = leave it). A negative
         * value lets the engine preempt application threads that spin on memory without yielding
         * (perftest's ib_write_lat) on a host with fewer cores than busy threads. Needs
         * CAP_SYS_NICE (or RLIMIT_NICE) to go below 0; without it the thread keeps its nice value.
         */
        int nice = 0;
    };
    /** The name of every engine thread (pthread_setname_np; also Runtime's shared thread). */
    static constexpr const char* kThreadName = "droce-engine";
    /** Applies Options::nice to the calling thread (no-op for 0; errors ignored). */
    static void apply_nice(int nice) noexcept;

    explicit EngineThread(Device& dev) : EngineThread(dev, Options{}) {}
    EngineThread(Device& dev, Options opts) : dev_(dev), opts_(opts) {}
    ~EngineThread() { stop(); }
    EngineThread(const EngineThread&) = delete;
    EngineThread& operator=(const EngineThread&) = delete;

    /** Starts the thread. @return false if it is already running or cannot be created. */
    bool start() noexcept;
    /** Stops and joins the thread; no-op if not running. */
    void stop() noexcept;
    [[nodiscard]] bool running() const noexcept { return thread_.joinable(); }
    /** Idle naps taken so far (for tests and stats). */
    [[nodiscard]] std::uint64_t naps() const noexcept {
        return naps_.load(std::memory_order_relaxed);
    }

  private:
    void run() noexcept;

    Device& dev_;
    Options opts_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> naps_{0};
};

} // namespace droce
