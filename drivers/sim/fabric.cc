/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The sim fabric. Control path: the constructor (the only allocation) and the config setters.
 * Datapath: the ports' burst functions, which work on the links' fixed-capacity hold rings and the
 * preallocated pool.
 *
 * Each directed link is a detail::Link (sim/link.h): the impairment pipeline and hold ring the
 * impairment stage uses too, with frames paced at the link bandwidth. What is the fabric's own:
 * routing by MAC, broadcast copies, the pool, and the receive side, which merges the rings of the
 * links into a port by (delivery time, send order) and drops what was in flight on a link that is
 * down when it would be delivered.
 */
#include "sim/fabric.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "sim/link.h"

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

struct Fabric::Impl final : detail::FramePool {
    Clock* clock;
    std::uint32_t n_endpoints;
    std::uint32_t n_planes;
    std::uint32_t capacity;
    std::uint32_t slots;
    detail::LinkContext ctx;

    // Pool: buffer i is bufs[i] with data at mem[i * capacity]; free_stack[0..free_top) are free.
    std::uint32_t n_bufs;
    std::unique_ptr<std::uint8_t[]> mem;
    std::vector<PktBuf> bufs;
    std::vector<std::uint32_t> free_stack;
    std::vector<std::uint8_t> is_free;
    std::uint32_t free_top = 0;

    std::vector<detail::Entry> entries;
    std::vector<detail::Link> links; ///< index (plane * E + from) * E + to
    std::vector<SimPort> ports;      ///< index endpoint * P + plane
    std::vector<PortStats> port_stats;
    std::vector<detail::EgressQueue> egress_queues; ///< per destination port, for shared_egress
    /** Per port (endpoint * P + plane): the link whose queue paused it (PFC), or nullptr. */
    std::vector<detail::Link*> paused_by;
    std::vector<std::uint64_t> paused_since_ns;

