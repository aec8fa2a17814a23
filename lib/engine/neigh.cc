/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Neighbour table and ARP / IPv6 ND responder; see neigh.h. */
#include "engine/neigh.h"

#include <algorithm>
#include <cstring>

namespace droce {

using wire::ArpHdr;
using wire::ArpOp;
using wire::EthHdr;
using wire::Icmpv6Hdr;
using wire::Icmpv6Type;
using wire::Ipv4Addr;
using wire::Ipv6Addr;
using wire::Ipv6Hdr;
using wire::MacAddr;
using wire::NdLinkAddrOpt;
using wire::NdNaBody;
using wire::NdNsBody;
using wire::NdOptHdr;
using wire::NdOptType;
using wire::VlanTag;

namespace {

constexpr std::string_view kStateNames[] = {
#define DROCE_NEIGH_X(name, text) #name,
    DROCE_NEIGH_STATES(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};
constexpr std::string_view kStateTexts[] = {
#define DROCE_NEIGH_X(name, text) text,
    DROCE_NEIGH_STATES(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};
constexpr std::string_view kCounterTexts[] = {
#define DROCE_NEIGH_X(name, text) text,
    DROCE_NEIGH_COUNTERS(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};
constexpr std::string_view kStatusNames[] = {
#define DROCE_NEIGH_X(name, text) #name,
    DROCE_NEIGH_STATUSES(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};
constexpr std::string_view kStatusTexts[] = {
#define DROCE_NEIGH_X(name, text) text,
    DROCE_NEIGH_STATUSES(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};

template <std::size_t N>
constexpr std::string_view name_in(const std::string_view (&table)[N], std::size_t i) noexcept {
    return i < N ? table[i] : std::string_view("invalid");
}

constexpr std::size_t kNsMessageLen = sizeof(Icmpv6Hdr) + sizeof(NdNsBody);
static_assert(sizeof(NdNsBody) == sizeof(NdNaBody));
static_assert(kNdFrameLen ==
              sizeof(EthHdr) + sizeof(Ipv6Hdr) + kNsMessageLen + sizeof(NdLinkAddrOpt));
static_assert(kNeighMaxReply >= kArpFrameLen + sizeof(VlanTag));

constexpr bool is_zero_mac(const MacAddr& m) noexcept {
    return std::all_of(m.begin(), m.end(), [](std::uint8_t b) { return b == 0; });
}

/** Eviction preference: lower goes first; -1 never. */
int evict_rank(NeighState s, bool may_evict_live) noexcept {
    switch (s) {
    case NeighState::failed:
        return 0;
    case NeighState::stale:
        return 1;
    case NeighState::reachable:
        return may_evict_live ? 2 : -1;
    case NeighState::incomplete:
        return may_evict_live ? 3 : -1;
    case NeighState::static_:
        return -1;
    }
    return -1;
}

/**
 * Writes the Ethernet header (and 802.1Q tag when @p tci is set) at the start of @p p, which must
 * have room for it. @return the offset of the layer-3 header.
 */
std::size_t write_l2(std::uint8_t* p, const MacAddr& dst, const MacAddr& src,
                     std::uint16_t ether_type, const std::optional<std::uint16_t>& tci) noexcept {
    auto* eth = reinterpret_cast<EthHdr*>(p);
    eth->dst = dst;
    eth->src = src;
    if (!tci) {
        eth->ether_type.set(ether_type);
        return sizeof(EthHdr);
    }
    eth->ether_type.set(wire::kEtherTypeVlan);
    auto* tag = reinterpret_cast<VlanTag*>(p + sizeof(EthHdr));
    tag->tci.set(*tci);
    tag->ether_type.set(ether_type);
    return sizeof(EthHdr) + sizeof(VlanTag);
}

/**
 * Writes a whole ARP frame (padded so the untagged frame is kEthMinFrame bytes) into @p out.
 * @return its length, or 0 if @p out is too small.
 */
std::size_t write_arp(std::span<std::uint8_t> out, const std::optional<std::uint16_t>& tci,
                      const MacAddr& eth_dst, ArpOp op, const MacAddr& sha, const Ipv4Addr& spa,
                      const MacAddr& tha, const Ipv4Addr& tpa) noexcept {
    const std::size_t len = kArpFrameLen + (tci ? sizeof(VlanTag) : 0);
    if (out.size() < len) return 0;
    std::uint8_t* p = out.data();
    const std::size_t l3 = write_l2(p, eth_dst, sha, wire::kEtherTypeArp, tci);
    auto* arp = reinterpret_cast<ArpHdr*>(p + l3);
    arp->set_ethernet_ipv4();
    arp->set_op(op);
    arp->sha = sha;
    arp->spa = spa;
    arp->tha = tha;
    arp->tpa = tpa;
    std::memset(p + l3 + sizeof(ArpHdr), 0, len - l3 - sizeof(ArpHdr));
    return len;
}

/**
 * Writes a whole NS or NA frame with one link-layer address option carrying @p src_mac, computes
 * the ICMPv6 checksum. @p flags is the NA flag byte (ignored for an NS).
 * @return its length, or 0 if @p out is too small.
 */
std::size_t write_nd(std::span<std::uint8_t> out, const std::optional<std::uint16_t>& tci,
                     const MacAddr& eth_dst, const MacAddr& src_mac, const Ipv6Addr& src_ip,
                     const Ipv6Addr& dst_ip, Icmpv6Type type, bool solicited, bool override_flag,
                     const Ipv6Addr& target) noexcept {
    const std::size_t len = kNdFrameLen + (tci ? sizeof(VlanTag) : 0);
    if (out.size() < len) return 0;
    std::uint8_t* p = out.data();
    const std::size_t l3 = write_l2(p, eth_dst, src_mac, wire::kEtherTypeIpv6, tci);
    constexpr std::size_t msg_len = kNsMessageLen + sizeof(NdLinkAddrOpt);

    auto* ip = reinterpret_cast<Ipv6Hdr*>(p + l3);
    ip->set_vtc_flow(0, 0);
    ip->payload_length.set(msg_len);
    ip->next_header = wire::kIpProtoIcmpv6;
    ip->hop_limit = wire::kNdHopLimit;
    ip->src = src_ip;
    ip->dst = dst_ip;

    std::uint8_t* msg = p + l3 + sizeof(Ipv6Hdr);
    auto* icmp = reinterpret_cast<Icmpv6Hdr*>(msg);
    icmp->set_type(type);
    icmp->code = 0;
    icmp->checksum.set(0);
    auto* opt = reinterpret_cast<NdLinkAddrOpt*>(msg + kNsMessageLen);
    if (type == Icmpv6Type::neighbor_solicitation) {
        auto* ns = reinterpret_cast<NdNsBody*>(msg + sizeof(Icmpv6Hdr));
        ns->reserved.set(0);
        ns->target = target;
        opt->set(NdOptType::source_link_addr, src_mac);
    } else {
        auto* na = reinterpret_cast<NdNaBody*>(msg + sizeof(Icmpv6Hdr));
        na->set_flags(false, solicited, override_flag);
        std::memset(na->reserved, 0, sizeof(na->reserved));
        na->target = target;
        opt->set(NdOptType::target_link_addr, src_mac);
    }
    icmp->checksum.set(
        wire::icmpv6_checksum(src_ip, dst_ip, std::span<const std::uint8_t>(msg, msg_len)));
    return len;
}

/** The 802.1Q TCI of @p frame if it is tagged (handle_frame() checked the length). */
std::optional<std::uint16_t> frame_tci(std::span<const std::uint8_t> frame,
                                       std::size_t l3) noexcept {
    if (l3 == sizeof(EthHdr)) return std::nullopt;
    return reinterpret_cast<const VlanTag*>(frame.data() + sizeof(EthHdr))->tci.get();
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Names

std::string_view to_string(NeighState s) noexcept {
    if (s == NeighState::static_) return "static";
    return name_in(kStateNames, static_cast<std::size_t>(s));
}
std::string_view describe(NeighState s) noexcept {
    return name_in(kStateTexts, static_cast<std::size_t>(s));
}
std::string_view to_string(NeighCounter c) noexcept {
    return name_in(kNeighCounterNames, static_cast<std::size_t>(c));
}
std::string_view describe(NeighCounter c) noexcept {
    return name_in(kCounterTexts, static_cast<std::size_t>(c));
}
std::string_view to_string(NeighStatus s) noexcept {
    return name_in(kStatusNames, static_cast<std::size_t>(s));
}
std::string_view describe(NeighStatus s) noexcept {
    return name_in(kStatusTexts, static_cast<std::size_t>(s));
}

std::string_view to_string(NeighResolve r) noexcept {
    switch (r) {
#define DROCE_NEIGH_X(name)                                                                        \
    case NeighResolve::name:                                                                       \
        return #name;
        DROCE_NEIGH_RESOLVES(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
    }
    return "invalid";
}

std::string_view to_string(NeighLearnResult r) noexcept {
    switch (r) {
#define DROCE_NEIGH_X(name)                                                                        \
    case NeighLearnResult::name:                                                                   \
        return #name;
        DROCE_NEIGH_LEARN_RESULTS(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
    }
    return "invalid";
}

// ---------------------------------------------------------------------------------------------
// NeighTable

NeighTable::NeighTable(const Clock& clock, std::size_t capacity, const NeighParams& params)
    : clock_(&clock), params_(params), capacity_(std::clamp<std::size_t>(capacity, 1, 65535)) {
    if (params_.max_probes == 0) params_.max_probes = 1;
    entries_ = std::make_unique<Entry[]>(capacity_);
}

NeighTable::Entry* NeighTable::find_entry(const Ipv6Addr& ip) noexcept {
    for (std::size_t i = 0; i < capacity_; ++i) {
        Entry& e = entries_[i];
        if (e.in_use && e.ip == ip) return &e;
    }
    return nullptr;
}

NeighTable::Entry* NeighTable::alloc_entry(const Ipv6Addr& ip, bool may_evict_live) noexcept {
    const std::uint64_t victim_now = clock_->now_ns();
    Entry* victim = nullptr;
    int victim_rank = 0;
    for (std::size_t i = 0; i < capacity_; ++i) {
        Entry& e = entries_[i];
        if (!e.in_use) {
            victim = &e;
            ++used_;
            break;
        }
        age(e, victim_now);
        const int rank = evict_rank(e.state, may_evict_live);
        if (rank < 0) continue;
        if (!victim || rank < victim_rank || (rank == victim_rank && e.used_ns < victim->used_ns)) {
            victim = &e;
            victim_rank = rank;
        }
    }
    if (!victim) return nullptr;
    *victim = Entry{};
    victim->ip = ip;
    victim->in_use = true;
    victim->used_ns = clock_->now_ns();
    return victim;
}

void NeighTable::set_state(Entry& e, NeighState s, std::uint64_t now) noexcept {
    e.state = s;
    e.updated_ns = now;
    e.probes = 0;
    e.next_ns = 0;
}

void NeighTable::age(Entry& e, std::uint64_t now) noexcept {
    if (e.state == NeighState::reachable && now - e.updated_ns >= params_.reachable_ns)
        set_state(e, NeighState::stale, e.updated_ns + params_.reachable_ns);
}

bool NeighTable::probe_due(Entry& e, std::uint64_t now) noexcept {
    if (now < e.next_ns) return false;
    if (e.probes < params_.max_probes) {
        ++e.probes;
        e.next_ns = now + params_.retrans_ns;
        return true;
    }
    // max_probes requests sent and retrans_ns has passed since the last one: give up.
    set_state(e, NeighState::failed, now);
    e.next_ns = now + params_.failed_hold_ns;
    return false;
}

bool NeighTable::add_static(const Ipv6Addr& ip, const MacAddr& mac) noexcept {
    if (is_group_mac(mac)) return false;
    Entry* e = find_entry(ip);
    if (!e) e = alloc_entry(ip, true);
    if (!e) return false;
    e->mac = mac;
    e->has_mac = true;
    set_state(*e, NeighState::static_, clock_->now_ns());
    return true;
}

bool NeighTable::remove(const Ipv6Addr& ip) noexcept {
    Entry* e = find_entry(ip);
    if (!e) return false;
    *e = Entry{};
    --used_;
    return true;
}

NeighLookup NeighTable::lookup(const Ipv6Addr& ip) noexcept {
    const std::uint64_t now = clock_->now_ns();
    Entry* e = find_entry(ip);
    if (!e) {
        e = alloc_entry(ip, true);
        if (!e) return {NeighResolve::no_space, {}, false};
        set_state(*e, NeighState::incomplete, now);
        e->probes = 1;
        e->next_ns = now + params_.retrans_ns;
        return {NeighResolve::pending, {}, true};
    }
    e->used_ns = now;
    age(*e, now);
    switch (e->state) {
    case NeighState::static_:
    case NeighState::reachable:
        return {NeighResolve::resolved, e->mac, false};
    case NeighState::stale: {
        // A STALE entry in use is re-confirmed (RFC 4861 §7.3.3, without the DELAY state: an ACK
        // from the peer confirms it through confirm() just as well).
        bool send = false;
        if (e->probes == 0) {
            e->probes = 1;
            e->next_ns = now + params_.retrans_ns;
            send = true;
        } else {
            send = probe_due(*e, now);
        }
        if (e->state == NeighState::failed) return {NeighResolve::failed, {}, false};
        return {NeighResolve::resolved, e->mac, send};
    }
    case NeighState::incomplete: {
        const bool send = probe_due(*e, now);
        if (e->state == NeighState::failed) return {NeighResolve::failed, {}, false};
        return {NeighResolve::pending, {}, send};
    }
    case NeighState::failed:
        if (now < e->next_ns) return {NeighResolve::failed, {}, false};
        set_state(*e, NeighState::incomplete, now);
        e->probes = 1;
        e->next_ns = now + params_.retrans_ns;
        return {NeighResolve::pending, {}, true};
    }
    return {NeighResolve::failed, {}, false};
}

NeighLearnResult NeighTable::learn(const Ipv6Addr& ip, const MacAddr& mac, NeighLearn how,
                                   bool override_mac) noexcept {
    if (is_group_mac(mac) || is_zero_mac(mac)) return NeighLearnResult::rejected;
    const std::uint64_t now = clock_->now_ns();
    const bool confirmed = how == NeighLearn::confirmed;
    Entry* e = find_entry(ip);
    if (!e) {
        if (how == NeighLearn::update_only) return NeighLearnResult::not_present;
        e = alloc_entry(ip, confirmed);
        if (!e) return NeighLearnResult::no_space;
        e->mac = mac;
        e->has_mac = true;
        set_state(*e, confirmed ? NeighState::reachable : NeighState::stale, now);
        return NeighLearnResult::created;
    }
    if (e->state == NeighState::static_)
        return e->mac == mac ? NeighLearnResult::unchanged : NeighLearnResult::static_kept;
    age(*e, now);
    const bool same = e->has_mac && e->mac == mac;
    switch (e->state) {
    case NeighState::incomplete:
    case NeighState::failed:
        // Any answer with a MAC resolves the address (RFC 4861 §7.2.5 INCOMPLETE rules; RFC 826
        // merge).
        e->mac = mac;
        e->has_mac = true;
        set_state(*e, confirmed ? NeighState::reachable : NeighState::stale, now);
        return NeighLearnResult::updated;
    case NeighState::reachable:
    case NeighState::stale:
        if (confirmed && (same || override_mac)) {
            e->mac = mac;
            set_state(*e, NeighState::reachable, now);
            return NeighLearnResult::updated;
        }
        if (same) return NeighLearnResult::unchanged;
        if (!override_mac) {
            // A different MAC without Override: keep ours, but it is no longer confirmed.
            if (e->state == NeighState::stale) return NeighLearnResult::unchanged;
            set_state(*e, NeighState::stale, now);
            return NeighLearnResult::updated;
        }
        e->mac = mac;
        set_state(*e, NeighState::stale, now);
        return NeighLearnResult::updated;
    case NeighState::static_:
        break;
    }
    return NeighLearnResult::unchanged;
}

void NeighTable::confirm(const Ipv6Addr& ip) noexcept {
    Entry* e = find_entry(ip);
    if (!e) return;
    const std::uint64_t now = clock_->now_ns();
    age(*e, now);
    if (e->state == NeighState::reachable || e->state == NeighState::stale)
        set_state(*e, NeighState::reachable, now);
}

std::size_t NeighTable::due_requests(std::span<Ipv6Addr> out) noexcept {
    const std::uint64_t now = clock_->now_ns();
    std::size_t n = 0;
    for (std::size_t i = 0; i < capacity_ && n < out.size(); ++i) {
        Entry& e = entries_[i];
        if (!e.in_use) continue;
        age(e, now);
        const bool probing =
            e.state == NeighState::incomplete || (e.state == NeighState::stale && e.probes > 0);
        if (probing && probe_due(e, now)) out[n++] = e.ip;
    }
    return n;
}

std::optional<NeighEntryInfo> NeighTable::find(const Ipv6Addr& ip) noexcept {
    Entry* e = find_entry(ip);
    if (!e) return std::nullopt;
    age(*e, clock_->now_ns());
    return NeighEntryInfo{e->ip, e->mac, e->state, e->probes, e->updated_ns};
}

// ---------------------------------------------------------------------------------------------
// NeighPortAddrs

bool NeighPortAddrs::add_ipv6(const Ipv6Addr& a) noexcept {
    if (n_ipv6 >= kMaxPortIpv6 || wire::is_ipv6_multicast(a) || wire::is_ipv6_unspecified(a))
        return false;
    ipv6[n_ipv6++] = a;
    return true;
}

bool NeighPortAddrs::has_ipv6(const Ipv6Addr& a) const noexcept {
    for (std::size_t i = 0; i < n_ipv6 && i < kMaxPortIpv6; ++i)
        if (ipv6[i] == a) return true;
    return false;
}

// ---------------------------------------------------------------------------------------------
// NeighResponder

NeighRx NeighResponder::finish(NeighStatus s, NeighCounter c, std::size_t reply_len) noexcept {
    counters_.inc(c);
    return {s, reply_len};
}

void NeighResponder::note_learn(NeighLearnResult r) noexcept {
    if (r == NeighLearnResult::static_kept) counters_.inc(NeighCounter::static_kept);
}

NeighRx NeighResponder::handle_frame(std::span<const std::uint8_t> frame,
                                     std::span<std::uint8_t> reply_out) noexcept {
    if (frame.size() < sizeof(EthHdr))
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    const auto* eth = reinterpret_cast<const EthHdr*>(frame.data());
    std::uint16_t ether_type = eth->ether_type.get();
    std::size_t l3 = sizeof(EthHdr);
    if (ether_type == wire::kEtherTypeVlan) {
        if (frame.size() < sizeof(EthHdr) + sizeof(VlanTag))
            return finish(NeighStatus::malformed, NeighCounter::malformed);
        ether_type =
            reinterpret_cast<const VlanTag*>(frame.data() + sizeof(EthHdr))->ether_type.get();
        l3 += sizeof(VlanTag);
    }
    if (ether_type == wire::kEtherTypeArp) return handle_arp(frame, l3, reply_out);
    if (ether_type == wire::kEtherTypeIpv6) return handle_ipv6(frame, l3, reply_out);
    return finish(NeighStatus::not_neigh, NeighCounter::not_neigh);
}

NeighRx NeighResponder::handle_arp(std::span<const std::uint8_t> frame, std::size_t l3,
                                   std::span<std::uint8_t> out) noexcept {
    // RFC 826 "Packet Reception", for Ethernet/IPv4 only.
    if (frame.size() - l3 < sizeof(ArpHdr))
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    const auto* arp = reinterpret_cast<const ArpHdr*>(frame.data() + l3);
    if (arp->htype.get() != wire::kArpHwEthernet || arp->ptype.get() != wire::kArpProtoIpv4)
        return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
    if (arp->hlen != 6 || arp->plen != 4)
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    const ArpOp op = arp->op();
    if (op != ArpOp::request && op != ArpOp::reply)
        return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
    if (arp->sha == addrs_.mac)
        return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
    if (is_group_mac(arp->sha) || is_zero_mac(arp->sha))
        return finish(NeighStatus::malformed, NeighCounter::malformed);

    const Ipv4Addr spa = arp->spa;
    const Ipv4Addr tpa = arp->tpa;
    const bool probe = spa == Ipv4Addr{0, 0, 0, 0}; // RFC 5227 probe: asks, teaches nothing
    if (addrs_.has_ipv4(spa))
        return finish(NeighStatus::address_conflict, NeighCounter::address_conflict);

    if (addrs_.has_ipv4(tpa)) {
        if (op == ArpOp::reply) {
            note_learn(table_->learn(ipv4_mapped(spa), arp->sha, NeighLearn::confirmed));
            return finish(NeighStatus::arp_reply, NeighCounter::arp_reply_rx);
        }
        counters_.inc(NeighCounter::arp_request_rx);
        if (!probe) note_learn(table_->learn(ipv4_mapped(spa), arp->sha, NeighLearn::hint));
        const std::size_t len = write_arp(out, frame_tci(frame, l3), arp->sha, ArpOp::reply,
                                          addrs_.mac, *addrs_.ipv4, arp->sha, spa);
        if (len == 0) return finish(NeighStatus::reply_no_room, NeighCounter::reply_no_room);
        return finish(NeighStatus::arp_request, NeighCounter::arp_reply_tx, len);
    }
    if (!probe && arp->is_gratuitous()) {
        note_learn(table_->learn(ipv4_mapped(spa), arp->sha, NeighLearn::hint));
        return finish(NeighStatus::arp_gratuitous, NeighCounter::arp_gratuitous_rx);
    }
    return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
}

NeighRx NeighResponder::handle_ipv6(std::span<const std::uint8_t> frame, std::size_t l3,
                                    std::span<std::uint8_t> out) noexcept {
    if (frame.size() - l3 < sizeof(Ipv6Hdr))
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    const auto* ip = reinterpret_cast<const Ipv6Hdr*>(frame.data() + l3);
    if (ip->version() != 6) return finish(NeighStatus::malformed, NeighCounter::malformed);
    if (ip->next_header != wire::kIpProtoIcmpv6)
        return finish(NeighStatus::not_neigh, NeighCounter::not_neigh);
    const std::size_t avail = frame.size() - l3 - sizeof(Ipv6Hdr);
    const std::size_t msg_len = ip->payload_length.get();
    // Bytes after msg_len are Ethernet padding; bytes missing before it are a truncation.
    if (msg_len > avail || msg_len < sizeof(Icmpv6Hdr))
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    const std::span<const std::uint8_t> msg = frame.subspan(l3 + sizeof(Ipv6Hdr), msg_len);
    const auto* icmp = reinterpret_cast<const Icmpv6Hdr*>(msg.data());
    const Icmpv6Type type = icmp->type();
    if (type != Icmpv6Type::neighbor_solicitation && type != Icmpv6Type::neighbor_advertisement)
        return finish(NeighStatus::not_neigh, NeighCounter::not_neigh);

    // RFC 4861 §7.1.1 / §7.1.2 validity checks, in one place.
    if (ip->hop_limit != wire::kNdHopLimit)
        return finish(NeighStatus::bad_hop_limit, NeighCounter::bad_hop_limit);
    if (icmp->code != 0 || msg_len < kNsMessageLen)
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    if (wire::icmpv6_checksum(ip->src, ip->dst, msg) != 0)
        return finish(NeighStatus::bad_checksum, NeighCounter::bad_checksum);
    const Ipv6Addr src = ip->src;
    const Ipv6Addr dst = ip->dst;
    // NS and NA bodies have the target at the same offset.
    const Ipv6Addr target =
        reinterpret_cast<const NdNsBody*>(msg.data() + sizeof(Icmpv6Hdr))->target;
    if (wire::is_ipv6_multicast(target) || wire::is_ipv6_multicast(src))
        return finish(NeighStatus::malformed, NeighCounter::malformed);

    // Options: each at least 8 bytes, never length 0, all inside the message (§4.6).
    std::optional<MacAddr> lladdr;
    const NdOptType want = type == Icmpv6Type::neighbor_solicitation ? NdOptType::source_link_addr
                                                                     : NdOptType::target_link_addr;
    for (std::size_t off = kNsMessageLen; off < msg_len;) {
        if (msg_len - off < sizeof(NdOptHdr))
            return finish(NeighStatus::malformed, NeighCounter::malformed);
        const auto* oh = reinterpret_cast<const NdOptHdr*>(msg.data() + off);
        const std::size_t opt_len = std::size_t{oh->length} * wire::kNdOptUnit;
        if (opt_len == 0 || opt_len > msg_len - off)
            return finish(NeighStatus::malformed, NeighCounter::malformed);
        if (oh->type() == want) {
            if (opt_len != sizeof(NdLinkAddrOpt))
                return finish(NeighStatus::malformed, NeighCounter::malformed);
            lladdr = reinterpret_cast<const NdLinkAddrOpt*>(msg.data() + off)->addr;
        }
        off += opt_len;
    }
    const auto* eth = reinterpret_cast<const EthHdr*>(frame.data());
    if (eth->src == addrs_.mac)
        return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
    if (lladdr && (is_group_mac(*lladdr) || is_zero_mac(*lladdr)))
        return finish(NeighStatus::malformed, NeighCounter::malformed);

    if (type == Icmpv6Type::neighbor_solicitation) {
        const bool dad = wire::is_ipv6_unspecified(src);
        // §7.1.1: a DAD probe goes to a solicited-node address and carries no source link-layer
        // option.
        if (dad && (!wire::is_solicited_node_address(dst) || lladdr))
            return finish(NeighStatus::malformed, NeighCounter::malformed);
        if (!addrs_.has_ipv6(target))
            return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
        if (addrs_.has_ipv6(src))
            return finish(NeighStatus::address_conflict, NeighCounter::address_conflict);
        counters_.inc(NeighCounter::ns_rx);
        if (!dad && lladdr) note_learn(table_->learn(src, *lladdr, NeighLearn::hint));
        // §7.2.4: solicited NA to the sender (at the MAC it gave, else the frame's source MAC); a
        // DAD probe is answered unsolicited to all-nodes. Override is set: the address is ours
        // alone.
        const Ipv6Addr reply_dst = dad ? wire::kIpv6AllNodes : src;
        const MacAddr reply_mac =
            dad ? wire::ipv6_multicast_mac(wire::kIpv6AllNodes) : lladdr.value_or(eth->src);
        const std::size_t len =
            write_nd(out, frame_tci(frame, l3), reply_mac, addrs_.mac, target, reply_dst,
                     Icmpv6Type::neighbor_advertisement, !dad, true, target);
        if (len == 0) return finish(NeighStatus::reply_no_room, NeighCounter::reply_no_room);
        return finish(NeighStatus::ns, NeighCounter::na_tx, len);
    }

    // Neighbor Advertisement.
    const auto* na = reinterpret_cast<const NdNaBody*>(msg.data() + sizeof(Icmpv6Hdr));
    if (wire::is_ipv6_multicast(dst) && na->solicited())
        return finish(NeighStatus::malformed, NeighCounter::malformed);
    if (addrs_.has_ipv6(target)) {
        if (lladdr && *lladdr != addrs_.mac)
            return finish(NeighStatus::address_conflict, NeighCounter::address_conflict);
        return finish(NeighStatus::ignored_not_for_us, NeighCounter::ignored_not_for_us);
    }
    if (lladdr) {
        note_learn(table_->learn(target, *lladdr,
                                 na->solicited() ? NeighLearn::confirmed : NeighLearn::update_only,
                                 na->override_flag()));
    } else if (na->solicited()) {
        table_->confirm(target);
    }
    return finish(NeighStatus::na, NeighCounter::na_rx);
}

std::size_t NeighResponder::build_arp_request(const Ipv4Addr& target, std::span<std::uint8_t> out,
                                              const std::optional<MacAddr>& unicast_dst,
                                              std::optional<std::uint16_t> vlan_tci) noexcept {
    if (!addrs_.ipv4) return 0;
    const std::size_t len = write_arp(out, vlan_tci, unicast_dst.value_or(kBroadcastMac),
                                      ArpOp::request, addrs_.mac, *addrs_.ipv4, MacAddr{}, target);
    if (len != 0) counters_.inc(NeighCounter::arp_request_tx);
    return len;
}

std::size_t NeighResponder::build_ns(const Ipv6Addr& target, std::span<std::uint8_t> out,
                                     const std::optional<MacAddr>& unicast_dst,
                                     std::optional<std::uint16_t> vlan_tci) noexcept {
    if (addrs_.n_ipv6 == 0 || wire::is_ipv6_multicast(target)) return 0;
    const Ipv6Addr* src = &addrs_.ipv6[0];
    for (std::size_t i = 0; i < addrs_.n_ipv6; ++i) {
        if (std::equal(target.begin(), target.begin() + 8, addrs_.ipv6[i].begin())) {
            src = &addrs_.ipv6[i];
            break;
        }
    }
    const Ipv6Addr dst = unicast_dst ? target : wire::solicited_node_address(target);
    const MacAddr eth_dst = unicast_dst.value_or(wire::ipv6_multicast_mac(dst));
    const std::size_t len = write_nd(out, vlan_tci, eth_dst, addrs_.mac, *src, dst,
                                     Icmpv6Type::neighbor_solicitation, false, false, target);
    if (len != 0) counters_.inc(NeighCounter::ns_tx);
    return len;
}

std::size_t NeighResponder::build_request(const Ipv6Addr& ip, std::span<std::uint8_t> out,
                                          const std::optional<MacAddr>& unicast_dst,
                                          std::optional<std::uint16_t> vlan_tci) noexcept {
    if (is_ipv4_mapped(ip))
        return build_arp_request(ipv4_of_mapped(ip), out, unicast_dst, vlan_tci);
    return build_ns(ip, out, unicast_dst, vlan_tci);
}

} // namespace droce
