/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The impairment stage. Control path: the constructor (the only allocation), set_config, the spec
 * parser. Datapath: the burst functions, which work on the fixed ring and fixed arrays.
 *
 * The stage is one detail::Link (sim/link.h), the impairment pipeline and hold ring of a fabric
 * link, that does not pace frames (its sink does). What is the stage's own: the sink (the inner
 * tx_burst, or the caller's rx array), the buffers (the inner port's, drops freed in batches), and
 * the way frames leave: in waves of up to kBatch that the sink may take a prefix of, and all
 * dropped at once while the link is down.
 */
#include "sim/impair.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "sim/link.h"

namespace droce::sim {

std::string_view to_string(ImpairSide s) noexcept {
    switch (s) {
    case ImpairSide::tx:
        return "tx";
    case ImpairSide::rx:
        return "rx";
    }
    return "unknown";
}

namespace {

/** Frames per wave towards the sink, and dropped frames freed per free_bulk() call. */
constexpr std::uint16_t kBatch = 32;

} // namespace

struct ImpairedPort::Impl final : detail::FramePool {
    PortDriver& inner;
    Clock* clock;
    /** As constructed or last set; the impairments in force are link.config and
     *  link.ecn_mark_probability, which apply() keeps equal to it. */
    ImpairConfig cfg;
    detail::LinkContext ctx;
    std::unique_ptr<detail::Entry[]> entries;
    detail::Link link;

    PktBuf* drops[kBatch] = {};
    std::uint16_t n_drops = 0;

    Impl(PortDriver& in, Clock* c, const ImpairConfig& config)
        : inner(in), clock(c), cfg(config), ctx(config.seed, c->now_ns(), *this),
          entries(std::make_unique<detail::Entry[]>(std::bit_ceil(config.ring_frames))),
          link(ctx, entries.get(), std::bit_ceil(config.ring_frames), config.link,
               detail::Pacing::model_queue) {
        link.ecn_mark_probability = config.ecn_mark_probability;
    }

    ~Impl() {
        link.drop_in_flight(); // counted as dropped_down, but the counters go with the stage
        flush_drops();
    }

    void apply(const ImpairConfig& config) noexcept {
        cfg = config;
        link.config = config.link;
        link.ecn_mark_probability = config.ecn_mark_probability;
    }

    // ---- detail::FramePool: duplicates from the inner port, drops back to it in batches ----
    PktBuf* copy_of(const PktBuf& src) noexcept override {
        PktBuf* c = nullptr;
        if (inner.alloc_bulk(&c, 1) != 1 || c == nullptr) return nullptr;
        if (c->capacity < src.len) {
            inner.free_bulk(&c, 1);
            return nullptr;
        }
        std::memcpy(c->data, src.data, src.len);
        c->len = src.len;
        c->port = src.port;
        c->ecn_ce = src.ecn_ce;
        return c;
    }
    void release(PktBuf* b) noexcept override {
        drops[n_drops++] = b;
        if (n_drops == kBatch) flush_drops();
    }
    void flush_drops() noexcept {
        if (n_drops != 0) inner.free_bulk(drops, n_drops);
        n_drops = 0;
    }

    /**
     * Hands frames that may leave to @p sink (std::uint16_t(PktBuf**, std::uint16_t) noexcept,
     * returning how many it took, a prefix), at most @p budget of them, in waves of up to kBatch:
     * a wave never passes a held frame by more than its hold allows, so the sink may take all of
     * it. Returns how many left. While the link is down every frame in the ring is dropped instead.
     */
    template <typename Sink>
    std::uint32_t drain(std::uint64_t now, std::uint32_t budget, Sink&& sink) noexcept {
        if (!link.config.up) {
            link.drop_in_flight();
            return 0;
        }
        std::uint32_t out = 0;
        PktBuf* batch[kBatch];
        std::uint64_t where[kBatch];
        while (out < budget && link.ring.size() != 0) {
            const auto cap =
                static_cast<std::uint16_t>(std::min<std::uint32_t>(kBatch, budget - out));
            const std::uint16_t cnt = link.ring.due(now, cap, where);
            if (cnt == 0) break;
            for (std::uint16_t i = 0; i < cnt; ++i)
                batch[i] = link.ring.at(where[i]).buf;
            const std::uint16_t took = std::min(sink(batch, cnt), cnt);
            for (std::uint16_t i = 0; i < took; ++i)
                (void)link.take(where[i]);
            link.stats.inc(LinkCounter::delivered, took);
            out += took;
            if (took < cnt) break;
        }
        return out;
    }