    Impl(Clock* c, const FabricConfig& cfg)
        : clock(c), n_endpoints(cfg.endpoints), n_planes(cfg.planes), capacity(cfg.buffer_capacity),
          slots(std::bit_ceil(cfg.link_slots)), ctx(cfg.seed, c->now_ns(), *this),
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
        links.reserve(n_links);
        egress_queues.resize(static_cast<std::size_t>(n_endpoints) * n_planes);
        for (std::size_t i = 0; i < n_links; ++i) {
            detail::Link& l = links.emplace_back(ctx, entries.data() + i * slots, slots, cfg.link,
                                                 detail::Pacing::serialise);
            const std::size_t to = i % n_endpoints;
            const std::size_t plane = i / (static_cast<std::size_t>(n_endpoints) * n_endpoints);
            if (cfg.shared_egress) l.share_egress(&egress_queues[to * n_planes + plane]);
        }
        ports.reserve(static_cast<std::size_t>(n_endpoints) * n_planes);
        for (std::uint32_t e = 0; e < n_endpoints; ++e)
            for (std::uint32_t p = 0; p < n_planes; ++p)
                ports.emplace_back(this, e, p);
        port_stats.resize(ports.size());
        paused_by.assign(ports.size(), nullptr);
        paused_since_ns.assign(ports.size(), 0);
    }

    /**
     * PFC: true while port (@p e, @p p) stays paused at @p now; ends a pause whose queue has
     * drained to its XON level.
     */
    bool paused(std::uint32_t e, std::uint32_t p, std::uint64_t now) noexcept {
        const std::size_t i = port_index(e, p);
        detail::Link* by = paused_by[i];
        if (by == nullptr) return false;
        // XON goes to every port the queue paused at once, when it drains to the XON level, even
        // if another sender filled it again before this one came to send.
        if (by->egress().xon_reached_ns <= paused_since_ns[i] &&
            by->backlog(now) > by->config.pfc_xon_bytes)
            return true;
        pstats(e, p).inc(PortCounter::pfc_paused_ns, now - paused_since_ns[i]);
        paused_by[i] = nullptr;
        return false;
    }

    detail::Link& link(std::uint32_t from, std::uint32_t to, std::uint32_t plane) noexcept {
        return links[(static_cast<std::size_t>(plane) * n_endpoints + from) * n_endpoints + to];
    }
    /** Index of port (@p e, @p p) in ports, port_stats, paused_by and paused_since_ns. */
    std::size_t port_index(std::uint32_t e, std::uint32_t p) const noexcept {
        return static_cast<std::size_t>(e) * n_planes + p;
    }
    PortStats& pstats(std::uint32_t e, std::uint32_t p) noexcept {
        return port_stats[port_index(e, p)];
    }

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

    // ---- detail::FramePool: broadcast copies, and the links' duplicates and drops ----
    PktBuf* copy_of(const PktBuf& src) noexcept override {
        PktBuf* c = pool_get();
        if (c == nullptr) return nullptr;
        std::memcpy(c->data, src.data, src.len);
        c->len = src.len;
        c->port = src.port;
        c->ecn_ce = src.ecn_ce;
        return c;
    }
    void release(PktBuf* b) noexcept override { pool_put(b); }

    // ---- transmit ----
    std::uint16_t tx(std::uint32_t e, std::uint32_t p, PktBuf** in, std::uint16_t n) noexcept {
        PortStats& ps = pstats(e, p);
        const std::uint64_t now = clock->now_ns();
        if (n != 0 && paused(e, p, now)) {
            ps.inc(PortCounter::tx_paused);
            return 0;
        }
        for (std::uint16_t i = 0; i < n; ++i) {
            PktBuf* b = in[i];
            ps.inc(PortCounter::tx_frames);
            if (!owned(b)) {
                ps.inc(PortCounter::tx_invalid);
                continue;
            }
            if (b->len < sizeof(wire::EthHdr) || !frame_inside_slot(*b)) {
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
                    detail::Link& l = link(e, t, p);
                    PktBuf* c = copy_of(*b);
                    if (c == nullptr) {
                        l.stats.inc(LinkCounter::tx_frames);
                        l.stats.inc(LinkCounter::dropped_no_buffer);
                        continue;
                    }
                    l.offer(c, now);
                }
                link(e, last, p).offer(b, now);
                continue;
            }
            if (dst[0] != 0x02 || dst[1] != 0 || dst[2] != 0 || dst[3] != 0 ||
                dst[4] >= n_endpoints || dst[5] != p) {
                ps.inc(PortCounter::tx_no_route);
                pool_put(b);
                continue;
            }
            detail::Link& l = link(e, dst[4], p);
            l.offer(b, now);
            if (l.config.pfc_xoff_bytes != 0 && l.backlog(now) > l.config.pfc_xoff_bytes) {
                l.stats.inc(LinkCounter::pfc_pauses);
                const std::size_t pi = port_index(e, p);
                paused_by[pi] = &l;
                paused_since_ns[pi] = now;
                return static_cast<std::uint16_t>(i + 1);
            }
        }
        return n;
    }

    // ---- receive ----
    std::uint16_t rx(std::uint32_t e, std::uint32_t p, PktBuf** out, std::uint16_t n) noexcept {
        const std::uint64_t now = clock->now_ns();
        std::uint16_t got = 0;
        while (got < n) {
            // Merge the incoming links by (delivery time, send order).
            detail::Link* best = nullptr;
            std::uint64_t best_pos = 0;
            for (std::uint32_t from = 0; from < n_endpoints; ++from) {
                detail::Link& l = link(from, e, p);
                std::uint64_t pos = 0;
                if (l.ring.due(now, 1, &pos) == 0) continue;
                if (best != nullptr) {
                    const detail::Entry& a = l.ring.at(pos);
                    const detail::Entry& b = best->ring.at(best_pos);
                    if (a.deliver_ns > b.deliver_ns ||
                        (a.deliver_ns == b.deliver_ns && a.seq > b.seq))
                        continue;
                }
                best = &l;
                best_pos = pos;
            }
            if (best == nullptr) break;
            PktBuf* b = best->take(best_pos);
            if (!best->config.up) { // in flight when the link went down
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
        std::uint64_t best = detail::kNever;
        for (const detail::Link& l : links)
            best = std::min(best, l.ring.next_event_ns(0));
        // A pause whose queue has drained ends when its port next sends: only one still to end
        // is an event.
        const std::uint64_t now = clock->now_ns();
        for (const detail::Link* by : paused_by) {
            if (by == nullptr) continue;
            const std::uint64_t resume = by->drained_to_ns(by->config.pfc_xon_bytes);
            if (resume > now) best = std::min(best, resume);
        }
        return best == detail::kNever ? 0 : best;
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
        if (to != endpoint_ && fabric_->link(endpoint_, to, plane_).config.up) return true;
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
    return impl_->link(i.from, i.to, i.plane).config;
}

void Fabric::set_link_config(std::uint32_t from, std::uint32_t to, std::uint32_t plane,
                             const LinkConfig& config) noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    impl_->link(i.from, i.to, i.plane).config = config;
}

void Fabric::set_all_links(const LinkConfig& config) noexcept {
    for (detail::Link& l : impl_->links)
        l.config = config;
}

void Fabric::set_link_up(std::uint32_t from, std::uint32_t to, std::uint32_t plane,
                         bool up) noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    impl_->link(i.from, i.to, i.plane).config.up = up;
}

void Fabric::set_port_up(std::uint32_t endpoint, std::uint32_t plane, bool up) noexcept {
    const LinkIndex i = clamp(*this, endpoint, endpoint, plane);
    for (std::uint32_t other = 0; other < impl_->n_endpoints; ++other) {
        impl_->link(i.from, other, i.plane).config.up = up;
        impl_->link(other, i.from, i.plane).config.up = up;
    }
}

const LinkStats& Fabric::link_stats(std::uint32_t from, std::uint32_t to,
                                    std::uint32_t plane) const noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    return impl_->link(i.from, i.to, i.plane).stats;
}

std::uint64_t Fabric::egress_backlog_bytes(std::uint32_t from, std::uint32_t to,
                                           std::uint32_t plane) const noexcept {
    const LinkIndex i = clamp(*this, from, to, plane);
    return impl_->link(i.from, i.to, i.plane).backlog(impl_->clock->now_ns());
}

const PortStats& Fabric::port_stats(std::uint32_t endpoint, std::uint32_t plane) const noexcept {
    const LinkIndex i = clamp(*this, endpoint, endpoint, plane);
    return impl_->pstats(i.from, i.plane);
}

std::uint64_t Fabric::next_event_ns() const noexcept {
    return impl_->next_event();
}
std::uint32_t Fabric::in_flight() const noexcept {
    return impl_->ctx.in_flight;
}
std::uint32_t Fabric::pool_free() const noexcept {
    return impl_->free_top;
}

} // namespace droce::sim
