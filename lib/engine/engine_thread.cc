/* SPDX-License-Identifier: BSD-3-Clause */
#include "engine_thread.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <immintrin.h>

namespace droce {

bool EngineThread::start() noexcept {
    if (thread_.joinable()) return false;
    stop_.store(false, std::memory_order_relaxed);
    try {
        thread_ = std::thread([this] { run(); });
    } catch (...) {
        return false;
    }
    return true;
}

void EngineThread::stop() noexcept {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_relaxed);
    dev_.ring_doorbell();
    thread_.join();
}

void EngineThread::apply_nice(int nice) noexcept {
    if (nice == 0) return;
    // Linux: PRIO_PROCESS with a thread id sets that thread's nice value only.
    [[maybe_unused]] int r = setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
}

void EngineThread::run() noexcept {
    // Named so that top -H, perf and tests tell the engine from the application's threads.
    pthread_setname_np(pthread_self(), kThreadName);
    apply_nice(opts_.nice);
    std::uint32_t idle = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
        if (dev_.poll() > 0) {
            idle = 0;
            continue;
        }
        ++idle;
        if (idle < opts_.spin_polls) {
            _mm_pause();
        } else if (idle < opts_.spin_polls + opts_.yield_polls) {
            sched_yield();
        } else {
            naps_.fetch_add(1, std::memory_order_relaxed);
            dev_.sleep_until_doorbell(opts_.max_sleep_ns);
            idle = opts_.spin_polls; // after a nap, yield before sleeping again
        }
    }
}

} // namespace droce
