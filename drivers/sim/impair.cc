/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The impairment stage. Control path: the constructor (the only allocation), set_config, the spec
 * parser. Datapath: the burst functions, which work on the fixed ring and fixed arrays.
 *
 * The ring holds frames in the order they were impaired. A frame leaves when everything before it
 * has left or is held back; a held frame stays in its slot and is skipped, and each frame that
 * leaves from behind it counts one against its hold. Frames leave in waves: a wave collects up to
 * kBatch sendable frames from the head, but never more than a held frame it passed may still let
 * overtake it, hands them to the sink (the inner tx_burst, or the caller's rx array) and retires
 * the prefix the sink took. Slots left behind a held frame become tombstones that the head steps
 * over once the held frame is gone.
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

#include "sim/impair_common.h"

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

enum class SlotState : std::uint8_t { live, held, gone };

struct Slot {
    PktBuf* buf = nullptr;
    std::uint64_t hold_until_ns = 0; ///< held: released at this time at the latest
    std::uint16_t hold_left = 0;     ///< held: frames still to leave after it before it may
    SlotState state = SlotState::gone;
};

} // namespace

struct ImpairedPort::Impl {
    PortDriver& inner;
    Clock* clock;
    ImpairConfig cfg;
    std::mt19937_64 rng;
    LinkStats stats;

    std::uint32_t slots;
    std::unique_ptr<Slot[]> ring;
    std::uint64_t head = 0;   ///< first slot not yet gone
    std::uint64_t tail = 0;   ///< next slot to fill
    std::uint32_t queued = 0; ///< slots not gone
    std::uint32_t n_held = 0; ///< slots in state held

    std::uint64_t t0_ns;
    std::uint64_t busy_until_ps = 0; ///< modelled queue: end of serialisation, ps since t0_ns

    PktBuf* drops[kBatch] = {};
    std::uint16_t n_drops = 0;

    Impl(PortDriver& in, Clock* c, const ImpairConfig& config)
        : inner(in), clock(c), cfg(config), rng(config.seed),
          slots(std::bit_ceil(config.ring_frames)), ring(std::make_unique<Slot[]>(slots)),
          t0_ns(c->now_ns()) {}

    ~Impl() {
        for (std::uint64_t pos = head; pos != tail; ++pos) {
            Slot& s = slot(pos);
            if (s.state != SlotState::gone) drop(s.buf);
            s.state = SlotState::gone;
        }
        head = tail;
        flush_drops();
    }

    Slot& slot(std::uint64_t pos) noexcept { return ring[pos & (slots - 1)]; }
    const Slot& slot(std::uint64_t pos) const noexcept { return ring[pos & (slots - 1)]; }
    [[nodiscard]] std::uint32_t free_slots() const noexcept {
        return slots - static_cast<std::uint32_t>(tail - head);
    }

