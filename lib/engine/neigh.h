/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Neighbour resolution inside the engine: ARP (RFC 826) for IPv4 and Neighbor Discovery (RFC 4861)
 * for IPv6.
 *
 * A DPDK port is invisible to the kernel, so nobody else answers "who has 10.0.0.1?" for it and
 * nobody else finds the MAC of a peer: the engine does both itself.
 *  - NeighTable maps IP addresses to MACs. Fixed capacity, allocated once when it is made; entries
 *    are INCOMPLETE (being resolved), REACHABLE (confirmed recently), STALE (usable, unconfirmed),
 *    FAILED (nobody answered; not asked again for a while) or STATIC (from the config, never
 *    replaced by anything learned from the wire). Time comes from the engine's droce::Clock.
 *  - NeighResponder reads one received frame, answers ARP requests and Neighbor Solicitations for
 *    the port's own addresses, learns peers from requests, replies and advertisements, and builds
 *    outgoing ARP requests and Neighbor Solicitations.
 *
 * Addresses: the table keys every entry by an IPv6 address; an IPv4 peer a.b.c.d is stored as its
 * IPv4-mapped form ::ffff:a.b.c.d (RFC 4291 §2.5.5.2), the same form droce's RoCEv2 GIDs use.
 *
 * Thread rules for everything in this file: the engine thread only (the thread that owns the port).
 * Nothing is locked; nothing allocates, throws or blocks after construction.
 *
 * Cost: the table is searched linearly, O(capacity). Lookups happen when a QP path is set up and on
 * the engine's timer path, not per data packet (the resolved MAC is kept in the path), so a small
 * table (tens to a few hundred entries) searched linearly is the simplest correct choice.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "common/clock.h"
#include "common/counters.h"
#include "wire/arp.h"
#include "wire/eth.h"
#include "wire/icmpv6.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"