    std::uint32_t drain_to_inner(std::uint64_t now) noexcept {
        return drain(now, std::numeric_limits<std::uint32_t>::max(),
                     [this](PktBuf** b, std::uint16_t n) noexcept { return inner.tx_burst(b, n); });
    }

    std::uint16_t tx_impaired(PktBuf** bufs, std::uint16_t n) noexcept {
        const std::uint64_t now = clock->now_ns();
        (void)drain_to_inner(now);
        std::uint16_t taken = 0;
        while (taken < n) {
            if (link.ring.free_slots() == 0) {
                link.ring.release_oldest_if_held();
                if (drain_to_inner(now) == 0 && link.ring.free_slots() == 0)
                    break; // inner takes nothing, or the oldest frame is not due yet
                continue;
            }
            while (taken < n && link.ring.free_slots() != 0)
                link.offer(bufs[taken++], now);
            (void)drain_to_inner(now);
        }
        flush_drops();
        return taken;
    }

    std::uint16_t rx_impaired(PktBuf** out, std::uint16_t n) noexcept {
        const std::uint64_t now = clock->now_ns();
        auto to_caller = [&out](std::uint16_t& got) noexcept {
            return [&out, &got](PktBuf** b, std::uint16_t cnt) noexcept {
                std::copy(b, b + cnt, out + got);
                got = static_cast<std::uint16_t>(got + cnt);
                return cnt;
            };
        };
        std::uint16_t got = 0;
        (void)drain(now, n, to_caller(got));
        if (got < n) {
            if (link.ring.free_slots() == 0) {
                link.ring.release_oldest_if_held();
                (void)drain(now, n - got, to_caller(got));
            }
            // Receive into the unused tail of the caller's array, impair into the ring, then
            // hand out what may leave (over the same array positions).
            const auto want = static_cast<std::uint16_t>(std::min<std::uint32_t>(
                static_cast<std::uint32_t>(n - got), link.ring.free_slots()));
            const std::uint16_t k = want != 0 ? inner.rx_burst(out + got, want) : 0;
            for (std::uint16_t i = 0; i < k; ++i)
                link.offer(out[got + i], now);
            (void)drain(now, n - got, to_caller(got));
        }
        flush_drops();
        return got;
    }
};

// ---- ImpairedPort ----

namespace {
PortDriver& checked(PortDriver& inner, Clock* clock, const ImpairConfig& c) {
    if (clock == nullptr) throw std::invalid_argument("sim::ImpairedPort: null clock");
    if (c.ring_frames < 1 || c.ring_frames > kMaxImpairRing)
        throw std::invalid_argument("sim::ImpairedPort: ring_frames must be 1..65536");
    return inner;
}
} // namespace

ImpairedPort::ImpairedPort(PortDriver& inner, Clock* clock, const ImpairConfig& config)
    : inner_(&checked(inner, clock, config)), impl_(std::make_unique<Impl>(inner, clock, config)) {}

ImpairedPort::~ImpairedPort() = default;

std::uint16_t ImpairedPort::alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    return inner_->alloc_bulk(bufs, n);
}

void ImpairedPort::free_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    inner_->free_bulk(bufs, n);
}

std::uint16_t ImpairedPort::tx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    if (impl_->cfg.side == ImpairSide::rx) return inner_->tx_burst(bufs, n);
    return impl_->tx_impaired(bufs, n);
}

std::uint16_t ImpairedPort::rx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    if (impl_->cfg.side == ImpairSide::rx) return impl_->rx_impaired(bufs, n);
    poll();
    return inner_->rx_burst(bufs, n);
}

std::uint32_t ImpairedPort::max_frame() const noexcept {
    return inner_->max_frame();
}

bool ImpairedPort::link_up() const noexcept {
    return impl_->link.config.up && inner_->link_up();
}

void ImpairedPort::poll() noexcept {
    if (impl_->cfg.side == ImpairSide::tx)
        (void)impl_->drain_to_inner(impl_->clock->now_ns());
    else if (!impl_->link.config.up)
        impl_->link.drop_in_flight();
    impl_->flush_drops();
}

