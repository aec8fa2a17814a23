/* SPDX-License-Identifier: BSD-3-Clause */
#include "engine_thread.h"

#include <algorithm>

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"

namespace droce {

namespace {
bool set_policy(int policy, int priority) noexcept {
    sched_param sp{};
    sp.sched_priority = priority;
    return pthread_setschedparam(pthread_self(), policy, &sp) == 0;
}
} // namespace

EngineThread::IdleBackoff::Step EngineThread::IdleBackoff::idle() noexcept {
    ++idle_;
    if (idle_ < o_.spin_polls) return Step::spin;
    if (idle_ < nap_after()) {
        if (shared_until_ns_ == 0) return Step::yield;
        if (monotonic_ns() >= shared_until_ns_) {
            shared_until_ns_ = 0; // held long enough: find out again
            return Step::yield;
        }
    }
    return Step::nap;
}

void EngineThread::IdleBackoff::yield() noexcept {
    if (o_.shared_core_yield_ns == 0) {
        sched_yield();
        return;
    }
    const std::uint64_t t0 = monotonic_ns();
    sched_yield();
    const std::uint64_t t1 = monotonic_ns();
    if (t1 - t0 > o_.shared_core_yield_ns) shared_until_ns_ = t1 + o_.shared_core_hold_ns;
}

void EngineThread::IdleBackoff::nap_begins() noexcept {
    if (!realtime_ok_ || realtime_) return;
    if (set_policy(SCHED_FIFO, 1))
        realtime_ = true;
    else
        realtime_ok_ = false; // EPERM: no CAP_SYS_NICE, no RLIMIT_RTPRIO; asked once
}

void EngineThread::IdleBackoff::leave_realtime() noexcept {
    if (!set_policy(SCHED_OTHER, 0)) return;
    realtime_ = false;
    // Back in the normal class the thread has the nice value it had (Linux keeps it across a
    // SCHED_FIFO stay); said again in case a program changed it meanwhile.
    apply_nice(o_.nice);
}

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

EngineThread::AppDriveWatch
EngineThread::watch_from_now(std::uint64_t silent_seen_ns) const noexcept {
    return {monotonic_ns(), dev_.app_drives(), dev_.silent_writes(), dev_.releases_with_work_left(),
            silent_seen_ns};
}

bool EngineThread::app_polls_busily(AppDriveWatch& w) const noexcept {
    const std::uint64_t drives = dev_.app_drives();
    if (drives == w.drives) return false; // no clock read while the application does not drive
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t elapsed = now > w.since_ns ? now - w.since_ns : 0;
    if (elapsed < kStepAsideWindowNs) return false;
    const std::uint64_t silent = dev_.silent_writes();
    const std::uint64_t left = dev_.releases_with_work_left();
    // A WRITE placed with no completion: the program may wait on memory for the next one, for a
    // while (kSilentWriteHoldNs). Work left behind in the window: the program may be computing
    // while its transfer should go on.
    if (silent != w.silent_writes) w.silent_seen_ns = now;
    // Signed: the racy count can step back (a stale store of another application thread).
    const std::int64_t made = static_cast<std::int64_t>(drives - w.drives);
    const bool busy =
        (w.silent_seen_ns == 0 || now - w.silent_seen_ns >= kSilentWriteHoldNs) &&
        left == w.left_work && made > 0 &&
        static_cast<std::uint64_t>(made) * kStepAsideWindowNs >= kStepAsideMinDrives * elapsed;
    w = {now, drives, silent, left, w.silent_seen_ns};
    return busy;
}

bool EngineThread::app_keeps_polling(AppDriveWatch& w) const noexcept {
    // Signed: the racy count can step back (a stale store of another application thread).
    const std::uint64_t d0 = dev_.app_drives();
    const auto since = [&] { return static_cast<std::int64_t>(dev_.app_drives() - d0); };
    const std::uint64_t t0 = monotonic_ns();
    while (since() < static_cast<std::int64_t>(kResumeDrives) &&
           monotonic_ns() - t0 < kResumeLookNs)
        __builtin_ia32_pause();
    if (since() < static_cast<std::int64_t>(kResumeDrives)) return false;
    const std::uint64_t silent = dev_.silent_writes();
    if (silent != w.silent_writes) {
        w.silent_seen_ns = monotonic_ns();
        return false;
    }
    return dev_.releases_with_work_left() == w.left_work;
}

void EngineThread::run() noexcept {
    // Named so that top -H, perf and tests tell the engine from the application's threads.
    pthread_setname_np(pthread_self(), kThreadName);
    if (opts_.on_thread_start) opts_.on_thread_start();
    apply_nice(opts_.nice);
    // A nap is bounded by the next timer or pacer deadline (tens of us); the kernel's default 50 us
    // timer slack would stretch each one past it (a QP paced at 1 Gb/s sent 0.58 Gb/s).
    if (prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0) Device::naps_end_on_time();
    opts_.step_aside_ns = std::min(opts_.step_aside_ns, kMaxStepAsideNs);
    if (opts_.step_aside_ns != 0) dev_.watch_step_aside();
    IdleBackoff backoff(opts_);
    AppDriveWatch watch = watch_from_now(0);
    std::uint32_t turns = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
        // Looked at every kStepAsideLookEvery turns while spinning (the drive count's line is the
        // application's, written on each of its polls, and a read per turn would pull it away
        // every time), and on every turn past the spin phase (a yield beside a spinning
        // application can take milliseconds: 64 of them would delay the step for good).
        if (opts_.step_aside_ns != 0 &&
            ((++turns % kStepAsideLookEvery) == 0 || backoff.past_spin()) &&
            app_polls_busily(watch)) {
            // Nap after nap while the application is seen driving right after each one (a short
            // look, no pass): one that stopped during a nap gets its engine back at its end.
            while (!stop_.load(std::memory_order_relaxed) &&
                   dev_.step_aside_nap(opts_.step_aside_ns, watch.left_work)) {
                steps_aside_.fetch_add(1, std::memory_order_relaxed);
                if (!app_keeps_polling(watch)) break;
            }
            watch = watch_from_now(watch.silent_seen_ns);
            backoff.worked();
            continue;
        }
        if (dev_.poll() > 0) {
            backoff.worked();
            continue;
        }
        // Woken (the doorbell, a receive interrupt): poll busily again, as after work. Slept its
        // time out: nap again at once if the next poll finds nothing. (It used to yield through
        // yield_polls more passes after every nap: an idle engine then napped 100 us in every
        // 10 - 20 ms and used 99 % of a core, sched_yield returning at once on an idle host.)
        const auto nap = [&] {
            naps_.fetch_add(1, std::memory_order_relaxed);
            return dev_.sleep_until_doorbell(opts_.max_sleep_ns);
        };
        backoff.rest(nap, dev_.pacer_release_ns() != 0);
    }
    backoff.worked(); // leave SCHED_FIFO (a thread of a pool may be reused)
    if (opts_.on_thread_exit) opts_.on_thread_exit();
}

} // namespace droce
