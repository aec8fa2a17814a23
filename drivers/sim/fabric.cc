/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The sim fabric. Control path: the constructor (the only allocation) and the config setters.
 * Datapath: the ports' burst functions, which work on fixed-capacity rings and the preallocated
 * pool.
 *
 * In-flight frames of a link live in a ring in send order. Delivery times along a link never
 * decrease (serialisation is FIFO and the delay is added after), so a receiver scans each incoming
 * ring from its head and stops at the first frame not yet due. A held-back (reordered) frame stays
 * in place and is skipped until it is released; frames delivered from behind it leave tombstones
 * that the head steps over once everything before them is gone.
 */
#include "sim/fabric.h"
#include "sim/impair_common.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "wire/ipv4.h"
#include "wire/ipv6.h"
#include "wire/udp.h"

namespace droce::sim {

std::string_view to_string(LinkCounter c) noexcept {
    switch (c) {
#define DROCE_SIM_NAME(name)                                                                       \
    case LinkCounter::name:                                                                        \
        return #name;
        DROCE_SIM_LINK_COUNTERS(DROCE_SIM_NAME)
#undef DROCE_SIM_NAME
    case LinkCounter::count_:
        break;
    }
    return "unknown";
}

std::string_view to_string(PortCounter c) noexcept {
    switch (c) {
#define DROCE_SIM_NAME(name)                                                                       \
    case PortCounter::name:                                                                        \
        return #name;
        DROCE_SIM_PORT_COUNTERS(DROCE_SIM_NAME)
#undef DROCE_SIM_NAME
    case PortCounter::count_:
        break;
    }
    return "unknown";
}

namespace {

using detail::ecn_of;
using detail::kEcnCe;
using detail::kEthHeader;
using detail::Layout;
using detail::layout_of;
using detail::mark_ce;

enum class EntryState : std::uint8_t { live, held, gone };

/** One frame in flight on a link. */
struct Entry {
    PktBuf* buf = nullptr;
    std::uint64_t deliver_ns = 0;    ///< receivable from this time
    std::uint64_t hold_until_ns = 0; ///< held frames: released at this time at the latest
    std::uint64_t seq = 0;           ///< fabric-wide send order: tie-break between links
    std::uint16_t hold_left = 0;     ///< held frames: later frames still to be delivered before it
    EntryState state = EntryState::gone;
};

struct Link {
    LinkConfig cfg;
    LinkStats stats;
    Entry* ring = nullptr;  ///< link_slots entries in Impl::entries
    std::uint64_t head = 0; ///< first entry not yet gone
    std::uint64_t tail = 0; ///< next entry to fill
    /** End of serialisation of the last frame, ps since t0: own_busy_ps, or the destination
     *  port's when FabricConfig::shared_egress is set. */
    std::uint64_t* busy_until_ps = nullptr;
    std::uint64_t own_busy_ps = 0;
    std::uint64_t last_deliver_ns = 0; ///< delivery time of the last frame: FIFO floor
};

} // namespace

class SimPort final : public PortDriver {
  public:
    SimPort(Fabric::Impl* fabric, std::uint32_t endpoint, std::uint32_t plane) noexcept
        : fabric_(fabric), endpoint_(endpoint), plane_(plane) {}
    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    [[nodiscard]] std::uint32_t max_frame() const noexcept override;
    [[nodiscard]] bool link_up() const noexcept override;

  private:
    Fabric::Impl* fabric_;
    std::uint32_t endpoint_;
    std::uint32_t plane_;
};

struct Fabric::Impl {
    Clock* clock;
    std::uint32_t n_endpoints;
    std::uint32_t n_planes;
    std::uint32_t capacity;
    std::uint32_t slots;
    std::uint64_t t0_ns;
    std::mt19937_64 rng;
    std::uint64_t next_seq = 0;
    std::uint32_t inflight = 0;

    // Pool: buffer i is bufs[i] with data at mem[i * capacity]; free_stack[0..free_top) are free.
    std::uint32_t n_bufs;
    std::unique_ptr<std::uint8_t[]> mem;
    std::vector<PktBuf> bufs;
    std::vector<std::uint32_t> free_stack;
    std::vector<std::uint8_t> is_free;
    std::uint32_t free_top = 0;