const ImpairConfig& ImpairedPort::config() const noexcept {
    return impl_->cfg;
}

void ImpairedPort::set_config(const ImpairConfig& config) noexcept {
    ImpairConfig c = config;
    c.seed = impl_->cfg.seed;
    c.side = impl_->cfg.side;
    c.ring_frames = impl_->cfg.ring_frames;
    impl_->apply(c);
}

void ImpairedPort::set_up(bool up) noexcept {
    ImpairConfig c = impl_->cfg;
    c.link.up = up;
    impl_->apply(c);
}

const LinkStats& ImpairedPort::stats() const noexcept {
    return impl_->link.stats;
}

std::uint32_t ImpairedPort::queued() const noexcept {
    return impl_->link.ring.size();
}

std::uint32_t ImpairedPort::held() const noexcept {
    return impl_->link.ring.held();
}

std::uint64_t ImpairedPort::next_release_ns() const noexcept {
    const std::uint64_t t = impl_->link.ring.next_event_ns(impl_->clock->now_ns());
    return t == detail::kNever ? 0 : t;
}

// ---- spec ----

namespace {

enum class Key : std::uint8_t {
    loss,
    reorder,
    reorder_frames,
    reorder_ns,
    delay,
    dup,
    corrupt,
    ecn,
    bw,
    queue,
    red,
    red_kmin,
    red_kmax,
    red_pmax,
    trim,
    trim_full,
    trim_keep,
    trim_dscp,
    seed,
    side,
    up,
    ring,
    ports,
    count_
};

struct KeyName {
    std::string_view name;
    Key key;
};

constexpr KeyName kKeys[] = {
    {"loss", Key::loss},
    {"reorder", Key::reorder},
    {"reorder_frames", Key::reorder_frames},
    {"reorder_ns", Key::reorder_ns},
    {"delay", Key::delay},
    {"delay_ns", Key::delay},
    {"dup", Key::dup},
    {"duplicate", Key::dup},
    {"corrupt", Key::corrupt},
    {"ecn", Key::ecn},
    {"bw", Key::bw},
    {"bandwidth_gbps", Key::bw},
    {"queue", Key::queue},
    {"queue_bytes", Key::queue},
    {"red", Key::red},
    {"red_kmin", Key::red_kmin},
    {"red_kmax", Key::red_kmax},
    {"red_pmax", Key::red_pmax},
    {"trim", Key::trim},
    {"trim_full", Key::trim_full},
    {"trim_keep", Key::trim_keep},
    {"trim_dscp", Key::trim_dscp},
    {"seed", Key::seed},
    {"side", Key::side},
    {"up", Key::up},
    {"ring", Key::ring},
    {"ports", Key::ports},
};

/** @p s quoted, at most 32 characters of it, non-printable bytes shown as '?'. */
std::string quoted(std::string_view s) {
    constexpr std::size_t kMax = 32;
    std::string q = "'";
    for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
        const auto ch = static_cast<unsigned char>(s[i]);
        q += ch >= 0x20 && ch < 0x7f ? static_cast<char>(ch) : '?';
    }
    if (s.size() > kMax) q += "...";
    q += "'";
    return q;
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

bool parse_double(std::string_view v, double& out) noexcept {
    if (v.empty()) return false;
    double d = 0.0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
    if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(d)) return false;
    out = d;
    return true;
}

bool parse_u64(std::string_view v, std::uint64_t max, std::uint64_t& out) noexcept {
    if (v.empty()) return false;
    std::uint64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x, 10);
    if (ec != std::errc() || p != v.data() + v.size() || x > max) return false;
    out = x;
    return true;
}

bool parse_bool(std::string_view v, bool& out) noexcept {
    if (v == "1" || v == "true") {
        out = true;
        return true;
    }
    if (v == "0" || v == "false") {
        out = false;
        return true;
    }
    return false;
}

std::string bad_value(std::string_view key, std::string_view value, std::string_view expected) {
    return "impair spec: bad value " + quoted(value) + " for key " + quoted(key) + " (expected " +
           std::string(expected) + ")";
}

} // namespace