namespace droce {

// ---------------------------------------------------------------------------------------------
// Addresses

// The IPv4-mapped form is the table key of an IPv4 peer.
using wire::ipv4_mapped;
using wire::ipv4_of_mapped;
using wire::is_ipv4_mapped;

/** ff:ff:ff:ff:ff:ff. */
inline constexpr wire::MacAddr kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
/** True for group (multicast or broadcast) MACs: the I/G bit, bit 0 of the first byte. */
[[nodiscard]] constexpr bool is_group_mac(const wire::MacAddr& m) noexcept {
    return m[0] & 1u;
}

// ---------------------------------------------------------------------------------------------
// NeighTable

/**
 * Timers of the table; the defaults are the RFC 4861 §10 constants (and Linux's neighbour
 * defaults). Knobs, not limits: the config may override them.
 */
struct NeighParams {
    std::uint64_t retrans_ns = 1'000'000'000; ///< RETRANS_TIMER: between requests for one address
    std::uint8_t max_probes = 3;              ///< MAX_MULTICAST_SOLICIT: requests before giving up
    std::uint64_t reachable_ns =
        30'000'000'000; ///< REACHABLE_TIME: REACHABLE becomes STALE after this
    std::uint64_t failed_hold_ns =
        20'000'000'000; ///< a FAILED address is not asked for again for this long
};

// clang-format off
/** X(name, description) of every entry state. */
#define DROCE_NEIGH_STATES(X)                                                                       \
    X(incomplete, "being resolved: requests sent, no answer yet")                                   \
    X(reachable,  "MAC confirmed by an answer less than reachable_ns ago")                          \
    X(stale,      "MAC known but not confirmed recently; usable, re-confirmed when used")           \
    X(failed,     "no answer to max_probes requests; not asked again until failed_hold_ns passes")  \
    X(static_,    "configured; never replaced or evicted by anything learned")
// clang-format on

enum class NeighState : std::uint8_t {
#define DROCE_NEIGH_STATE_ENUM(name, text) name,
    DROCE_NEIGH_STATES(DROCE_NEIGH_STATE_ENUM)
#undef DROCE_NEIGH_STATE_ENUM
};

/** Name of @p s: "incomplete", "reachable", "stale", "failed", "static". */
[[nodiscard]] std::string_view to_string(NeighState s) noexcept;
/** One-line explanation of @p s. */
[[nodiscard]] std::string_view describe(NeighState s) noexcept;

// clang-format off
/** X(name) of every outcome of NeighTable::lookup(). */
#define DROCE_NEIGH_RESOLVES(X)                                                                     \
    X(resolved) /* mac is valid: the entry is STATIC, REACHABLE or STALE */                         \
    X(pending)  /* resolution in progress (INCOMPLETE); queue or drop the packet, ask again later */ \
    X(failed)   /* nobody answered; the address is unreachable until the FAILED hold ends */        \
    X(no_space) /* the address is not in the table and every slot holds a STATIC entry */
// clang-format on

/** Outcome of NeighTable::lookup(). */
enum class NeighResolve : std::uint8_t {
#define DROCE_NEIGH_X(name) name,
    DROCE_NEIGH_RESOLVES(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};
[[nodiscard]] std::string_view to_string(NeighResolve r) noexcept;

/** Result of NeighTable::lookup(). */
struct NeighLookup {
    NeighResolve result = NeighResolve::no_space;
    /** Valid when result == resolved. */
    wire::MacAddr mac{};
    /**
     * The caller should send a request for the address now (ARP request / Neighbor Solicitation):
     * the first one for a new address, a retransmission once retrans_ns has passed, or a refresh
     * of a STALE entry in use. When result == resolved the refresh may go unicast to mac.
     */
    bool send_request = false;
};

/** How an address was learned; decides the state and whether an entry may be created (RFC 4861
 * §7.2.5, RFC 826). */
enum class NeighLearn : std::uint8_t {
    /** An answer to our request (ARP reply to us, solicited NA): REACHABLE; creates the entry if
       absent. */
    confirmed,
    /**
     * The peer sent us something carrying its MAC (ARP request for us, gratuitous ARP, NS with a
     * source link-layer option): creates a STALE entry if absent, turns INCOMPLETE/FAILED into
     * STALE with the MAC, and replaces a different MAC (then STALE). The same MAC changes nothing.
     */
    hint,
    /** Unsolicited NA: as hint, but never creates an entry (RFC 4861 §7.2.5: no entry → discard).
     */
    update_only,
};

// clang-format off
/** X(name) of every outcome of NeighTable::learn(). */
#define DROCE_NEIGH_LEARN_RESULTS(X)                                                                \
    X(created)     /* a new entry */                                                                \
    X(updated)     /* state or MAC changed */                                                       \
    X(unchanged)   /* nothing to change (hint with the MAC already known) */                        \
    X(static_kept) /* a STATIC entry exists for the address; it was left as configured */           \
    X(not_present) /* update_only and no entry: nothing learned */                                  \
    X(no_space)    /* no slot could be freed for the new entry; nothing learned */                  \
    X(rejected)    /* the MAC is a group (multicast/broadcast) address, never a neighbour's */
// clang-format on

/** Outcome of NeighTable::learn(). */
enum class NeighLearnResult : std::uint8_t {
#define DROCE_NEIGH_X(name) name,
    DROCE_NEIGH_LEARN_RESULTS(DROCE_NEIGH_X)
#undef DROCE_NEIGH_X
};
[[nodiscard]] std::string_view to_string(NeighLearnResult r) noexcept;

/** A copy of one entry, for inspection (tests, droce-trace, counters dumps). */
struct NeighEntryInfo {
    wire::Ipv6Addr ip{};
    wire::MacAddr mac{}; ///< meaningless while INCOMPLETE or FAILED without a previous MAC
    NeighState state = NeighState::incomplete;
    std::uint8_t probes = 0;      ///< requests sent in the current resolution or refresh
    std::uint64_t updated_ns = 0; ///< Clock time of the last state change or confirmation
};

/**
 * IP → MAC table of one port. Fixed capacity: the storage is allocated by the constructor and never
 * again. When a new entry is needed and the table is full, a learned entry is evicted: FAILED
 * first, then STALE, then (only for lookups and confirmed answers, never for unsolicited hints, so
 * a flood of gratuitous ARPs cannot push out live entries) REACHABLE and INCOMPLETE; within a state
 * the one least recently used. STATIC entries are never evicted.
 *
 * Time: every method reads clock.now_ns(); states age lazily when an entry is looked at, so there
 * is no background sweep. Thread rules: the engine thread only; not thread safe.
 */
class NeighTable {
  public:
    /**
     * Makes an empty table for up to @p capacity entries (1 .. 65535; 0 is raised to 1).
     * @p clock is borrowed: it must outlive the table (the engine's clock, or a virtual clock in
     * tests). Allocates the entry storage once; may throw std::bad_alloc (control path only).
     */
    NeighTable(const Clock& clock, std::size_t capacity, const NeighParams& params = {});