    std::vector<Entry> entries;
    std::vector<Link> links;    ///< index (plane * E + from) * E + to
    std::vector<SimPort> ports; ///< index endpoint * P + plane
    std::vector<PortStats> port_stats;
    std::vector<std::uint64_t> egress_busy_ps; ///< per destination port, for shared_egress

    Impl(Clock* c, const FabricConfig& cfg)
        : clock(c), n_endpoints(cfg.endpoints), n_planes(cfg.planes), capacity(cfg.buffer_capacity),
          slots(std::bit_ceil(cfg.link_slots)), t0_ns(c->now_ns()), rng(cfg.seed),
          n_bufs(cfg.pool_buffers), mem(std::make_unique_for_overwrite<std::uint8_t[]>(
                                        static_cast<std::size_t>(n_bufs) * capacity)),
          bufs(n_bufs), free_stack(n_bufs), is_free(n_bufs, 1) {
        for (std::uint32_t i = 0; i < n_bufs; ++i) {
            bufs[i].data = mem.get() + static_cast<std::size_t>(i) * capacity;
            bufs[i].capacity = capacity;
            bufs[i].driver = this;
            free_stack[i] = n_bufs - 1 - i; // buffer 0 is handed out first
        }
        free_top = n_bufs;
        const std::size_t n_links = static_cast<std::size_t>(n_planes) * n_endpoints * n_endpoints;
        entries.resize(n_links * slots);
        links.resize(n_links);
        egress_busy_ps.resize(static_cast<std::size_t>(n_endpoints) * n_planes);
        for (std::size_t i = 0; i < n_links; ++i) {
            Link& l = links[i];
            l.cfg = cfg.link;
            l.ring = entries.data() + i * slots;
            const std::size_t to = i % n_endpoints;
            const std::size_t plane = i / (static_cast<std::size_t>(n_endpoints) * n_endpoints);
            l.busy_until_ps =
                cfg.shared_egress ? &egress_busy_ps[to * n_planes + plane] : &l.own_busy_ps;
        }
        ports.reserve(static_cast<std::size_t>(n_endpoints) * n_planes);
        for (std::uint32_t e = 0; e < n_endpoints; ++e)
            for (std::uint32_t p = 0; p < n_planes; ++p)
                ports.emplace_back(this, e, p);
        port_stats.resize(ports.size());
    }

    Link& link(std::uint32_t from, std::uint32_t to, std::uint32_t plane) noexcept {
        return links[(static_cast<std::size_t>(plane) * n_endpoints + from) * n_endpoints + to];
    }
    PortStats& pstats(std::uint32_t e, std::uint32_t p) noexcept {
        return port_stats[static_cast<std::size_t>(e) * n_planes + p];
    }

    // ---- randomness (impair_common.h, shared with the impairment stage) ----
    bool chance(double p) noexcept { return detail::chance(rng, p); }