std::string parse_impair_spec(std::string_view spec, ImpairConfig& out) {
    ImpairConfig c = out;
    bool seen[static_cast<std::size_t>(Key::count_)] = {};
    bool red_given = false;
    bool red_explicit = false;
    bool red_value = false;
    if (trim(spec).empty()) return {};
    while (true) {
        const std::size_t comma = spec.find(',');
        const std::string_view item = trim(spec.substr(0, comma));
        if (item.empty()) return "impair spec: empty item (stray comma?)";
        const std::size_t eq = item.find('=');
        if (eq == std::string_view::npos)
            return "impair spec: missing '=' after key " + quoted(item);
        const std::string_view name = trim(item.substr(0, eq));
        const std::string_view v = trim(item.substr(eq + 1));
        const KeyName* k = nullptr;
        for (const KeyName& kn : kKeys)
            if (kn.name == name) k = &kn;
        if (k == nullptr)
            return "impair spec: unknown key " + quoted(name) +
                   " (known: loss reorder reorder_frames reorder_ns delay dup corrupt ecn bw "
                   "queue red red_kmin red_kmax red_pmax trim trim_full trim_keep trim_dscp seed "
                   "side up ring)";
        bool& was = seen[static_cast<std::size_t>(k->key)];
        if (was) return "impair spec: key " + quoted(name) + " given twice";
        was = true;

        double d = 0.0;
        std::uint64_t u = 0;
        switch (k->key) {
        case Key::loss:
        case Key::reorder:
        case Key::dup:
        case Key::corrupt:
        case Key::ecn:
        case Key::trim:
        case Key::red_pmax: {
            if (!parse_double(v, d) || d < 0.0 || d > 1.0)
                return bad_value(name, v, "a probability 0..1");
            switch (k->key) {
            case Key::loss:
                c.link.loss = d;
                break;
            case Key::reorder:
                c.link.reorder = d;
                break;
            case Key::dup:
                c.link.duplicate = d;
                break;
            case Key::corrupt:
                c.link.corrupt = d;
                break;
            case Key::ecn:
                c.ecn_mark_probability = d;
                break;
            case Key::trim:
                c.link.trim = d;
                break;
            default:
                c.link.pmax = d;
                red_given = true;
                break;
            }
            break;
        }
        case Key::bw:
            if (!parse_double(v, d) || d < 0.0 || d > 1e6)
                return bad_value(name, v, "Gb/s, 0 (infinite) to 1e6");
            c.link.bandwidth_gbps = d;
            break;
        case Key::reorder_frames:
            if (!parse_u64(v, 0xffff, u)) return bad_value(name, v, "frames, 0..65535");
            c.link.reorder_max_frames = static_cast<std::uint16_t>(u);
            break;
        case Key::reorder_ns:
            if (!parse_u64(v, std::numeric_limits<std::uint64_t>::max(), u))
                return bad_value(name, v, "ns, an unsigned integer");
            c.link.reorder_max_ns = u;
            break;
        case Key::delay:
            if (!parse_u64(v, std::numeric_limits<std::uint64_t>::max(), u))
                return bad_value(name, v, "ns, an unsigned integer");
            c.link.delay_ns = u;
            break;
        case Key::queue:
            if (!parse_u64(v, std::numeric_limits<std::uint64_t>::max(), u))
                return bad_value(name, v, "bytes, an unsigned integer (0 = unlimited)");
            c.link.queue_bytes = u;
            break;
        case Key::red_kmin:
        case Key::red_kmax:
            if (!parse_u64(v, std::numeric_limits<std::uint64_t>::max(), u))
                return bad_value(name, v, "bytes, an unsigned integer");
            (k->key == Key::red_kmin ? c.link.kmin_bytes : c.link.kmax_bytes) = u;
            red_given = true;
            break;
        case Key::red:
            if (!parse_bool(v, red_value)) return bad_value(name, v, "0, 1, true or false");
            red_explicit = true;
            break;
        case Key::trim_full:
            if (!parse_bool(v, c.link.trim_when_full))
                return bad_value(name, v, "0, 1, true or false");
            break;
        case Key::trim_keep:
            if (!parse_u64(v, 0xffff, u)) return bad_value(name, v, "bytes, 0..65535");
            c.link.trim_keep_bytes = static_cast<std::uint16_t>(u);
            break;
        case Key::trim_dscp:
            if (!parse_u64(v, 63, u)) return bad_value(name, v, "a DSCP, 0..63");
            c.link.trim_dscp = static_cast<std::uint8_t>(u);
            break;
        case Key::seed:
            if (!parse_u64(v, std::numeric_limits<std::uint64_t>::max(), u))
                return bad_value(name, v, "an unsigned 64-bit integer");
            c.seed = u;
            break;
        case Key::side:
            if (v == "tx")
                c.side = ImpairSide::tx;
            else if (v == "rx")
                c.side = ImpairSide::rx;
            else
                return bad_value(name, v, "tx or rx");
            break;
        case Key::up:
            if (!parse_bool(v, c.link.up)) return bad_value(name, v, "0, 1, true or false");
            break;
        case Key::ring:
            if (!parse_u64(v, kMaxImpairRing, u) || u < 1)
                return bad_value(name, v, "frames, 1..65536");
            c.ring_frames = static_cast<std::uint32_t>(u);
            break;
        case Key::ports: {
            if (v == "all") {
                c.port_mask = ~0u;
                break;
            }
            std::uint32_t mask = 0;
            std::string_view rest = v;
            for (;;) {
                const std::size_t plus = rest.find('+');
                if (!parse_u64(rest.substr(0, plus), 31, u))
                    return bad_value(name, v, "port numbers 0..31 joined by '+', or all");
                mask |= 1u << u;
                if (plus == std::string_view::npos) break;
                rest.remove_prefix(plus + 1);
            }
            c.port_mask = mask;
            break;
        }
        case Key::count_:
            break;
        }
        if (comma == std::string_view::npos) break;
        spec.remove_prefix(comma + 1);
    }
    if (red_given) c.link.ecn = true;
    if (red_explicit) c.link.ecn = red_value;
    if (c.link.ecn && c.link.kmin_bytes > c.link.kmax_bytes)
        return "impair spec: key 'red_kmin' must not exceed 'red_kmax' (" +
               std::to_string(c.link.kmin_bytes) + " > " + std::to_string(c.link.kmax_bytes) + ")";
    out = c;
    return {};
}

