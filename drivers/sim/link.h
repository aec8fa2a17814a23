/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Internal to drivers/sim: the one impairment pipeline and the one hold ring, shared by the sim
 * fabric's directed links (fabric.cc) and the impairment stage (impair.cc), so that both make the
 * same decisions the same way on a LinkConfig. Not a public header: not installed, include only
 * from drivers/sim sources.
 *
 * A Link takes frames with offer(), which applies LinkConfig in the order sim/fabric.h documents
 * (down, loss, trim, queue full or trim when full, ECN marking, corruption, timing, reorder,
 * duplication) and puts each surviving frame, and its duplicate, into the link's HoldRing with the
 * time it becomes due. The owner takes them out in ring order: the fabric one at a time, merging
 * the links into a port; the stage in batches towards its sink. Dropped frames go back, and
 * duplicates come from, the owner's FramePool.
 *
 * Thread rules: not thread safe; the owner's one thread makes every call. Nothing here allocates
 * (the ring storage is the owner's), locks, blocks or throws.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>

#include "port/port.h"
#include "sim/fabric.h"

namespace droce::sim::detail {

/** Where a link's duplicates come from and where the frames it drops go back to. */
class FramePool {
  public:
    /**
     * A buffer of the pool holding a copy of @p frame (data[0..len), len, port, ecn_ce), owned by
     * the caller; nullptr when the pool has none to give.
     */
    virtual PktBuf* copy_of(const PktBuf& frame) noexcept = 0;
    /** Takes back @p frame, a buffer of the pool the link dropped. */
    virtual void release(PktBuf* frame) noexcept = 0;

  protected:
    ~FramePool() = default;
};

/**
 * What the links of one owner (a fabric, or a stage) share. One PRNG draws every decision of all
 * of them, so that the outcome depends only on the seed and the sequence of calls.
 */
struct LinkContext {
    /**
     * @param seed PRNG seed.
     * @param start_ns origin of the links' ps clock (now, at construction): t0_ns.
     * @param buffers the pool; not owned, must outlive the links.
     */
    LinkContext(std::uint64_t seed, std::uint64_t start_ns, FramePool& buffers) noexcept
        : rng(seed), t0_ns(start_ns), pool(&buffers) {}

    std::mt19937_64 rng;
    std::uint64_t t0_ns;
    /** Send order over all links: ties between links due at the same ns go to the older frame. */
    std::uint64_t next_seq = 0;
    /** Frames in all the links' rings. */
    std::uint32_t in_flight = 0;
    FramePool* pool;
};

enum class EntryState : std::uint8_t { live, held, gone };

/** One frame in a hold ring. */
struct Entry {
    PktBuf* buf = nullptr;
    std::uint64_t deliver_ns = 0;    ///< due from this time
    std::uint64_t hold_until_ns = 0; ///< held frames: released at this time at the latest
    std::uint64_t seq = 0;           ///< LinkContext::next_seq when it was pushed
    std::uint16_t hold_left = 0;     ///< held frames: frames still to leave after it before it may
    EntryState state = EntryState::gone;
};

/** Returned by the rings' next-event functions when nothing in them waits. */
inline constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();

/**
 * The frames of one link in send order, in a fixed number of slots owned by the caller. Due times
 * never decrease along the ring (Link::offer keeps them FIFO), so a frame may leave when it is due
 * and every frame before it has left or is held back. A held frame stays in its slot and is
 * skipped; each frame that leaves from behind it counts one against its hold, and it is released
 * when its hold reaches 0 or its hold_until_ns passes. Slots left behind a held frame become
 * tombstones that the head steps over once the held frame is gone.
 */
class HoldRing {
  public:
    /** Uses @p storage, @p slots entries (a power of two), which must outlive the ring. */
    void attach(Entry* storage, std::uint32_t slots) noexcept {
        ring_ = storage;
        mask_ = slots - 1;
    }

    [[nodiscard]] std::uint32_t free_slots() const noexcept {
        return mask_ + 1 - static_cast<std::uint32_t>(tail_ - head_);
    }
    /** Frames in the ring (held or not). */
    [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
    /** Frames in the ring that are held back (released or not yet). */
    [[nodiscard]] std::uint32_t held() const noexcept { return held_; }
    [[nodiscard]] const Entry& at(std::uint64_t pos) const noexcept { return ring_[pos & mask_]; }

    /** Appends @p e; the caller checked free_slots(). */
    void push(const Entry& e) noexcept {
        ring_[tail_++ & mask_] = e;
        ++size_;
        if (e.state == EntryState::held) ++held_;
    }

    /**
     * Writes to @p pos the positions of up to @p max frames that may leave at @p now_ns, in ring
     * order, never more past a held frame than its hold still allows (so that taking all of them
     * keeps the reorder bound); returns how many.
     */
    std::uint16_t due(std::uint64_t now_ns, std::uint16_t max, std::uint64_t* pos) const noexcept {
        std::uint32_t cap = max;
        std::uint16_t n = 0;
        for (std::uint64_t p = head_; p != tail_ && n < cap; ++p) {
            const Entry& e = at(p);
            if (e.state == EntryState::gone) continue;
            if (waiting(e, now_ns)) {
                cap = std::min<std::uint32_t>(cap, n + e.hold_left);
                continue;
            }
            if (e.deliver_ns > now_ns) break; // and so is everything after it
            pos[n++] = p;
        }
        return n;
    }

    /** Removes the frame at @p pos and returns it, counting it against the held frames before it.
     */
    PktBuf* take(std::uint64_t pos) noexcept {
        if (held_ != 0) {
            for (std::uint64_t p = head_; p != pos; ++p) {
                Entry& e = ring_[p & mask_];
                if (e.state == EntryState::held && e.hold_left > 0) --e.hold_left;
            }
        }
        Entry& e = ring_[pos & mask_];
        PktBuf* b = e.buf;
        if (e.state == EntryState::held) --held_;
        e.buf = nullptr;
        e.state = EntryState::gone;
        --size_;
        while (head_ != tail_ && at(head_).state == EntryState::gone)
            ++head_;
        return b;
    }

    /** Removes every frame, handing each to @p f (void(PktBuf*)). */
    template <typename F>
    void clear(F&& f) noexcept {
        for (std::uint64_t p = head_; p != tail_; ++p) {
            Entry& e = ring_[p & mask_];
            if (e.state != EntryState::gone) f(e.buf);
            e.buf = nullptr;
            e.state = EntryState::gone;
        }
        head_ = tail_;
        size_ = 0;
        held_ = 0;
    }

    /**
     * If the oldest frame is held back, releases it now. Early release keeps the reorder bound;
     * a stage whose ring is full uses it to move on instead of waiting for reorder_max_ns.
     */
    void release_oldest_if_held() noexcept {
        if (head_ == tail_) return;
        Entry& e = ring_[head_ & mask_];
        if (e.state == EntryState::held) e.hold_left = 0;
    }

    /**
     * Earliest ns at which a frame that cannot leave at @p now_ns may: the release time of a held
     * frame (past if it was released by time and waits for its taker) or the due time of a frame
     * not yet due. Frames due at now_ns wait for their taker, not for time, and are skipped; with
     * now_ns 0 none is, so the result is when the ring's next frame may leave, possibly past.
     * kNever when no frame waits.
     */
    [[nodiscard]] std::uint64_t next_event_ns(std::uint64_t now_ns) const noexcept {
        std::uint64_t best = kNever;
        for (std::uint64_t p = head_; p != tail_; ++p) {
            const Entry& e = at(p);
            if (e.state == EntryState::gone) continue;
            if (e.state == EntryState::held && e.hold_left > 0) {
                best = std::min(best, e.hold_until_ns);
                continue;
            }
            if (e.deliver_ns > now_ns)
                return std::min(best, e.deliver_ns); // frames after it are due no earlier
        }
        return best;
    }

  private:
    /** Held back and not yet released at @p now_ns. */
    static bool waiting(const Entry& e, std::uint64_t now_ns) noexcept {
        return e.state == EntryState::held && e.hold_left > 0 && now_ns < e.hold_until_ns;
    }

    Entry* ring_ = nullptr;
    std::uint32_t mask_ = 0;
    std::uint64_t head_ = 0; ///< first entry not yet gone
    std::uint64_t tail_ = 0; ///< next entry to fill
    std::uint32_t size_ = 0;
    std::uint32_t held_ = 0;
};

/** How a link times its frames. */
enum class Pacing : std::uint8_t {
    /**
     * Frames leave at the link bandwidth, one after the other, then travel delay_ns: the fabric's
     * wires.
     */
    serialise,
    /**
     * Frames are due delay_ns after they were offered; the bandwidth only models the egress queue
     * that RED marks on and queue_bytes tail-drops on. The stage: its sink, a real port, sends at
     * its own rate, and pacing it here too would count the serialisation twice.
     */
    model_queue,
};

/** The state of one egress queue, a link's own or shared by the links into one port. */
struct EgressQueue {
    /** When its last queued byte is serialised: ps since LinkContext::t0_ns. */
    std::uint64_t busy_until_ps = 0;
    /**
     * PFC: the latest ns at which the backlog was seen to fall to pfc_xon_bytes (recorded when a
     * frame arrives, from the backlog it finds); a port paused before then may send again.
     */
    std::uint64_t xon_reached_ns = 0;
};

/** One impaired link: its configuration, counters, egress queue state and ring of frames. */
struct Link {
    /**
     * @param ctx the owner's shared state; not owned, must outlive the link.
     * @param storage, slots the ring's entries (slots a power of two); not owned.
     * @param initial the first config.
     * @param timing how frames are timed, for the link's life.
     */
    Link(LinkContext& ctx, Entry* storage, std::uint32_t slots, const LinkConfig& initial,
         Pacing timing) noexcept
        : config(initial), pacing(timing), ctx_(&ctx) {
        ring.attach(storage, slots);
    }

    /**
     * Applies the impairments to @p b (config, in the documented order) at @p now_ns; the link owns
     * @p b afterwards in every case: in its ring, or dropped and released to the pool.
     */
    void offer(PktBuf* b, std::uint64_t now_ns) noexcept;

    /** Removes the frame at @p pos of the ring (from ring.due()) and returns it. */
    PktBuf* take(std::uint64_t pos) noexcept {
        --ctx_->in_flight;
        return ring.take(pos);
    }

    /** Drops every frame in the ring as dropped_down. */
    void drop_in_flight() noexcept;

    /**
     * Makes the egress queue @p queue, shared with other links into the same port; nullptr: its
     * own.
     */
    void share_egress(EgressQueue* queue) noexcept { shared_ = queue; }
    /** The egress queue this link's frames join (shared or its own). */
    [[nodiscard]] const EgressQueue& egress() const noexcept {
        return shared_ != nullptr ? *shared_ : own_;
    }

    /** Bytes in the link's egress queue (shared or its own) not yet serialised at @p now_ns; 0
     *  with infinite bandwidth. */
    [[nodiscard]] std::uint64_t backlog(std::uint64_t now_ns) const noexcept;
    /** The ns at which backlog() falls to @p bytes (possibly past); t0_ns with infinite
     *  bandwidth. */
    [[nodiscard]] std::uint64_t drained_to_ns(std::uint64_t bytes) const noexcept;

    LinkConfig config;
    /** Probability that an ECT frame RED did not mark is marked CE anyway (the stage's flat
     *  marking); 0 on a fabric link. */
    double ecn_mark_probability = 0.0;
    Pacing pacing;
    LinkStats stats;
    /** The frames in flight. Take them out with take() or drop_in_flight(), which keep
     *  LinkContext::in_flight right. */
    HoldRing ring;

  private:
    EgressQueue& queue() noexcept { return shared_ != nullptr ? *shared_ : own_; }
    void drop(PktBuf* b, LinkCounter why) noexcept;
    void push(PktBuf* b, std::uint64_t deliver_ns, std::uint16_t hold_left,
              std::uint64_t hold_until_ns) noexcept;

    LinkContext* ctx_;
    EgressQueue* shared_ = nullptr;
    EgressQueue own_;
    std::uint64_t last_deliver_ns_ = 0; ///< due time of the last frame: the FIFO floor
};

} // namespace droce::sim::detail