    // ---- pool ----
    PktBuf* pool_get() noexcept {
        if (free_top == 0) return nullptr;
        const std::uint32_t i = free_stack[--free_top];
        is_free[i] = 0;
        PktBuf& b = bufs[i];
        // The caller may have moved data (e.g. to strip a header); hand the buffer out whole again.
        b.data = mem.get() + static_cast<std::size_t>(i) * capacity;
        b.capacity = capacity;
        b.driver = this;
        b.len = 0;
        b.port = 0;
        b.ecn_ce = false;
        return &b;
    }
    /** Index of @p b in the pool, or -1 if it is not one of ours. */
    std::int64_t index_of(const PktBuf* b) const noexcept {
        const auto a = reinterpret_cast<std::uintptr_t>(b);
        const auto base = reinterpret_cast<std::uintptr_t>(bufs.data());
        if (b == nullptr || a < base ||
            a >= base + static_cast<std::uintptr_t>(n_bufs) * sizeof(PktBuf) ||
            (a - base) % sizeof(PktBuf) != 0)
            return -1;
        return static_cast<std::int64_t>((a - base) / sizeof(PktBuf));
    }
    /** Returns an allocated buffer of ours to the pool (caller checked). */
    void pool_put(PktBuf* b) noexcept {
        const auto i = static_cast<std::uint32_t>(index_of(b));
        is_free[i] = 1;
        free_stack[free_top++] = i;
    }
    /** True if @p b is one of our buffers and currently allocated (not in the pool). */
    bool owned(const PktBuf* b) const noexcept {
        const std::int64_t i = index_of(b);
        return i >= 0 && is_free[static_cast<std::size_t>(i)] == 0;
    }
    /** True if data[0..len) of our buffer @p b lies inside its own slot of the pool memory. */
    bool frame_inside_slot(const PktBuf& b) const noexcept {
        const auto slot = reinterpret_cast<std::uintptr_t>(mem.get()) +
                          static_cast<std::uintptr_t>(index_of(&b)) * capacity;
        const auto data = reinterpret_cast<std::uintptr_t>(b.data);
        return data >= slot && b.len <= capacity && data - slot <= capacity - b.len;
    }
    PktBuf* copy_of(const PktBuf& src) noexcept {
        PktBuf* c = pool_get();
        if (c == nullptr) return nullptr;
        std::memcpy(c->data, src.data, src.len);
        c->len = src.len;
        c->ecn_ce = src.ecn_ce;
        return c;
    }

    // ---- time ----
    /**
     * Picoseconds since the fabric was built: serialisation times are kept in ps so that small
     * frames on fast links do not round to whole ns. 2^64 ps is 213 days of fabric lifetime.
     */
    std::uint64_t rel_ps(std::uint64_t now_ns) const noexcept {
        return now_ns > t0_ns ? (now_ns - t0_ns) * 1000u : 0;
    }

    // ---- transmit ----
    bool ring_has_room(const Link& l) const noexcept { return l.tail - l.head < slots; }

    void push(Link& l, PktBuf* b, std::uint64_t deliver_ns, bool held, std::uint16_t hold_left,
              std::uint64_t hold_until_ns) noexcept {
        Entry& e = l.ring[l.tail & (slots - 1)];
        e.buf = b;
        e.deliver_ns = deliver_ns;
        e.hold_until_ns = hold_until_ns;
        e.hold_left = hold_left;
        e.seq = next_seq++;
        e.state = held ? EntryState::held : EntryState::live;
        ++l.tail;
        ++inflight;
    }

    /** Bytes queued on @p l and not yet serialised at time @p now_ps. */
    static std::uint64_t backlog_bytes(const Link& l, std::uint64_t now_ps) noexcept {
        return detail::backlog_bytes(*l.busy_until_ps, now_ps, l.cfg.bandwidth_gbps);
    }

    /** One frame onto one directed link; the link takes ownership of @p b in every case. */
    void send_on_link(Link& l, PktBuf* b, std::uint64_t now_ns) noexcept {
        const LinkConfig& c = l.cfg;
        l.stats.inc(LinkCounter::tx_frames);
        if (!c.up) {
            l.stats.inc(LinkCounter::dropped_down);
            pool_put(b);
            return;
        }
        if (chance(c.loss)) {
            l.stats.inc(LinkCounter::dropped_loss);
            pool_put(b);
            return;
        }
        const std::uint64_t now_ps = rel_ps(now_ns);
        const std::uint64_t queued = backlog_bytes(l, now_ps);
        if ((c.queue_bytes != 0 && queued + b->len > c.queue_bytes) || !ring_has_room(l)) {
            l.stats.inc(LinkCounter::dropped_queue_full);
            pool_put(b);
            return;
        }
        const Layout ly = layout_of(*b);
        b->ecn_ce = ecn_of(*b, ly) == static_cast<int>(kEcnCe);
        if (c.ecn && detail::red_decides_mark(rng, c.kmin_bytes, c.kmax_bytes, c.pmax, queued) &&
            mark_ce(*b, ly))
            l.stats.inc(LinkCounter::ecn_marked);
        if (chance(c.corrupt)) {
            detail::corrupt_one_bit(rng, *b, ly);
            l.stats.inc(LinkCounter::corrupted);
        }

        // Serialise after whatever is queued, then propagate.
        std::uint64_t finish_ps = std::max(now_ps, *l.busy_until_ps);
        finish_ps += detail::serialisation_ps(b->len, c.bandwidth_gbps);
        *l.busy_until_ps = finish_ps;
        std::uint64_t deliver = t0_ns + (finish_ps + 999u) / 1000u + c.delay_ns;
        deliver = std::max({deliver, now_ns, l.last_deliver_ns}); // FIFO even if delay shrank
        l.last_deliver_ns = deliver;

        bool held = false;
        std::uint16_t hold_left = 0;
        if (c.reorder_max_frames > 0 && chance(c.reorder)) {
            held = true;
            hold_left = static_cast<std::uint16_t>(1 + rng() % c.reorder_max_frames);
            l.stats.inc(LinkCounter::reordered);
        }
        push(l, b, deliver, held, hold_left, deliver + c.reorder_max_ns);

        if (chance(c.duplicate)) {
            PktBuf* dup = ring_has_room(l) ? copy_of(*b) : nullptr;
            if (dup == nullptr) {
                l.stats.inc(LinkCounter::dropped_no_buffer);
            } else {
                push(l, dup, deliver, false, 0, deliver);
                l.stats.inc(LinkCounter::duplicated);
            }
        }
    }