namespace {
std::string shortest(double d) {
    char buf[64];
    const auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), d);
    return ec == std::errc() ? std::string(buf, p) : std::string("0");
}
} // namespace

std::string to_spec(const ImpairConfig& c) {
    std::string s;
    s += "loss=" + shortest(c.link.loss);
    s += ",reorder=" + shortest(c.link.reorder);
    s += ",reorder_frames=" + std::to_string(c.link.reorder_max_frames);
    s += ",reorder_ns=" + std::to_string(c.link.reorder_max_ns);
    s += ",delay=" + std::to_string(c.link.delay_ns);
    s += ",dup=" + shortest(c.link.duplicate);
    s += ",corrupt=" + shortest(c.link.corrupt);
    s += ",ecn=" + shortest(c.ecn_mark_probability);
    s += ",bw=" + shortest(c.link.bandwidth_gbps);
    s += ",queue=" + std::to_string(c.link.queue_bytes);
    s += ",red_kmin=" + std::to_string(c.link.kmin_bytes);
    s += ",red_kmax=" + std::to_string(c.link.kmax_bytes);
    s += ",red_pmax=" + shortest(c.link.pmax);
    s += std::string(",red=") + (c.link.ecn ? "1" : "0");
    s += ",trim=" + shortest(c.link.trim);
    s += std::string(",trim_full=") + (c.link.trim_when_full ? "1" : "0");
    s += ",trim_keep=" + std::to_string(c.link.trim_keep_bytes);
    s += ",trim_dscp=" + std::to_string(c.link.trim_dscp);
    s += ",seed=" + std::to_string(c.seed);
    s += ",side=" + std::string(to_string(c.side));
    s += std::string(",up=") + (c.link.up ? "1" : "0");
    s += ",ring=" + std::to_string(c.ring_frames);
    if (c.port_mask == ~0u) {
        s += ",ports=all";
    } else {
        s += ",ports=";
        bool first = true;
        for (unsigned p = 0; p < 32; ++p) {
            if (!(c.port_mask & (1u << p))) continue;
            if (!first) s += '+';
            s += std::to_string(p);
            first = false;
        }
    }
    return s;
}

} // namespace droce::sim
