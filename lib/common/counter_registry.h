/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * One registry of every counter block a device has (device, receive parse reasons, each port's
 * neighbour responder, each QP), so that one reader (a telemetry endpoint, droce-stat, a test) can
 * enumerate them all by name without knowing where they live.
 *
 * Thread rules: add() and remove() on the control path (the owner of a block registers it before
 * the engine counts into it and removes it before freeing it); for_each() from any thread. A mutex
 * guards the list, never the counters: the engine does not touch the registry.
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace droce {

class CounterRegistry {
  public:
    /** One registered block: where it is (scope: "device", "device/parse", "port1/neigh",
     * "qp/0x11"), what each counter is called, and the live cells (read them with relaxed loads).
     */
    struct Entry {
        std::string scope;
        std::span<const std::string_view> names;
        std::span<const std::atomic<std::uint64_t>> cells;
    };

    /** Lists a block. @p names and @p cells must have the same size and outlive the entry. */
    void add(std::string scope, std::span<const std::string_view> names,
             std::span<const std::atomic<std::uint64_t>> cells) {
        std::lock_guard lock(mu_);
        entries_.push_back(Entry{std::move(scope), names, cells});
    }
    /** Unlists the block whose cells start at @p cells (no-op if not listed). */
    void remove(const std::atomic<std::uint64_t>* cells) {
        std::lock_guard lock(mu_);
        std::erase_if(entries_, [&](const Entry& e) { return e.cells.data() == cells; });
    }
    /** Calls @p fn(scope, name, value) for every counter of every block, in registration order. */
    template <typename Fn>
    void for_each(Fn&& fn) const {
        std::lock_guard lock(mu_);
        for (const Entry& e : entries_)
            for (std::size_t i = 0; i < e.cells.size(); ++i)
                fn(std::string_view(e.scope), e.names[i],
                   e.cells[i].load(std::memory_order_relaxed));
    }
    /** The value of counter @p name in block @p scope, or 0 when there is none. */
    [[nodiscard]] std::uint64_t value(std::string_view scope, std::string_view name) const {
        std::uint64_t out = 0;
        for_each([&](std::string_view s, std::string_view n, std::uint64_t v) {
            if (s == scope && n == name) out = v;
        });
        return out;
    }
    [[nodiscard]] std::size_t size() const {
        std::lock_guard lock(mu_);
        return entries_.size();
    }

  private:
    mutable std::mutex mu_;
    std::vector<Entry> entries_;
};

} // namespace droce