    NeighTable(const NeighTable&) = delete;
    NeighTable& operator=(const NeighTable&) = delete;
    NeighTable(NeighTable&&) noexcept = default;
    NeighTable& operator=(NeighTable&&) noexcept = default;
    ~NeighTable() = default;

    /**
     * Configures @p ip → @p mac as STATIC (config override). Replaces any learned entry for @p ip,
     * or updates an existing static one. Nothing learned from the wire replaces it afterwards.
     * @return false if @p mac is a group MAC, or the table is full of STATIC entries; true
     * otherwise.
     */
    bool add_static(const wire::Ipv6Addr& ip, const wire::MacAddr& mac) noexcept;
    /** IPv4 convenience: add_static(ipv4_mapped(ip), mac). */
    bool add_static(const wire::Ipv4Addr& ip, const wire::MacAddr& mac) noexcept {
        return add_static(ipv4_mapped(ip), mac);
    }

    /** Removes the entry for @p ip, static or learned. @return whether there was one. */
    bool remove(const wire::Ipv6Addr& ip) noexcept;

    /**
     * Resolves @p ip for a packet about to be sent, and says whether a request must go out now
     * (NeighLookup::send_request). An unknown address gets an INCOMPLETE entry and its first
     * request. An INCOMPLETE address is asked again every retrans_ns; after max_probes unanswered
     * requests (and retrans_ns more) it becomes FAILED for failed_hold_ns, then the next lookup
     * starts over. A STALE entry is used and refreshed the same way (max_probes requests, then
     * FAILED). Every request this asks for is counted in NeighEntryInfo::probes; the caller must
     * send it (see NeighResponder::build_arp_request() / build_ns()) or the schedule is only
     * approximate.
     */
    [[nodiscard]] NeighLookup lookup(const wire::Ipv6Addr& ip) noexcept;
    /** IPv4 convenience: lookup(ipv4_mapped(ip)). */
    [[nodiscard]] NeighLookup lookup(const wire::Ipv4Addr& ip) noexcept {
        return lookup(ipv4_mapped(ip));
    }

    /**
     * Records what the wire said about @p ip (see NeighLearn). @p override_mac is the NA Override
     * flag: false means a REACHABLE entry with a different MAC keeps its MAC and only becomes STALE
     * (RFC 4861 §7.2.5); ARP always overrides. STATIC entries are never changed.
     */
    NeighLearnResult learn(const wire::Ipv6Addr& ip, const wire::MacAddr& mac, NeighLearn how,
                           bool override_mac = true) noexcept;

    /**
     * Upper-layer reachability confirmation (RFC 4861 §7.3.1): the transport got an ACK or response
     * from @p ip, so its entry becomes REACHABLE again without an ARP/NS round trip. No effect on a
     * missing, INCOMPLETE, FAILED or STATIC entry.
     */
    void confirm(const wire::Ipv6Addr& ip) noexcept;

    /**
     * Timer path: writes to @p out the addresses whose request is due now (INCOMPLETE or refreshing
     * STALE entries whose retrans_ns has passed), advancing their schedule exactly as lookup()
     * would, and fails those out of probes. Returns how many were written (≤ out.size()); addresses
     * that did not fit stay due for the next call.
     */
    std::size_t due_requests(std::span<wire::Ipv6Addr> out) noexcept;

    /**
     * The entry for @p ip after ageing, or nullopt. Side effect: ageing (a REACHABLE entry past
     * reachable_ns becomes STALE) — the same as any other method; no request is scheduled.
     */
    [[nodiscard]] std::optional<NeighEntryInfo> find(const wire::Ipv6Addr& ip) noexcept;

    /** Entries in use, static ones included. */
    [[nodiscard]] std::size_t size() const noexcept { return used_; }
    /** Most entries the table holds (fixed at construction). */
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    /** The timers in force (max_probes raised to 1 if it was 0). */
    [[nodiscard]] const NeighParams& params() const noexcept { return params_; }