    std::uint16_t tx(std::uint32_t e, std::uint32_t p, PktBuf** in, std::uint16_t n) noexcept {
        PortStats& ps = pstats(e, p);
        const std::uint64_t now = clock->now_ns();
        for (std::uint16_t i = 0; i < n; ++i) {
            PktBuf* b = in[i];
            ps.inc(PortCounter::tx_frames);
            if (!owned(b)) {
                ps.inc(PortCounter::tx_invalid);
                continue;
            }
            if (b->len < kEthHeader || !frame_inside_slot(*b)) {
                ps.inc(PortCounter::tx_invalid);
                pool_put(b);
                continue;
            }
            const std::uint8_t* dst = b->data;
            if ((dst[0] & 1u) != 0) {
                // Group address: one copy per other endpoint, the original to the last of them.
                const std::uint32_t last = e == n_endpoints - 1 ? n_endpoints - 2 : n_endpoints - 1;
                for (std::uint32_t t = 0; t < last; ++t) {
                    if (t == e) continue;
                    Link& l = link(e, t, p);
                    PktBuf* c = copy_of(*b);
                    if (c == nullptr) {
                        l.stats.inc(LinkCounter::tx_frames);
                        l.stats.inc(LinkCounter::dropped_no_buffer);
                        continue;
                    }
                    send_on_link(l, c, now);
                }
                send_on_link(link(e, last, p), b, now);
                continue;
            }
            if (dst[0] != 0x02 || dst[1] != 0 || dst[2] != 0 || dst[3] != 0 ||
                dst[4] >= n_endpoints || dst[5] != p) {
                ps.inc(PortCounter::tx_no_route);
                pool_put(b);
                continue;
            }
            send_on_link(link(e, dst[4], p), b, now);
        }
        return n;
    }

    // ---- receive ----
    /** Position of the frame @p l would deliver next at @p now, or tail if none is receivable. */
    std::uint64_t candidate(const Link& l, std::uint64_t now) const noexcept {
        for (std::uint64_t pos = l.head; pos != l.tail; ++pos) {
            const Entry& en = l.ring[pos & (slots - 1)];
            if (en.state == EntryState::gone) continue;
            if (en.state == EntryState::held && en.hold_left > 0 && now < en.hold_until_ns)
                continue;
            return en.deliver_ns <= now ? pos : l.tail;
        }
        return l.tail;
    }

    /** Removes the entry at @p pos from @p l, counting it against frames held before it. */
    PktBuf* take(Link& l, std::uint64_t pos) noexcept {
        for (std::uint64_t q = l.head; q != pos; ++q) {
            Entry& en = l.ring[q & (slots - 1)];
            if (en.state == EntryState::held && en.hold_left > 0) --en.hold_left;
        }
        Entry& en = l.ring[pos & (slots - 1)];
        PktBuf* b = en.buf;
        en.buf = nullptr;
        en.state = EntryState::gone;
        while (l.head != l.tail && l.ring[l.head & (slots - 1)].state == EntryState::gone)
            ++l.head;
        --inflight;
        return b;
    }

