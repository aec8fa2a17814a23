/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The one source of time for the transport: nanoseconds from the TSC in production, or a virtual
 * clock that tests advance by hand so that a 1.28 ms RNR timer is tested exactly and instantly.
 *
 * The mode is chosen when the clock is created; now_ns() is one predictable
 * branch and a rdtsc. Thread rules: now_ns() may be called from any thread; advance() only from the
 * thread that drives the engine in tests.
 */
#pragma once

#include <cstdint>
#include <ctime>

#include <x86intrin.h>

namespace droce {

/**
 * CLOCK_MONOTONIC_COARSE in nanoseconds: a vDSO read, no system call, resolution of a scheduler
 * tick (1 - 4 ms). For deadlines that need no more (link state reads, start-up waits). Any thread.
 */
[[nodiscard]] inline std::uint64_t coarse_monotonic_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

/** CLOCK_MONOTONIC in nanoseconds (a vDSO read; the resolution of the clock source). Any thread. */
[[nodiscard]] inline std::uint64_t monotonic_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

class Clock {
  public:
    /** A clock that reads the TSC, calibrated once against CLOCK_MONOTONIC (about 10 ms at start).
     */
    [[nodiscard]] static Clock tsc() noexcept {
        Clock c;
        const std::uint64_t t0 = __rdtsc();
        const std::uint64_t n0 = monotonic_ns();
        std::uint64_t n1 = n0;
        while (n1 - n0 < 10'000'000)
            n1 = monotonic_ns();
        const std::uint64_t t1 = __rdtsc();
        c.tsc_base_ = t1;
        c.ns_base_ = n1;
        c.ns_per_tick_ = static_cast<double>(n1 - n0) / static_cast<double>(t1 > t0 ? t1 - t0 : 1);
        return c;
    }
    /** A virtual clock starting at @p start_ns that moves only through advance()/set(). */
    [[nodiscard]] static Clock virtual_clock(std::uint64_t start_ns = 1'000'000) noexcept {
        Clock c;
        c.virtual_ = true;
        c.virtual_ns_ = start_ns;
        return c;
    }

    /** Current time in ns (monotonic; origin unspecified). */
    [[nodiscard]] std::uint64_t now_ns() const noexcept {
        if (virtual_) return virtual_ns_;
        return tsc_now_ns();
    }
    [[nodiscard]] bool is_virtual() const noexcept { return virtual_; }
    /** Virtual clocks only: moves time forward by @p ns. No effect on a TSC clock. */
    void advance(std::uint64_t ns) noexcept {
        if (virtual_) virtual_ns_ += ns;
    }
    /** Virtual clocks only: sets the time (never backwards). */
    void set(std::uint64_t ns) noexcept {
        if (virtual_ && ns > virtual_ns_) virtual_ns_ = ns;
    }

  private:
    [[nodiscard]] std::uint64_t tsc_now_ns() const noexcept {
        return ns_base_ + static_cast<std::uint64_t>(static_cast<double>(__rdtsc() - tsc_base_) *
                                                     ns_per_tick_);
    }
    bool virtual_ = false;
    std::uint64_t virtual_ns_ = 0;
    std::uint64_t tsc_base_ = 0;
    std::uint64_t ns_base_ = 0;
    double ns_per_tick_ = 1.0;
};

} // namespace droce
