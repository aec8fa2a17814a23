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
 * Any work returns it to the spin phase. A pass that finds nothing to do but QPs waiting for their
 * pacers (Device::pacer_release_ns()) skips 1 and 2: the engine sleeps until the next send time.
 * Thread rules: start() and stop() from one control thread.
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
        /**
         * Realtime wake-ups: the thread is SCHED_FIFO (priority 1) while it naps and until its
         * first pass with work after the nap, SCHED_OTHER otherwise. A nap that ends, or a doorbell
         * or receive interrupt that ends it, then runs the engine at once, whatever else runs on
         * its core: on kernel 6.18 (EEVDF) a normal thread waking beside an application spinning on
         * memory (ib_write_lat's receiving side) waited for the spinner's slice, 2 - 4 ms. The
         * thread never polls as realtime beyond that one pass, so it cannot starve its core. Needs
         * CAP_SYS_NICE or RLIMIT_RTPRIO >= 1; without either the thread stays SCHED_OTHER. Off by
         * default: alone it changed nothing measurable (bench: README, Progress); with
         * shared_core_yield_ns it is the verbs library's latency mode (DROCE_ENGINE_WAKE=fifo).
         */
        bool realtime_wake = false;
        /**
         * A sched_yield() that kept the thread off its core longer than this (ns) means another
         * thread wants the core for itself (an application spinning on memory): each later yield
         * would hand it a whole slice, so the thread skips its yield phase (spin, then nap) for
         * shared_core_hold_ns, then tries yielding again. 0 (the default) = always yield through
         * yield_polls: naps instead of yields cost an ib_write_bw server half its bandwidth.
         */
        std::uint64_t shared_core_yield_ns = 0;
        std::uint64_t shared_core_hold_ns = 1'000'000'000; ///< 1 s
        /**
         * Steps aside for an application that drives the engine itself: the length (ns) of one
         * step-aside nap; 0 = never (the default). When an application thread drove the device
         * (Device::note_app_drive(): an empty ibv_poll_cq running engine passes) at least
         * kStepAsideMinDrives times per kStepAsideWindowNs on average over a window of at least
         * that length that began after the last nap, the device placed no RDMA WRITE without a
         * completion in the last kSilentWriteHoldNs (Device::silent_writes(): the program may be
         * spinning on memory for one, as ib_write_lat does, and only the engine would place the
         * next), and no release of the engine left work behind in the window
         * (Device::releases_with_work_left(): a program that posts a large WRITE, then computes,
         * expects it to go on), the thread runs no pass and naps this long, or until the device's
         * next timer or pacer release as the last pass left it (Device::step_aside_nap()); it naps
         * again at once while the application is seen driving right after each nap
         * (app_keeps_polling()), and otherwise runs and measures a new window.
         * Without it the engine thread kept winning the engine between two of the application's
         * polls and stayed runnable: three or four busy threads for two cores in a perftest pair,
         * and ib_send_lat's two polling threads put on one CPU (README: Progress). An application
         * that stops driving gets its engine back within one nap (plus a wake-up); one that arms
         * a CQ or blocks in ibv_get_cq_event wakes it at once (Device::app_drive_ends()); one
         * that polls a CQ only now and then (a server that polls memory for requests) never makes
         * it step aside. The verbs library sets it in its default progress mode (a per-device
         * engine thread: Runtime's one thread for several devices never steps aside).
         */
        std::uint64_t step_aside_ns = 0; ///< at most kMaxStepAsideNs (larger values are cut)
        /**
         * Called first on every engine thread (EngineThread's and Runtime's one thread for all
         * devices), before its first pass; nullptr = nothing. The runtime sets it, when DPDK's EAL
         * is up in the process, to dpdk::register_thread(): a thread the EAL did not create has no
         * lcore id, and DPDK then gives it no mempool cache, so every mbuf it allocates or frees
         * (the memif receive copies, ACKs, frees after transmit) went through the pool's shared
         * ring (an ib_write_bw server's engine thread ran 25 % slower than the same loop on the
         * main thread; README, Progress).
         */
        void (*on_thread_start)() noexcept = nullptr;
        /** Called last on every engine thread, after its last pass (dpdk::unregister_thread()). */
        void (*on_thread_exit)() noexcept = nullptr;
    };

    /**
     * The idle back-off of an engine loop (EngineThread's, and Runtime's one thread for every
     * device): spin, yield, nap, as Options says, with realtime wake-ups and the shared-core
     * detection. One per loop, used only by the thread that runs it:
     *
     *     if (dev.poll() > 0) backoff.worked(); else backoff.rest([&] { return dev.sleep...(); });
     */
    class IdleBackoff {
      public:
        enum class Step : std::uint8_t { spin, yield, nap };
        explicit IdleBackoff(const Options& o) noexcept : o_(o), realtime_ok_(o.realtime_wake) {}
        /**
         * After a pass that found nothing: a pause, a yield or a nap, whichever is due; the nap at
         * once when @p pacer_wait. @p nap sleeps (bounded by the caller) and returns true when
         * something ended the sleep early.
         */
        template <class Nap>
        void rest(Nap&& nap, bool pacer_wait = false) noexcept {
            // Only paced QPs wait (Device::pacer_release_ns()): the nap at once, with no spin or
            // yield phase before it.
            switch (pacer_wait ? Step::nap : idle()) {
            case Step::spin:
                __builtin_ia32_pause();
                break;
            case Step::yield:
                yield();
                break;
            case Step::nap:
                nap_begins();
                nap_ended(nap());
                break;
            }
        }
        /** After a pass that found work: back to spinning; SCHED_OTHER again if realtime. */
        void worked() noexcept {
            idle_ = 0;
            if (realtime_) leave_realtime();
        }
        /** After a pass that found nothing: what to do before the next one. */
        [[nodiscard]] Step idle() noexcept;
        /** sched_yield(), timed (shared-core detection). */
        void yield() noexcept;
        /** Just before the nap: SCHED_FIFO when Options::realtime_wake and allowed. */
        void nap_begins() noexcept;
        /** After the nap; @p woken: something ended it early (work is likely). */
        void nap_ended(bool woken) noexcept { idle_ = woken ? 0 : nap_after(); }
        /** True once idle beyond the spin phase (yielding or napping). */
        [[nodiscard]] bool past_spin() const noexcept { return idle_ >= o_.spin_polls; }
        /** True while SCHED_FIFO (for tests). */
        [[nodiscard]] bool realtime() const noexcept { return realtime_; }
        /** True while the yield phase is skipped (shared core seen; for tests). */
        [[nodiscard]] bool core_shared() const noexcept { return shared_until_ns_ != 0; }

      private:
        [[nodiscard]] std::uint32_t nap_after() const noexcept {
            return o_.spin_polls + o_.yield_polls;
        }
        void leave_realtime() noexcept;
        Options o_;
        std::uint32_t idle_ = 0;
        bool realtime_ok_;
        bool realtime_ = false;
        std::uint64_t shared_until_ns_ = 0; ///< monotonic ns; 0 = not shared
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
    /** Step-aside naps taken so far (Options::step_aside_ns; decisions that found no nap to take
     *  are not counted; for tests and stats). */
    [[nodiscard]] std::uint64_t steps_aside() const noexcept {
        return steps_aside_.load(std::memory_order_relaxed);
    }

    /** Step-aside watch window (ns) and the application drives it must see in it (one per
     *  ~3 us: a busy-polling loop makes hundreds; a loop that polls a CQ per batch of work, few).
     */
    static constexpr std::uint64_t kStepAsideWindowNs = 100'000;
    static constexpr std::uint64_t kStepAsideMinDrives = 32;
    /** After a step-aside nap the thread naps again at once when the application made this many
     *  drives within kResumeLookNs of its end (a busy poller makes one every microsecond or so),
     *  and nothing that forbids a step came meanwhile; else it runs and measures a new window. */
    static constexpr std::uint64_t kResumeDrives = 4;
    /** Longest step-aside nap (ns): Options::step_aside_ns is cut to it. */
    static constexpr std::uint64_t kMaxStepAsideNs = 1'000'000'000;
    static constexpr std::uint64_t kResumeLookNs = 20'000;
    /** Loop turns between two looks at the application's drives while the engine spins (a turn
     *  is a pass or a pause; past the spin phase it looks on every turn). */
    static constexpr std::uint32_t kStepAsideLookEvery = 64;
    /** No step aside for this long (ns) after the device placed a WRITE with no completion
     *  (Device::silent_writes()): a program that receives them may wait on memory for the next. */
    static constexpr std::uint64_t kSilentWriteHoldNs = 1'000'000'000;

  private:
    /** Where the last step-aside window began: monotonic ns and Device::app_drives(). */
    struct AppDriveWatch {
        std::uint64_t since_ns;
        std::uint64_t drives;
        std::uint64_t silent_writes;  ///< Device::silent_writes()
        std::uint64_t left_work;      ///< Device::releases_with_work_left()
        std::uint64_t silent_seen_ns; ///< when silent_writes last moved (0: never)
    };
    /** A window from now (@p silent_seen_ns carried over). */
    [[nodiscard]] AppDriveWatch watch_from_now(std::uint64_t silent_seen_ns) const noexcept;
    /** True, once per window, when the application drove at the step-aside rate since @p w
     *  began, no silent WRITE was placed and no release left work; a new window then begins
     *  (@p w updated). */
    [[nodiscard]] bool app_polls_busily(AppDriveWatch& w) const noexcept;
    /** After a nap: true when the application drove kResumeDrives times within kResumeLookNs
     *  (spinning on the count, no pass), no silent WRITE was placed and no release left work
     *  since @p w began (@p w's silent_seen_ns updated). */
    [[nodiscard]] bool app_keeps_polling(AppDriveWatch& w) const noexcept;
    void run() noexcept;

    Device& dev_;
    Options opts_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> naps_{0};
    std::atomic<std::uint64_t> steps_aside_{0};
};

} // namespace droce