    // ---- buffers ----
    void flush_drops() noexcept {
        if (n_drops != 0) inner.free_bulk(drops, n_drops);
        n_drops = 0;
    }
    void drop(PktBuf* b) noexcept {
        drops[n_drops++] = b;
        if (n_drops == kBatch) flush_drops();
    }
    PktBuf* copy_of(const PktBuf& src) noexcept {
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

    // ---- ring ----
    void push(PktBuf* b, bool held, std::uint16_t hold_left, std::uint64_t hold_until_ns) noexcept {
        Slot& s = slot(tail++);
        s.buf = b;
        s.hold_left = hold_left;
        s.hold_until_ns = hold_until_ns;
        s.state = held ? SlotState::held : SlotState::live;
        ++queued;
        if (held) ++n_held;
    }

    /** Retires the slot at @p pos (it left), counting it against the held frames before it. */
    PktBuf* take(std::uint64_t pos) noexcept {
        if (n_held != 0) {
            for (std::uint64_t q = head; q != pos; ++q) {
                Slot& s = slot(q);
                if (s.state == SlotState::held && s.hold_left > 0) --s.hold_left;
            }
        }
        Slot& s = slot(pos);
        PktBuf* b = s.buf;
        if (s.state == SlotState::held) --n_held;
        s.buf = nullptr;
        s.state = SlotState::gone;
        --queued;
        while (head != tail && slot(head).state == SlotState::gone)
            ++head;
        return b;
    }

    /** Link down: every frame in the ring is dropped. */
    void drop_all_down() noexcept {
        for (std::uint64_t pos = head; pos != tail; ++pos) {
            Slot& s = slot(pos);
            if (s.state == SlotState::gone) continue;
            stats.inc(LinkCounter::dropped_down);
            drop(s.buf);
            s.buf = nullptr;
            s.state = SlotState::gone;
        }
        head = tail;
        queued = 0;
        n_held = 0;
    }

    /**
     * The ring is full: if its oldest frame is held back, release it now (early, which keeps the
     * reorder bound) so that the ring can move instead of waiting for reorder_max_ns.
     */
    void release_head_if_held() noexcept {
        if (head == tail) return;
        Slot& s = slot(head);
        if (s.state == SlotState::held) s.hold_left = 0;
    }

    /**
     * Hands frames that may leave to @p sink (std::uint16_t(PktBuf**, std::uint16_t) noexcept,
     * returning how many it took, a prefix), at most @p budget of them, in waves. Returns how many
     * left.
     */
    template <typename Sink>
    std::uint32_t drain(std::uint64_t now, std::uint32_t budget, Sink&& sink) noexcept {
        if (!cfg.link.up) {
            drop_all_down();
            return 0;
        }
        std::uint32_t out = 0;
        PktBuf* batch[kBatch];
        std::uint64_t where[kBatch];
        while (out < budget && queued != 0) {
            std::uint32_t cap = std::min<std::uint32_t>(kBatch, budget - out);
            std::uint16_t cnt = 0;
            for (std::uint64_t pos = head; pos != tail && cnt < cap; ++pos) {
                const Slot& s = slot(pos);
                if (s.state == SlotState::gone) continue;
                if (s.state == SlotState::held && s.hold_left > 0 && now < s.hold_until_ns) {
                    // Frames sent from here on overtake it: no more than it still allows.
                    cap = std::min<std::uint32_t>(cap, cnt + s.hold_left);
                    continue;
                }
                batch[cnt] = s.buf;
                where[cnt] = pos;
                ++cnt;
            }
            if (cnt == 0) break;
            const std::uint16_t took = std::min(sink(batch, cnt), cnt);
            for (std::uint16_t i = 0; i < took; ++i)
                (void)take(where[i]);
            stats.inc(LinkCounter::delivered, took);
            out += took;
            if (took < cnt) break;
        }
        return out;
    }

    std::uint64_t rel_ps(std::uint64_t now_ns) const noexcept {
        return now_ns > t0_ns ? (now_ns - t0_ns) * 1000u : 0;
    }

    /** Impairs one frame into the ring; the caller checked that one slot is free. */
    void admit(PktBuf* b, std::uint64_t now) noexcept {
        const LinkConfig& c = cfg.link;
        stats.inc(LinkCounter::tx_frames);
        if (!c.up) {
            stats.inc(LinkCounter::dropped_down);
            drop(b);
            return;
        }
        if (detail::chance(rng, c.loss)) {
            stats.inc(LinkCounter::dropped_loss);
            drop(b);
            return;
        }
        const std::uint64_t now_ps = rel_ps(now);
        const std::uint64_t backlog =
            detail::backlog_bytes(busy_until_ps, now_ps, c.bandwidth_gbps);
        if (c.queue_bytes != 0 && backlog + b->len > c.queue_bytes) {
            stats.inc(LinkCounter::dropped_queue_full);
            drop(b);
            return;
        }
        const detail::Layout ly = detail::layout_of(*b);
        b->ecn_ce = detail::ecn_of(*b, ly) == static_cast<int>(detail::kEcnCe);
        const bool mark =
            (c.ecn && detail::red_decides_mark(rng, c.kmin_bytes, c.kmax_bytes, c.pmax, backlog)) ||
            detail::chance(rng, cfg.ecn_mark_probability);
        if (mark && detail::mark_ce(*b, ly)) stats.inc(LinkCounter::ecn_marked);
        if (detail::chance(rng, c.corrupt)) {
            detail::corrupt_one_bit(rng, *b, ly);
            stats.inc(LinkCounter::corrupted);
        }
        busy_until_ps =
            std::max(now_ps, busy_until_ps) + detail::serialisation_ps(b->len, c.bandwidth_gbps);

        bool held = false;
        std::uint16_t hold_left = 0;
        if (c.reorder_max_frames > 0 && detail::chance(rng, c.reorder)) {
            held = true;
            hold_left = static_cast<std::uint16_t>(1 + rng() % c.reorder_max_frames);
            stats.inc(LinkCounter::reordered);
        }
        push(b, held, hold_left, now + c.reorder_max_ns);

        if (detail::chance(rng, c.duplicate)) {
            PktBuf* dup = free_slots() != 0 ? copy_of(*b) : nullptr;
            if (dup == nullptr) {
                stats.inc(LinkCounter::dropped_no_buffer);
            } else {
                push(dup, false, 0, now);
                stats.inc(LinkCounter::duplicated);
            }
        }
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
            if (free_slots() == 0) {
                release_head_if_held();
                if (drain_to_inner(now) == 0 && free_slots() == 0) break; // inner takes nothing
                continue;
            }
            while (taken < n && free_slots() != 0)
                admit(bufs[taken++], now);
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
            if (free_slots() == 0) {
                release_head_if_held();
                (void)drain(now, n - got, to_caller(got));
            }
            // Receive into the unused tail of the caller's array, impair into the ring, then
            // hand out what may leave (over the same array positions).
            const auto want = static_cast<std::uint16_t>(
                std::min<std::uint32_t>(static_cast<std::uint32_t>(n - got), free_slots()));
            const std::uint16_t k = want != 0 ? inner.rx_burst(out + got, want) : 0;
            for (std::uint16_t i = 0; i < k; ++i)
                admit(out[got + i], now);
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
    return impl_->cfg.link.up && inner_->link_up();
}

void ImpairedPort::poll() noexcept {
    if (impl_->cfg.side == ImpairSide::tx)
        (void)impl_->drain_to_inner(impl_->clock->now_ns());
    else if (!impl_->cfg.link.up)
        impl_->drop_all_down();
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
    impl_->cfg = c;
}

void ImpairedPort::set_up(bool up) noexcept {
    impl_->cfg.link.up = up;
}

const LinkStats& ImpairedPort::stats() const noexcept {
    return impl_->stats;
}

std::uint32_t ImpairedPort::queued() const noexcept {
    return impl_->queued;
}

std::uint32_t ImpairedPort::held() const noexcept {
    return impl_->n_held;
}

std::uint64_t ImpairedPort::next_release_ns() const noexcept {
    std::uint64_t best = 0;
    for (std::uint64_t pos = impl_->head; pos != impl_->tail; ++pos) {
        const Slot& s = impl_->slot(pos);
        if (s.state != SlotState::held || s.hold_left == 0) continue;
        if (best == 0 || s.hold_until_ns < best) best = s.hold_until_ns;
    }
    return best;
}

// ---- spec ----

namespace {

enum class Key : std::uint8_t {
    loss,
    reorder,
    reorder_frames,
    reorder_ns,
    dup,
    corrupt,
    ecn,
    bw,
    queue,
    red,
    red_kmin,
    red_kmax,
    red_pmax,
    seed,
    side,
    up,
    ring,
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
    {"seed", Key::seed},
    {"side", Key::side},
    {"up", Key::up},
    {"ring", Key::ring},
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
                   " (known: loss reorder reorder_frames reorder_ns dup corrupt ecn bw queue red "
                   "red_kmin red_kmax red_pmax seed side up ring)";
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
    s += ",dup=" + shortest(c.link.duplicate);
    s += ",corrupt=" + shortest(c.link.corrupt);
    s += ",ecn=" + shortest(c.ecn_mark_probability);
    s += ",bw=" + shortest(c.link.bandwidth_gbps);
    s += ",queue=" + std::to_string(c.link.queue_bytes);
    s += ",red_kmin=" + std::to_string(c.link.kmin_bytes);
    s += ",red_kmax=" + std::to_string(c.link.kmax_bytes);
    s += ",red_pmax=" + shortest(c.link.pmax);
    s += std::string(",red=") + (c.link.ecn ? "1" : "0");
    s += ",seed=" + std::to_string(c.seed);
    s += ",side=" + std::string(to_string(c.side));
    s += std::string(",up=") + (c.link.up ? "1" : "0");
    s += ",ring=" + std::to_string(c.ring_frames);
    return s;
}

} // namespace droce::sim