  private:
    struct Entry {
        wire::Ipv6Addr ip{};
        wire::MacAddr mac{};
        NeighState state = NeighState::incomplete;
        bool in_use = false;
        bool has_mac = false; ///< mac holds a MAC learned before (kept across FAILED)
        std::uint8_t probes =
            0; ///< requests sent in the current resolution/refresh; 0 = none running
        std::uint64_t updated_ns = 0; ///< last state change or confirmation
        std::uint64_t next_ns = 0; ///< INCOMPLETE/STALE probing: next request; FAILED: end of hold
        std::uint64_t used_ns = 0; ///< last lookup, for eviction
    };

    Entry* find_entry(const wire::Ipv6Addr& ip) noexcept;
    Entry* alloc_entry(const wire::Ipv6Addr& ip, bool may_evict_live) noexcept;
    void age(Entry& e, std::uint64_t now) noexcept;
    /** Probing schedule of INCOMPLETE and refreshing STALE entries: true if a request is due now.
     */
    bool probe_due(Entry& e, std::uint64_t now) noexcept;
    void set_state(Entry& e, NeighState s, std::uint64_t now) noexcept;

    const Clock* clock_;
    NeighParams params_;
    std::unique_ptr<Entry[]> entries_;
    std::size_t capacity_ = 0;
    std::size_t used_ = 0;
};

// ---------------------------------------------------------------------------------------------
// NeighResponder

// clang-format off
/** X(name, description) of the responder's counters (one set per port). */
#define DROCE_NEIGH_COUNTERS(X)                                                                     \
    X(arp_request_rx,     "ARP requests for one of our addresses")                                 \
    X(arp_reply_tx,       "ARP replies written")                                                   \
    X(arp_reply_rx,       "ARP replies addressed to us")                                           \
    X(arp_gratuitous_rx,  "gratuitous ARPs (sender announces its own address)")                    \
    X(arp_request_tx,     "ARP requests built")                                                    \
    X(ns_rx,              "Neighbor Solicitations for one of our addresses")                       \
    X(na_tx,              "Neighbor Advertisements written")                                       \
    X(na_rx,              "Neighbor Advertisements received and accepted")                         \
    X(ns_tx,              "Neighbor Solicitations built")                                          \
    X(ignored_not_for_us, "well-formed ARP/ND for another host, or our own frame looped back")     \
    X(malformed,          "truncated or inconsistent ARP/ND frame, dropped")                       \
    X(bad_hop_limit,      "ND message with hop limit other than 255 (RFC 4861 §7.1), dropped")     \
    X(bad_checksum,       "ICMPv6 checksum mismatch, dropped")                                     \
    X(address_conflict,   "another host claims one of our addresses")                              \
    X(reply_no_room,      "a reply was due but reply_out was too small")                           \
    X(static_kept,        "the wire disagreed with a STATIC entry; the entry was kept")            \
    X(not_neigh,          "frames that are neither ARP nor ICMPv6 NS/NA")
// clang-format on

enum class NeighCounter : std::uint8_t {
#define DROCE_NEIGH_COUNTER_ENUM(name, text) name,
    DROCE_NEIGH_COUNTERS(DROCE_NEIGH_COUNTER_ENUM)
#undef DROCE_NEIGH_COUNTER_ENUM
        count_
};
inline constexpr std::size_t kNumNeighCounters = static_cast<std::size_t>(NeighCounter::count_);

/** Name of @p c, e.g. "arp_reply_tx". */
[[nodiscard]] std::string_view to_string(NeighCounter c) noexcept;
/** One-line explanation of @p c. */
[[nodiscard]] std::string_view describe(NeighCounter c) noexcept;

/** Enumerator names of NeighCounter, indexed by value (for counter registries). */
inline constexpr std::string_view kNeighCounterNames[kNumNeighCounters] = {
#define DROCE_NEIGH_COUNTER_NAME(name, text) #name,
    DROCE_NEIGH_COUNTERS(DROCE_NEIGH_COUNTER_NAME)
#undef DROCE_NEIGH_COUNTER_NAME
};

/** Counters of one responder. Written by the engine thread; other threads may read a recent value.
 */
struct NeighCounters : CounterBlock<NeighCounter, kNumNeighCounters> {};

// clang-format off
/** X(name, description) of what handle_frame() did with one frame. */
#define DROCE_NEIGH_STATUSES(X)                                                                     \
    X(not_neigh,          "not ARP and not ICMPv6 NS/NA: not neighbour traffic")                   \
    X(arp_request,        "ARP request for our address: sender learned, reply written")            \
    X(arp_reply,          "ARP reply to us: sender learned")                                       \
    X(arp_gratuitous,     "gratuitous ARP: sender learned or updated")                             \
    X(ns,                 "Neighbor Solicitation for our address: sender learned, NA written")     \
    X(na,                 "Neighbor Advertisement: target learned")                                \
    X(ignored_not_for_us, "well-formed, but for another host (or our own frame)")                  \
    X(malformed,          "truncated or inconsistent: dropped")                                    \
    X(bad_hop_limit,      "ND hop limit is not 255: dropped")                                      \
    X(bad_checksum,       "ICMPv6 checksum wrong: dropped")                                        \
    X(address_conflict,   "another host claims our address: nothing learned")                      \
    X(reply_no_room,      "a reply was due but reply_out is too small: nothing written")
// clang-format on

enum class NeighStatus : std::uint8_t {
#define DROCE_NEIGH_STATUS_ENUM(name, text) name,
    DROCE_NEIGH_STATUSES(DROCE_NEIGH_STATUS_ENUM)
#undef DROCE_NEIGH_STATUS_ENUM
};
/** Name of @p s, e.g. "arp_request". */
[[nodiscard]] std::string_view to_string(NeighStatus s) noexcept;
/** One-line explanation of @p s. */
[[nodiscard]] std::string_view describe(NeighStatus s) noexcept;

/** Result of NeighResponder::handle_frame(). */
struct NeighRx {
    NeighStatus status = NeighStatus::not_neigh;
    /** Bytes of the reply written at the start of reply_out; 0 when there is nothing to send. */
    std::size_t reply_len = 0;
};

/** Most IPv6 addresses one port answers for (e.g. a link-local and a global one, with spares). */
inline constexpr std::size_t kMaxPortIpv6 = 4;

/** The addresses a port answers for. */
struct NeighPortAddrs {
    wire::MacAddr mac{}; ///< the port's MAC; must be unicast
    std::optional<wire::Ipv4Addr> ipv4;
    std::array<wire::Ipv6Addr, kMaxPortIpv6> ipv6{};
    std::size_t n_ipv6 = 0; ///< ipv6[0 .. n_ipv6) are in use

