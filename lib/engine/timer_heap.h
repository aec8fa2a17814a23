/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The engine's timers: an indexed binary min-heap of one deadline per QP slot (local ACK timer, RNR
 * wait, and later pacing and path probes: whatever the transport's next deadline is). The engine
 * looks only at the top, so a QP without a deadline costs nothing per pass, and a QP whose deadline
 * moves is updated in place (O(log n), no duplicate entries, no allocation after construction).
 *
 * Thread rules: engine thread only, or the control path inside a Device::ControlSection.
 */
#pragma once

#include <cstdint>
#include <memory>

namespace droce {

class TimerHeap {
  public:
    static constexpr std::uint32_t kNone = UINT32_MAX;

    /** @param slots number of timer owners (QP slots); indices are 0..slots-1. Allocates here only.
     */
    explicit TimerHeap(std::uint32_t slots)
        : heap_(new Entry[slots]), pos_(new std::uint32_t[slots]) {
        for (std::uint32_t i = 0; i < slots; ++i)
            pos_[i] = kNone;
    }

    /** Arms, moves or (with @p deadline_ns == 0) cancels the timer of @p slot. */
    void set(std::uint32_t slot, std::uint64_t deadline_ns) noexcept {
        const std::uint32_t p = pos_[slot];
        if (deadline_ns == 0) {
            if (p != kNone) remove_at(p);
            return;
        }
        if (p == kNone) {
            const std::uint32_t at = size_++;
            heap_[at] = {deadline_ns, slot};
            pos_[slot] = at;
            sift_up(at);
            return;
        }
        const std::uint64_t old = heap_[p].deadline_ns;
        heap_[p].deadline_ns = deadline_ns;
        if (deadline_ns < old)
            sift_up(p);
        else
            sift_down(p);
    }
    /** The deadline armed for @p slot, or 0. */
    [[nodiscard]] std::uint64_t deadline(std::uint32_t slot) const noexcept {
        return pos_[slot] == kNone ? 0 : heap_[pos_[slot]].deadline_ns;
    }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
    /** Earliest deadline in ns, or 0 when no timer is armed. */
    [[nodiscard]] std::uint64_t next_deadline_ns() const noexcept {
        return size_ ? heap_[0].deadline_ns : 0;
    }
    /** Removes and returns the slot of the earliest timer if it is due at @p now_ns, else kNone. */
    std::uint32_t pop_due(std::uint64_t now_ns) noexcept {
        if (size_ == 0 || heap_[0].deadline_ns > now_ns) return kNone;
        const std::uint32_t slot = heap_[0].slot;
        remove_at(0);
        return slot;
    }

  private:
    struct Entry {
        std::uint64_t deadline_ns;
        std::uint32_t slot;
    };

    void place(std::uint32_t at, const Entry& e) noexcept {
        heap_[at] = e;
        pos_[e.slot] = at;
    }
    void sift_up(std::uint32_t at) noexcept {
        const Entry e = heap_[at];
        while (at > 0) {
            const std::uint32_t parent = (at - 1) / 2;
            if (heap_[parent].deadline_ns <= e.deadline_ns) break;
            place(at, heap_[parent]);
            at = parent;
        }
        place(at, e);
    }
    void sift_down(std::uint32_t at) noexcept {
        const Entry e = heap_[at];
        for (;;) {
            std::uint32_t child = 2 * at + 1;
            if (child >= size_) break;
            if (child + 1 < size_ && heap_[child + 1].deadline_ns < heap_[child].deadline_ns)
                ++child;
            if (heap_[child].deadline_ns >= e.deadline_ns) break;
            place(at, heap_[child]);
            at = child;
        }
        place(at, e);
    }
    void remove_at(std::uint32_t at) noexcept {
        pos_[heap_[at].slot] = kNone;
        const std::uint32_t last = --size_;
        if (at == last) return;
        const std::uint64_t removed = heap_[at].deadline_ns;
        place(at, heap_[last]);
        if (heap_[at].deadline_ns < removed)
            sift_up(at);
        else
            sift_down(at);
    }

    std::unique_ptr<Entry[]> heap_;
    std::unique_ptr<std::uint32_t[]> pos_;
    std::uint32_t size_ = 0;
};

} // namespace droce
