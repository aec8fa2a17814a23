/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * bench/verbs/wake_latency [JSON]: how soon a waiting engine thread sees a frame on a host with
 * more busy threads than cores (a benchmark, not a test; issue 15's ib_write_lat goal).
 *
 * ib_write_lat's receiving side spins on memory and never calls the library, so only its engine
 * thread can take the peer's WRITE off the port; on a 2-core host that thread shares its core with
 * the spinning application thread. This program rebuilds that situation without droce: on CPU 0 an
 * "application" thread spins and a "waiter" thread waits for events; on CPU 1 a "peer" raises an
 * event every 300 us (a timestamp, as a frame arriving). It measures event -> waiter noticing it,
 * for each way the waiter can wait:
 *   - nap N us: sleeps N us at a time (ppoll with a timeout, timer slack 1 ns) and looks after each
 *     nap: what an engine thread does on a port with no receive interrupt (droce's memif port);
 *   - yield: sched_yield() between looks (the engine's yield phase);
 *   - eventfd: blocks in read() on an eventfd the peer writes after raising the event: what a
 *     receive interrupt would give (io_uring ports have one; DPDK 22.11's memif PMD has none);
 *     and the same with no application thread on CPU 0 (the reference: a core of its own).
 * Prints one line per mode and writes JSON (percentiles in us; -1: more than the 300 us between
 * events, the waiter noticed that event only after the next was raised) to the path given.
 */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace {

constexpr int kEvents = 2000;
constexpr std::uint64_t kEventGapNs = 300'000;

std::uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

/** Pins the calling thread to @p cpu; exits the program when it cannot (the figures would not
 *  be what they say: the waiter must share CPU 0 with the application). */
void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (const int e = pthread_setaffinity_np(pthread_self(), sizeof s, &s); e != 0) {
        std::fprintf(stderr, "wake_latency: cannot run on CPU %d: %s\n", cpu, std::strerror(e));
        std::exit(1);
    }
}

enum class Wait { nap, yield, eventfd };

struct Result {
    std::string mode;
    std::size_t seen = 0;
    double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

Result run(Wait how, std::uint64_t nap_ns, bool competitor = true) {
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> raised{0}; // when the pending event was raised; 0 = none
    const int efd = eventfd(0, 0);
    if (efd < 0) {
        std::perror("wake_latency: eventfd");
        std::exit(1);
    }
    std::vector<std::uint64_t> lat;
    lat.reserve(kEvents);
    std::thread app([&] {
        pin(0);
        while (competitor && !stop.load(std::memory_order_relaxed)) {
        }
    });
    std::thread waiter([&] {
        pin(0);
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        for (;;) {
            // stop is read before the look: the peer raises its last event before it sets stop,
            // so that event is still collected.
            const bool last = stop.load();
            if (const std::uint64_t t = raised.exchange(0)) {
                lat.push_back(now_ns() - t);
                continue;
            }
            if (last) break;
            if (how == Wait::nap) {
                timespec ts{0, static_cast<long>(nap_ns)};
                ppoll(nullptr, 0, &ts, nullptr);
            } else if (how == Wait::yield) {
                sched_yield();
            } else {
                std::uint64_t v;
                [[maybe_unused]] ssize_t r = read(efd, &v, sizeof v);
            }
        }
    });
    std::thread peer([&] {
        pin(1);
        for (int i = 0; i < kEvents; ++i) {
            const std::uint64_t t0 = now_ns();
            while (now_ns() - t0 < kEventGapNs) {
            }
            raised.store(now_ns());
            if (how == Wait::eventfd) {
                const std::uint64_t one = 1;
                [[maybe_unused]] ssize_t r = write(efd, &one, sizeof one);
            }
        }
        stop.store(true);
        const std::uint64_t one = 1;
        [[maybe_unused]] ssize_t r = write(efd, &one, sizeof one);
    });
    peer.join();
    waiter.join();
    app.join();
    close(efd);
    Result res;
    res.mode = how == Wait::nap     ? "nap " + std::to_string(nap_ns / 1000) + " us"
               : how == Wait::yield ? std::string("yield")
                                    : std::string(competitor ? "eventfd" : "eventfd, core alone");
    res.seen = lat.size();
    // An event the waiter noticed only after the next one was raised is lost: it took more than
    // the gap. Such events count as "longer than any" (-1: more than 300 us).
    lat.resize(kEvents, UINT64_MAX);
    {
        std::sort(lat.begin(), lat.end());
        const auto at = [&](double q) {
            const std::uint64_t v = lat[static_cast<std::size_t>(q * (lat.size() - 1))];
            return v == UINT64_MAX ? -1.0 : static_cast<double>(v) / 1e3;
        };
        res.p50 = at(0.5);
        res.p90 = at(0.9);
        res.p99 = at(0.99);
        res.max = at(1.0);
    }
    return res;
}

} // namespace

int main(int argc, char** argv) {
    if (std::thread::hardware_concurrency() < 2) {
        std::fprintf(stderr, "wake_latency: needs two CPUs\n");
        return 1;
    }
    const auto print = [](const Result& r) {
        const auto us = [](double v) {
            char b[16];
            if (v < 0)
                std::snprintf(b, sizeof b, "> 300");
            else
                std::snprintf(b, sizeof b, "%.1f", v);
            return std::string(b);
        };
        std::printf("%-20s events seen %4zu of %d   p50 %7s us  p90 %7s  p99 %7s  max %7s\n",
                    r.mode.c_str(), r.seen, kEvents, us(r.p50).c_str(), us(r.p90).c_str(),
                    us(r.p99).c_str(), us(r.max).c_str());
    };
    std::vector<Result> all;
    // Each mode twice, interleaved, so that a noisy neighbour hurts every mode.
    for (int round = 0; round < 2; ++round)
        for (auto [how, nap] : {std::pair{Wait::eventfd, std::uint64_t{0}},
                                std::pair{Wait::nap, std::uint64_t{5'000}},
                                std::pair{Wait::nap, std::uint64_t{20'000}},
                                std::pair{Wait::yield, std::uint64_t{0}}}) {
            Result r = run(how, nap);
            if (how == Wait::eventfd) {
                // The reference, same run: the waiter has its core to itself.
                Result alone = run(how, nap, false);
                print(alone);
                all.push_back(alone);
            }
            print(r);
            all.push_back(r);
        }
    if (argc > 1) {
        nlohmann::json doc{{"bench", "wake_latency"},
                           {"events_per_run", kEvents},
                           {"event_gap_us", kEventGapNs / 1e3},
                           {"runs", nlohmann::json::array()}};
        for (const Result& r : all)
            doc["runs"].push_back({{"mode", r.mode},
                                   {"seen", r.seen},
                                   {"p50_us", r.p50},
                                   {"p90_us", r.p90},
                                   {"p99_us", r.p99},
                                   {"max_us", r.max}});
        std::FILE* f = std::fopen(argv[1], "w");
        if (!f) {
            std::perror(argv[1]);
            return 1;
        }
        std::fprintf(f, "%s\n", doc.dump(2).c_str());
        std::fclose(f);
    }
    return 0;
}