    /** Appends @p a. @return false if kMaxPortIpv6 are already set or @p a is
     * multicast/unspecified. */
    bool add_ipv6(const wire::Ipv6Addr& a) noexcept;
    [[nodiscard]] bool has_ipv6(const wire::Ipv6Addr& a) const noexcept;
    [[nodiscard]] bool has_ipv4(const wire::Ipv4Addr& a) const noexcept {
        return ipv4 && *ipv4 == a;
    }
};

/** Bytes of an Ethernet frame without FCS below which the sender must pad (IEEE 802.3 minimum). */
inline constexpr std::size_t kEthMinFrame = 60;
/** Size of every ARP frame droce builds: 14 + 28, padded with zeros to kEthMinFrame; +4 with a VLAN
 * tag. */
inline constexpr std::size_t kArpFrameLen = kEthMinFrame;
/** Size of every NS/NA droce builds: Ethernet 14 + IPv6 40 + ICMPv6 4 + body 20 + link-layer
 * option 8. */
inline constexpr std::size_t kNdFrameLen = 86;
/** Room a reply buffer needs for any reply handle_frame() writes (an NA or ARP reply with a VLAN
 * tag). */
inline constexpr std::size_t kNeighMaxReply = kNdFrameLen + 4;

/**
 * Answers and learns from ARP and IPv6 ND frames of one port, and builds the port's requests.
 * Holds a borrowed NeighTable (which must outlive it) and a copy of the port's addresses.
 * Thread rules: the engine thread only. Nothing allocates or throws.
 */
class NeighResponder {
  public:
    /** @p table is borrowed and must outlive the responder; @p addrs is copied. */
    NeighResponder(NeighTable& table, const NeighPortAddrs& addrs) noexcept
        : table_(&table), addrs_(addrs) {}

