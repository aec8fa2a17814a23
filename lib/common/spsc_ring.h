/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Single-producer single-consumer ring of fixed-size slots, the queue between an application thread
 * and the engine (SQ, RQ, CQ), in the manner of a NIC's descriptor rings.
 *
 * Capacity is a power of two fixed at creation; the slot array is allocated once by the control
 * path (never on the datapath). Indices run freely (uint32_t, wrapping) and are masked on access.
 * The producer writes a slot, then publishes it with a release store of the producer index; the
 * consumer reads the producer index with an acquire load before reading slots. The consumer frees
 * slots with a release store of the consumer index, which the producer acquires before reusing
 * them. Each index sits on its own cache line so the two sides do not false-share.
 *
 * Ownership: a slot belongs to the producer from reserve until publish, then to the consumer until
 * release. Thread rules: one producer thread, one consumer thread; either may be the same thread.
 */
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "common/prefetch.h"

namespace droce {

inline constexpr std::size_t kCacheLine = 64;

template <typename T>
class SpscRing {
  public:
    SpscRing() = default;
    /** Creates a ring of at least @p min_capacity slots (rounded up to a power of two, >= 1). */
    explicit SpscRing(std::uint32_t min_capacity)
        : capacity_(std::bit_ceil(min_capacity ? min_capacity : 1u)), mask_(capacity_ - 1),
          slots_(std::make_unique<T[]>(capacity_)) {}

    /** Creates a ring of at least @p min_capacity slots, or, when there is no memory for them, an
     *  empty one (capacity() == 0): for control paths that answer ENOMEM instead of throwing. */
    SpscRing(std::uint32_t min_capacity, std::nothrow_t) noexcept
        : capacity_(std::bit_ceil(min_capacity ? min_capacity : 1u)), mask_(capacity_ - 1),
          slots_(new (std::nothrow) T[capacity_]()) {
        if (!slots_) capacity_ = mask_ = 0;
    }

    /** Moves are for the control path only: neither side may use either ring meanwhile. */
    SpscRing(SpscRing&&) noexcept = default;
    SpscRing& operator=(SpscRing&&) noexcept = default;

    [[nodiscard]] std::uint32_t capacity() const noexcept { return capacity_; }

    // ---- producer side ----
    /** Slots the producer may fill now. */
    [[nodiscard]] std::uint32_t free_slots() const noexcept {
        // acquire: the consumer finished reading slots before it moved its index.
        return capacity_ - (prod_.value - cons_.value.load(std::memory_order_acquire));
    }
    /** Slot @p i positions after the producer index (i < free_slots()). */
    [[nodiscard]] T& producer_slot(std::uint32_t i = 0) noexcept {
        return slots_[(prod_.value + i) & mask_];
    }
    /** Prefetches the lines a producer reads and writes (the ring's header and its three
     *  indices), without reading them: a poster to a ring out of the caches then waits for their
     *  misses once, together, not one after the other. */
    void prefetch_producer_lines() const noexcept {
        prefetch_for_read(this);
        prefetch_for_write(&prod_);
        prefetch_for_write(&prod_pub_);
        prefetch_for_read(&cons_);
    }
    /** Prefetches the lines a consumer reads and writes (the ring's header, the published
     *  producer index and its own), without reading them. */
    void prefetch_consumer_lines() const noexcept {
        prefetch_for_read(this);
        prefetch_for_read(&prod_pub_);
        prefetch_for_write(&cons_);
    }
    /** Makes @p n filled slots visible to the consumer. */
    void publish(std::uint32_t n = 1) noexcept {
        prod_.value += n;
        // release: the slot contents are written before the consumer can see the new index.
        prod_pub_.value.store(prod_.value, std::memory_order_release);
    }

    // ---- consumer side ----
    /** Slots published and not yet released by the consumer. */
    [[nodiscard]] std::uint32_t ready() const noexcept {
        // acquire: pairs with publish(); slot contents up to this index are visible.
        return prod_pub_.value.load(std::memory_order_acquire) -
               cons_.value.load(std::memory_order_relaxed);
    }
    /** Consumer index (free running); slot(consumer_index()) is the oldest unreleased slot. */
    [[nodiscard]] std::uint32_t consumer_index() const noexcept {
        return cons_.value.load(std::memory_order_relaxed);
    }
    /** Published index as last seen by the consumer side (free running). */
    [[nodiscard]] std::uint32_t producer_index() const noexcept {
        return prod_pub_.value.load(std::memory_order_acquire);
    }
    /** Slot at free-running index @p idx (the caller keeps idx within [consumer, producer)). */
    [[nodiscard]] T& slot(std::uint32_t idx) noexcept { return slots_[idx & mask_]; }
    [[nodiscard]] const T& slot(std::uint32_t idx) const noexcept { return slots_[idx & mask_]; }
    /** Returns @p n slots to the producer. */
    void release(std::uint32_t n = 1) noexcept {
        // release: the consumer's reads of the slots happen before the producer may overwrite them.
        cons_.value.store(cons_.value.load(std::memory_order_relaxed) + n,
                          std::memory_order_release);
    }

    /** Empties the ring and value-initialises every slot, keeping its memory (a QP going back to
     *  RESET). Control path: neither side may use the ring meanwhile. */
    void clear() noexcept {
        for (std::uint32_t i = 0; i < capacity_; ++i)
            slots_[i] = T{};
        prod_.value = 0;
        prod_pub_.value.store(0, std::memory_order_relaxed);
        cons_.value.store(0, std::memory_order_relaxed);
    }

  private:
    struct alignas(kCacheLine) ProducerPrivate {
        std::uint32_t value = 0;
    };
    struct alignas(kCacheLine) Shared {
        std::atomic<std::uint32_t> value{0};
        Shared() = default;
        // Moving a ring is a control-path operation (creation, QP reset) done while neither side
        // uses it, so a relaxed copy of the index is enough.
        Shared(Shared&& o) noexcept : value(o.value.load(std::memory_order_relaxed)) {}
        Shared& operator=(Shared&& o) noexcept {
            value.store(o.value.load(std::memory_order_relaxed), std::memory_order_relaxed);
            return *this;
        }
    };

    std::uint32_t capacity_ = 0;
    std::uint32_t mask_ = 0;
    std::unique_ptr<T[]> slots_;
    ProducerPrivate prod_; ///< producer's own copy of its index
    Shared prod_pub_;      ///< published producer index
    Shared cons_;          ///< consumer index
};

} // namespace droce