    std::uint16_t rx(std::uint32_t e, std::uint32_t p, PktBuf** out, std::uint16_t n) noexcept {
        const std::uint64_t now = clock->now_ns();
        std::uint16_t got = 0;
        while (got < n) {
            // Merge the incoming links by (delivery time, send order).
            Link* best = nullptr;
            std::uint64_t best_pos = 0;
            for (std::uint32_t from = 0; from < n_endpoints; ++from) {
                Link& l = link(from, e, p);
                const std::uint64_t pos = candidate(l, now);
                if (pos == l.tail) continue;
                if (best != nullptr) {
                    const Entry& a = l.ring[pos & (slots - 1)];
                    const Entry& b = best->ring[best_pos & (slots - 1)];
                    if (a.deliver_ns > b.deliver_ns ||
                        (a.deliver_ns == b.deliver_ns && a.seq > b.seq))
                        continue;
                }
                best = &l;
                best_pos = pos;
            }
            if (best == nullptr) break;
            PktBuf* b = take(*best, best_pos);
            if (!best->cfg.up) {
                best->stats.inc(LinkCounter::dropped_down);
                pool_put(b);
                continue;
            }
            b->port = static_cast<std::uint8_t>(p);
            best->stats.inc(LinkCounter::delivered);
            out[got++] = b;
        }
        pstats(e, p).inc(PortCounter::rx_frames, got);
        return got;
    }

    std::uint64_t next_event() const noexcept {
        std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
        for (const Link& l : links) {
            for (std::uint64_t pos = l.head; pos != l.tail; ++pos) {
                const Entry& en = l.ring[pos & (slots - 1)];
                if (en.state == EntryState::gone) continue;
                if (en.state == EntryState::held && en.hold_left > 0) {
                    best = std::min(best, en.hold_until_ns); // released by time at the latest
                    continue;
                }
                best = std::min(best, en.deliver_ns); // later entries are no earlier
                break;
            }
        }
        return best == std::numeric_limits<std::uint64_t>::max() ? 0 : best;
    }
};

// ---- SimPort: thin forwarding to the fabric ----

std::uint16_t SimPort::alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    std::uint16_t got = 0;
    while (got < n) {
        PktBuf* b = fabric_->pool_get();
        if (b == nullptr) break;
        b->port = static_cast<std::uint8_t>(plane_);
        bufs[got++] = b;
    }
    if (got < n) fabric_->pstats(endpoint_, plane_).inc(PortCounter::alloc_failed, n - got);
    return got;
}

void SimPort::free_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    for (std::uint16_t i = 0; i < n; ++i) {
        if (!fabric_->owned(bufs[i])) {
            fabric_->pstats(endpoint_, plane_).inc(PortCounter::free_invalid);
            continue;
        }
        fabric_->pool_put(bufs[i]);
    }
}

std::uint16_t SimPort::tx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    return fabric_->tx(endpoint_, plane_, bufs, n);
}

std::uint16_t SimPort::rx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    return fabric_->rx(endpoint_, plane_, bufs, n);
}

std::uint32_t SimPort::max_frame() const noexcept {
    return fabric_->capacity;
}

bool SimPort::link_up() const noexcept {
    for (std::uint32_t to = 0; to < fabric_->n_endpoints; ++to)
        if (to != endpoint_ && fabric_->link(endpoint_, to, plane_).cfg.up) return true;
    return false;
}

// ---- Fabric ----

namespace {

const FabricConfig& validated(Clock* clock, const FabricConfig& c) {
    if (clock == nullptr) throw std::invalid_argument("sim::Fabric: null clock");
    if (c.endpoints < 2 || c.endpoints > kMaxEndpoints)
        throw std::invalid_argument("sim::Fabric: endpoints must be 2..255");
    if (c.planes < 1 || c.planes > kMaxPlanes)
        throw std::invalid_argument("sim::Fabric: planes must be 1..4");
    if (c.pool_buffers < 1) throw std::invalid_argument("sim::Fabric: pool_buffers must be >= 1");
    if (c.buffer_capacity < 64)
        throw std::invalid_argument("sim::Fabric: buffer_capacity must be >= 64");
    if (c.link_slots < 1 || c.link_slots > (1u << 24))
        throw std::invalid_argument("sim::Fabric: link_slots must be 1..2^24");
    return c;
}

} // namespace

