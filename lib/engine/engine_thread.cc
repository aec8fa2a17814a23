/* SPDX-License-Identifier: BSD-3-Clause */
#include "engine_thread.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
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
    // A nap is bounded by the next timer or pacer deadline (tens of us); the kernel's default 50 us
    // timer slack would stretch each one past it (a QP paced at 1 Gb/s sent 0.58 Gb/s).
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
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
            // Woken (the doorbell, a receive interrupt): poll busily again, as after work. Slept
            // its time out: nap again at once if the next poll finds nothing. (It used to yield
            // through yield_polls more passes after every nap: an idle engine then napped 100 us
            // in every 10 - 20 ms and used 99 % of a core, sched_yield returning at once on an
            // idle host.)
            idle = dev_.sleep_until_doorbell(opts_.max_sleep_ns)
                       ? 0
                       : opts_.spin_polls + opts_.yield_polls;
        }
    }
}

} // namespace droce