    /**
     * Classifies one received Ethernet frame (optionally 802.1Q-tagged) and acts on it:
     *  - ARP request for our IPv4: learns the sender (hint), writes an ARP reply → arp_request.
     *    An RFC 5227 probe (sender 0.0.0.0) gets its reply but teaches nothing.
     *  - ARP reply to our IPv4: learns the sender (confirmed) → arp_reply.
     *  - Gratuitous ARP (sender IP == target IP, not ours): learns/updates the sender (hint) →
     * arp_gratuitous.
     *  - NS for one of our IPv6 addresses (hop limit 255, checksum, code 0, RFC 4861 §7.1.1
     * checks): learns the sender from its source link-layer option (hint), writes a solicited NA
     * with Override set and our MAC as target link-layer option, to the sender → ns. A DAD probe
     *    (source ::) is answered to ff02::1, unsolicited (§7.2.4).
     *  - NA (same checks, §7.1.2): learns the target from its target link-layer option, confirmed
     *    if Solicited, else update_only, honouring Override → na.
     *  - Anything else: not_neigh (nothing counted but not_neigh, nothing read beyond the headers).
     * Replies carry the request's VLAN tag. A reply is written only on arp_request and ns.
     *
     * @param frame     the received frame, Ethernet header first, without FCS; read only, within
     *                  its bounds; Ethernet padding after the message is allowed. Not kept.
     * @param reply_out where the reply is written; kNeighMaxReply bytes always suffice. Not kept;
     *                  untouched unless reply_len > 0.
     * @return the status (one counter is also incremented per outcome, see NeighCounter) and the
     *         reply length. Never fails otherwise: malformed frames are counted and dropped.
     */
    NeighRx handle_frame(std::span<const std::uint8_t> frame,
                         std::span<std::uint8_t> reply_out) noexcept;

    /**
     * Builds an ARP request (RFC 826) for @p target from our IPv4, broadcast, or unicast to
     * @p unicast_dst (a STALE refresh). The frame is padded to kArpFrameLen bytes.
     * @param vlan_tci 802.1Q TCI to tag the frame with, or nullopt for an untagged frame.
     * @return bytes written to @p out (kArpFrameLen, +4 with a tag); 0 if @p out is too small or
     *         the port has no IPv4 address (nothing written then).
     */
    std::size_t build_arp_request(const wire::Ipv4Addr& target, std::span<std::uint8_t> out,
                                  const std::optional<wire::MacAddr>& unicast_dst = std::nullopt,
                                  std::optional<std::uint16_t> vlan_tci = std::nullopt) noexcept;

    /**
     * Builds a Neighbor Solicitation (RFC 4861 §4.3, §7.2.2) for @p target: hop limit 255, source
     * link-layer option with our MAC, to the solicited-node multicast address of @p target and its
     * 33:33:ff:xx:xx:xx MAC, or unicast to @p target at @p unicast_dst (a STALE refresh). Source
     * address: our IPv6 address sharing @p target's /64 prefix, else the first one configured.
     * @return bytes written (kNdFrameLen, +4 with a tag); 0 if @p out is too small, the port has no
     *         IPv6 address, or @p target is multicast (nothing written then).
     */
    std::size_t build_ns(const wire::Ipv6Addr& target, std::span<std::uint8_t> out,
                         const std::optional<wire::MacAddr>& unicast_dst = std::nullopt,
                         std::optional<std::uint16_t> vlan_tci = std::nullopt) noexcept;

    /**
     * Builds the request lookup() asked for: build_arp_request() for an IPv4-mapped @p ip, else
     * build_ns(). Same return rules.
     */
    std::size_t build_request(const wire::Ipv6Addr& ip, std::span<std::uint8_t> out,
                              const std::optional<wire::MacAddr>& unicast_dst = std::nullopt,
                              std::optional<std::uint16_t> vlan_tci = std::nullopt) noexcept;

    /** This responder's counters (reset only by making a new responder). */
    [[nodiscard]] const NeighCounters& counters() const noexcept { return counters_; }
    /** The addresses this responder answers for (its own copy). */
    [[nodiscard]] const NeighPortAddrs& addrs() const noexcept { return addrs_; }
    /** The borrowed table it learns into. */
    [[nodiscard]] NeighTable& table() noexcept { return *table_; }

  private:
    NeighRx handle_arp(std::span<const std::uint8_t> frame, std::size_t l3,
                       std::span<std::uint8_t> out) noexcept;
    NeighRx handle_ipv6(std::span<const std::uint8_t> frame, std::size_t l3,
                        std::span<std::uint8_t> out) noexcept;
    NeighRx finish(NeighStatus s, NeighCounter c, std::size_t reply_len = 0) noexcept;
    void note_learn(NeighLearnResult r) noexcept;

    NeighTable* table_;
    NeighPortAddrs addrs_;
    NeighCounters counters_;
};

} // namespace droce