Fabric::Fabric(Clock* clock, const FabricConfig& config)
    : impl_(std::make_unique<Impl>(clock, validated(clock, config))) {}

namespace {
FabricConfig shorthand(std::uint64_t seed, std::uint32_t endpoints, std::uint32_t planes) {
    FabricConfig c;
    c.seed = seed;
    c.endpoints = endpoints;
    c.planes = planes;
    return c;
}
} // namespace

Fabric::Fabric(Clock* clock, std::uint64_t seed, std::uint32_t endpoints, std::uint32_t planes)
    : Fabric(clock, shorthand(seed, endpoints, planes)) {}

Fabric::~Fabric() = default;

std::uint32_t Fabric::endpoints() const noexcept {
    return impl_->n_endpoints;
}
std::uint32_t Fabric::planes() const noexcept {
    return impl_->n_planes;
}

PortDriver& Fabric::port(std::uint32_t endpoint, std::uint32_t plane) noexcept {
    endpoint = std::min(endpoint, impl_->n_endpoints - 1);
    plane = std::min(plane, impl_->n_planes - 1);
    return impl_->ports[static_cast<std::size_t>(endpoint) * impl_->n_planes + plane];
}

wire::MacAddr Fabric::mac(std::uint32_t endpoint, std::uint32_t plane) noexcept {
    return {0x02,
            0x00,
            0x00,
            0x00,
            static_cast<std::uint8_t>(endpoint),
            static_cast<std::uint8_t>(plane)};
}

namespace {
// Clamp link coordinates so that a bad argument cannot index outside the tables.
struct LinkIndex {
    std::uint32_t from, to, plane;
};
LinkIndex clamp(const Fabric& f, std::uint32_t from, std::uint32_t to,
                std::uint32_t plane) noexcept {
    return {std::min(from, f.endpoints() - 1), std::min(to, f.endpoints() - 1),
            std::min(plane, f.planes() - 1)};
}
} // namespace

const LinkConfig& Fabric::link_config(std::uint32_t from, std::uint32_t to,
                                      std::uint32_t plane) const noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    return impl_->link(i.from, i.to, i.plane).cfg;
}

void Fabric::set_link_config(std::uint32_t from, std::uint32_t to, std::uint32_t plane,
                             const LinkConfig& config) noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    impl_->link(i.from, i.to, i.plane).cfg = config;
}

void Fabric::set_all_links(const LinkConfig& config) noexcept {
    for (Link& l : impl_->links)
        l.cfg = config;
}

void Fabric::set_link_up(std::uint32_t from, std::uint32_t to, std::uint32_t plane,
                         bool up) noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    impl_->link(i.from, i.to, i.plane).cfg.up = up;
}

void Fabric::set_port_up(std::uint32_t endpoint, std::uint32_t plane, bool up) noexcept {
    const LinkIndex i = clamp(*this, endpoint, endpoint, plane);
    for (std::uint32_t other = 0; other < impl_->n_endpoints; ++other) {
        impl_->link(i.from, other, i.plane).cfg.up = up;
        impl_->link(other, i.from, i.plane).cfg.up = up;
    }
}

const LinkStats& Fabric::link_stats(std::uint32_t from, std::uint32_t to,
                                    std::uint32_t plane) const noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    return impl_->link(i.from, i.to, i.plane).stats;
}

const PortStats& Fabric::port_stats(std::uint32_t endpoint, std::uint32_t plane) const noexcept {
    const LinkIndex i = clamp(*this, endpoint, endpoint, plane);
    return impl_->pstats(i.from, i.plane);
}

std::uint64_t Fabric::next_event_ns() const noexcept {
    return impl_->next_event();
}
std::uint32_t Fabric::in_flight() const noexcept {
    return impl_->inflight;
}
std::uint32_t Fabric::pool_free() const noexcept {
    return impl_->free_top;
}

} // namespace droce::sim
