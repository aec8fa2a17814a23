/* SPDX-License-Identifier: BSD-3-Clause */
#include "flow_explain.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "aeth_decode.h"
#include "mrc_decode.h"
#include "trace_explain.h"

namespace droce::trace {

namespace wire = droce::wire;
using wire::OpFlags;
using Json = nlohmann::ordered_json;

const char* to_string(FlowEventKind k) noexcept {
    switch (k) {
    case FlowEventKind::packets:
        return "packets";
    case FlowEventKind::nak:
        return "nak";
    case FlowEventKind::error_nak:
        return "error_nak";
    case FlowEventKind::rnr_nak:
        return "rnr_nak";
    case FlowEventKind::retransmit:
        return "retransmit";
    case FlowEventKind::cnp:
        return "cnp";
    case FlowEventKind::mrc_nack:
        return "mrc_nack";
    case FlowEventKind::port_status:
        return "port_status";
    case FlowEventKind::plane_down:
        return "plane_down";
    case FlowEventKind::plane_up:
        return "plane_up";
    }
    return "unknown";
}

namespace {

/** What a packet is to its connection. */
enum class Role : std::uint8_t { request, response, cnp, port_status };

/** The fields of one RoCEv2 packet the story needs, copied out of the frame. */
struct Pkt {
    std::uint64_t frame = 0;
    std::int64_t t = 0; ///< ns since the capture's first frame
    int plane = -1;
    wire::Opcode op{};
    const wire::OpcodeInfo* info = nullptr;
    Role role = Role::request;
    std::uint32_t qpn = 0, psn = 0;
    std::uint32_t wire_len = 0;
    std::string src, dst;
    bool aeth = false;
    std::uint8_t syndrome = 0;
    bool mdeth = false;
    std::uint16_t path = 0;
    std::uint8_t mflags = 0;
    bool seth = false;
    std::uint32_t cum = 0;
    std::vector<PsnRange> holes;
    bool sack_cut = false; ///< the capture cut this SACK inside its bitmap
    bool neth = false;
    std::uint8_t reason = 0;
    std::uint32_t npsn = 0;
    std::uint32_t read_len = 0; ///< an RC READ request's RETH DMA length
    std::uint8_t port_mask = 0;
    bool outbound = false, inbound = false; ///< the capture's direction flags
    std::uint64_t key = 0;                  ///< twin_key(): equal for the copies of one packet
    bool arrival_known = false; ///< an outbound request whose received copies are captured too
    bool lost_on_wire = false;  ///< ... and this copy is one that was not received
};

std::string ip_text(const wire::ParsedFrame& p, bool src) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (p.ipv4 != nullptr) {
        inet_ntop(AF_INET, src ? p.ipv4->src.data() : p.ipv4->dst.data(), buf, sizeof buf);
    } else if (p.ipv6 != nullptr) {
        inet_ntop(AF_INET6, src ? p.ipv6->src.data() : p.ipv6->dst.data(), buf, sizeof buf);
    }
    return buf;
}

/** FNV-1a over the bytes from the UDP header on: the same packet sent and received hashes alike
 *  even when a switch (the impairment stage) rewrote the IP ECN bits on the way. */
std::uint64_t twin_key(const wire::ParsedFrame& p, std::span<const std::uint8_t> bytes,
                       std::uint32_t wire_len) {
    std::uint64_t h = 1469598103934665603ull ^ wire_len;
    const auto* udp = reinterpret_cast<const std::uint8_t*>(p.udp);
    const std::uint8_t* end = bytes.data() + bytes.size();
    for (const std::uint8_t* b = udp; b < end; ++b) {
        h ^= *b;
        h *= 1099511628211ull;
    }
    return h;
}

std::int32_t dist(std::uint32_t a, std::uint32_t b) {
    return wire::Psn(a).distance_from(wire::Psn(b));
}

std::string ms(std::int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(ns) / 1e6);
    return buf;
}

double ms_value(std::int64_t ns) {
    return static_cast<double>(static_cast<std::int64_t>(static_cast<double>(ns) / 1e3)) / 1e3;
}

std::string qpn_text(std::uint32_t q) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%06x", q);
    return buf;
}

/** "PSN 5" or "PSNs 5-9" of a contiguous run. */
std::string psns_text(std::uint32_t first, std::uint32_t last) {
    if (first == last) return "PSN " + std::to_string(first);
    return "PSNs " + std::to_string(first) + "-" + std::to_string(last);
}

/** PSNs as ranges (in the order given, consecutive ones merged). */
std::vector<PsnRange> to_ranges(const std::vector<std::uint32_t>& psns) {
    std::vector<PsnRange> v;
    for (std::uint32_t p : psns) {
        if (!v.empty() && (v.back().last + 1) % (wire::Psn::kMask + 1) == p) {
            v.back().last = p;
        } else {
            v.push_back({p, p});
        }
    }
    return v;
}

/** format_ranges(), the first 12 ranges only, then how many more. */
std::string short_ranges(const std::vector<PsnRange>& r) {
    if (r.size() <= 12) return format_ranges(r);
    std::uint64_t more = 0;
    for (std::size_t i = 12; i < r.size(); ++i)
        more += r[i].count();
    return format_ranges(std::vector<PsnRange>(r.begin(), r.begin() + 12)) + " and " +
           std::to_string(more) + " more";
}

std::string plane_set_text(const std::vector<int>& planes) {
    std::string s;
    for (int p : planes) {
        if (!s.empty()) s += ',';
        s += p < 0 ? std::string("?") : std::to_string(p);
    }
    return s;
}

/** Short opcode name without the transport prefix: "RDMA_WRITE_FIRST". */
std::string short_op(const Pkt& k) {
    std::string n(k.info != nullptr ? k.info->name : "UNKNOWN");
    for (const char* pre : {"RC_", "UC_", "UD_", "MRC_"})
        if (n.rfind(pre, 0) == 0) return n.substr(std::string(pre).size());
    return n;
}

/** A PSN further than this from every PSN a QPN carried is a new QP that got the number back
 *  (QPNs are reused, start PSNs are random): a new connection. A go-back-N never goes back
 *  further than the window of a few thousand packets, nor does a capture start more than that
 *  many packets after the oldest request still unacknowledged. */
constexpr std::int32_t kNewQpGap = 1 << 16;

/** A connection being built: its packets in capture order and what it has learnt. */
struct Conn {
    FlowConnection out;
    bool mrc = false;
    bool arrival_known = false; ///< at least one request's inbound twin is in the capture
    std::vector<Pkt> pkts;
    std::uint32_t psn_lo = 0, psn_hi = 0; ///< request PSNs seen, serial range
    bool any_psn = false;
    /** Last PSN the responses to the READs seen may carry: a READ of n bytes is answered in up to
     *  ceil(n / 256) packets (256: the smallest path MTU), one PSN each from its request's. */
    std::uint32_t read_hi = 0;
    bool any_read = false;
    std::int64_t last_t = 0;
    std::set<std::string> requester_ips; ///< source addresses of its requests (one per plane)
};

} // namespace

struct FlowExplainer::Impl {
    std::vector<Conn> conns;
    std::map<std::string, std::size_t> by_key;
    std::vector<Pkt> all;     ///< every RoCEv2 packet, in file order, until place_all()
    std::vector<Pkt> orphans; ///< responses and CNPs no connection claimed (kept for counts)
    std::uint64_t frames = 0, roce_frames = 0, roce_packets = 0, twins = 0, rejected = 0;
    std::uint64_t gso_sends = 0, gso_packets = 0;
    std::map<int, std::uint64_t> not_ethernet; ///< link type -> frames skipped
    std::vector<std::pair<std::uint64_t, std::string>> rejected_first;
    bool directions = false;
    bool have_t0 = false;
    std::int64_t t0 = 0;
    std::vector<std::uint8_t> padded;

    std::size_t conn_for_request(const Pkt& k, bool mrc, wire::Transport t) {
        const std::string tn = mrc                        ? "MRC"
                               : t == wire::Transport::uc ? "UC"
                               : t == wire::Transport::ud ? "UD"
                                                          : "RC";
        std::string key = tn + "|" + std::to_string(k.qpn);
        if (!mrc) key += "|" + k.src + ">" + k.dst;
        auto it = by_key.find(key);
        if (it != by_key.end()) {
            const Conn& old = conns[it->second];
            if (!old.any_psn ||
                (dist(k.psn, old.psn_hi) <= kNewQpGap && dist(k.psn, old.psn_lo) >= -kNewQpGap))
                return it->second;
            by_key.erase(it);
        }
        Conn c;
        c.mrc = mrc;
        c.out.transport = tn;
        c.out.requester_ip = k.src;
        c.out.responder_ip = k.dst;
        c.out.responder_qpn = k.qpn;
        c.out.first_psn = k.psn;
        conns.push_back(std::move(c));
        by_key.emplace(key, conns.size() - 1);
        return conns.size() - 1;
    }

    /**
     * The connection a response, CNP or port status belongs to, or SIZE_MAX. @p before_capture:
     * once every request is placed, a response to PSNs just below a connection's first captured
     * request (a capture started while that QP ran: the ACK of requests sent before it) is that
     * connection's, when no connection's range holds it.
     */
    std::size_t conn_for_reply(const Pkt& k, bool mrc, bool before_capture = false) {
        // The requester's QPN is this packet's destination, but the requests do not carry it, and
        // a QPN comes back when a QP is destroyed and another created: among the connections of
        // the same transport (RC: the reversed addresses) whose requester QPN is this one or not
        // yet known, the latest whose PSNs this packet acknowledges; without a PSN (CNP, port
        // status, probe reply), the latest already named, else the latest.
        const bool has_psn =
            k.aeth || k.seth || k.neth || (k.info != nullptr && k.info->is(OpFlags::read));
        std::uint32_t psn = k.psn;
        if (k.seth) psn = (k.cum - 1) & wire::Psn::kMask;
        if (k.neth) psn = k.npsn;
        std::size_t named = SIZE_MAX, unnamed = SIZE_MAX, earlier = SIZE_MAX;
        for (std::size_t i = conns.size(); i-- > 0;) {
            const Conn& c = conns[i];
            if (c.out.requester_qpn && *c.out.requester_qpn != k.qpn) continue;
            if (k.role == Role::port_status) {
                // Sent by either end: to the responder's QPN by the requester, or to the
                // requester's.
                if (!c.mrc) continue;
                if (c.out.responder_qpn == k.qpn || c.out.requester_qpn == k.qpn) return i;
                if (unnamed == SIZE_MAX) unnamed = i;
                continue;
            }
            if (c.mrc != mrc && k.role != Role::cnp) continue;
            if (c.out.transport == "UD" && k.role != Role::cnp) continue; // UD is never answered
            if (!c.mrc && (c.out.requester_ip != k.dst || c.out.responder_ip != k.src)) continue;
            if (has_psn) {
                if (c.any_psn && dist(psn, c.psn_lo) >= -1 && dist(psn, c.psn_hi) <= 1) {
                    named = i;
                    break;
                }
                if (k.info != nullptr && k.info->is(OpFlags::read) && c.any_read &&
                    dist(psn, c.psn_lo) >= 0 && dist(psn, c.read_hi) <= 0) {
                    named = i; // a later packet of a READ's response
                    break;
                }
                if (before_capture && earlier == SIZE_MAX && c.any_psn &&
                    dist(psn, c.psn_lo) >= -kNewQpGap && dist(psn, c.psn_lo) < -1)
                    earlier = i;
                continue;
            }
            if (c.out.requester_qpn) {
                if (named == SIZE_MAX) named = i;
            } else if (unnamed == SIZE_MAX) {
                unnamed = i;
            }
        }
        if (named == SIZE_MAX) named = earlier;
        const std::size_t best = named != SIZE_MAX ? named : unnamed;
        if (best != SIZE_MAX && k.role != Role::port_status) conns[best].out.requester_qpn = k.qpn;
        return best;
    }

    void add(const RawFrame& raw) {
        ++frames;
        if (raw.direction != kDirUnknown) directions = true;
        if (!have_t0) {
            t0 = raw.ts_ns;
            have_t0 = true;
        }
        if (raw.link_type != kLinkTypeEthernet) {
            ++not_ethernet[raw.link_type];
            return;
        }
        wire::RejectReason why = wire::RejectReason::ok;
        if (add_packet(raw, why)) {
            ++roce_frames;
            return;
        }
        if (why == wire::RejectReason::ok) return; // not RoCEv2
        // A frame a receiver would reject, unless it is a UDP GSO send captured before the kernel
        // cut it: then it is one frame of several packets, each as the receiver gets it.
        const std::vector<std::vector<std::uint8_t>> segments = split_gso_send(raw);
        if (!segments.empty()) {
            ++roce_frames;
            ++gso_sends;
            gso_packets += segments.size();
            for (std::size_t k = 0; k < segments.size(); ++k) {
                RawFrame seg = raw;
                seg.bytes = segments[k];
                seg.wire_length = static_cast<std::uint32_t>(segments[k].size());
                seg.gso_segment = static_cast<std::uint16_t>(k + 1);
                seg.gso_segments = static_cast<std::uint16_t>(segments.size());
                wire::RejectReason seg_why = wire::RejectReason::ok;
                add_packet(seg, seg_why); // split_gso_send() parsed each one: accepted
            }
            return;
        }
        ++rejected;
        if (rejected_first.size() < 8)
            rejected_first.emplace_back(raw.index, std::string(wire::to_string(why)));
    }

    /** True when the headers of @p p (BTH and extended headers; of a SETH its fixed fields, the
     *  bitmap may be cut: sack_cut) end after @p captured_end, the last byte the capture kept. */
    static bool headers_cut(const wire::ParsedFrame& p, const std::uint8_t* captured_end) {
        const std::uint8_t* end = p.payload.data();
        if (const wire::Seth* h = p.seth())
            end = reinterpret_cast<const std::uint8_t*>(h) + offsetof(wire::Seth, bitmap);
        if (end == nullptr) end = reinterpret_cast<const std::uint8_t*>(p.bth) + sizeof(wire::Bth);
        return end > captured_end;
    }

    /**
     * Takes the RoCEv2 packet @p raw holds, if any: true when taken; false with @p why set when it
     * is RoCEv2 a receiver rejects, false with @p why ok when it is not RoCEv2 at all (or when
     * the snap length cut its headers: counted among the rejected here).
     */
    bool add_packet(const RawFrame& raw, wire::RejectReason& why) {
        why = wire::RejectReason::ok;
        std::span<const std::uint8_t> bytes = raw.bytes;
        const bool cut = raw.wire_length > bytes.size();
        if (cut) {
            // A frame cut by the snap length: read its headers with the missing bytes as zeros.
            // The length comes from the file: one no Ethernet frame can have (an IP packet is at
            // most 65535 bytes) is a damaged record, not a frame to allocate for.
            constexpr std::uint32_t kMaxEthernetFrame = 14 + 4 + 65535;
            if (raw.wire_length > kMaxEthernetFrame) return false;
            padded.assign(raw.wire_length, 0);
            std::copy(bytes.begin(), bytes.end(), padded.begin());
            bytes = padded;
        }
        wire::ParsedFrame p;
        wire::ParseOptions opts;
        opts.verify_icrc = !cut;
        const wire::RejectReason parsed = wire::parse_frame(bytes, p, opts);
        if (parsed != wire::RejectReason::ok || p.bth == nullptr || p.info == nullptr) {
            // RoCEv2 a receiver drops (past the UDP port check): add() counts it.
            if (p.bth != nullptr) why = parsed;
            return false;
        }
        if (cut && headers_cut(p, bytes.data() + raw.bytes.size())) {
            // The snap length cut the BTH or an extended header: the zeros read in their place
            // would be taken for a PSN, an opcode's fields, an AETH syndrome and told as a story
            // (an RC connection to QP 0 "sent again 4 times" from a UD capture cut at 42 bytes).
            ++rejected;
            if (rejected_first.size() < 8)
                rejected_first.emplace_back(raw.index,
                                            "cut by the snap length inside its RoCE headers");
            return false; // counted here; add() takes a false with why ok as not RoCEv2
        }
        ++roce_packets;
        Pkt k;
        k.frame = raw.index;
        k.t = raw.ts_ns - t0;
        k.op = p.bth->opcode();
        k.info = p.info;
        k.qpn = p.bth->dest_qp();
        k.psn = p.bth->psn().value();
        k.wire_len = raw.wire_length;
        k.src = ip_text(p, true);
        k.dst = ip_text(p, false);
        k.outbound = raw.direction == kDirOutbound;
        const wire::Transport tr = wire::transport_of(k.op);
        const bool mrc = tr == wire::Transport::mrc;
        if (mrc && raw.interface) k.plane = static_cast<int>(*raw.interface);
        if (p.aeth != nullptr) {
            k.aeth = true;
            k.syndrome = p.aeth->syndrome;
        }
        if (k.op == wire::Opcode::RC_RDMA_READ_REQUEST && p.reth != nullptr)
            k.read_len = p.reth->dma_len.get();
        if (const wire::Mdeth* m = p.mdeth()) {
            k.mdeth = true;
            k.path = m->path.get();
            k.mflags = m->flags;
        }
        if (const wire::Seth* h = p.seth()) {
            k.seth = true;
            k.cum = h->cum_psn.get() & wire::Psn::kMask;
            // A SACK cut inside its bitmap by the snap length: the zeros behind the cut are not
            // holes, so report none rather than invent them.
            const auto* seth_end = reinterpret_cast<const std::uint8_t*>(h) + sizeof(wire::Seth);
            k.sack_cut = seth_end > bytes.data() + raw.bytes.size();
            if (!k.sack_cut) k.holes = sack_holes(*h);
        }
        if (const wire::Neth* h = p.neth()) {
            k.neth = true;
            k.reason = h->reason;
            k.npsn = h->psn.get() & wire::Psn::kMask;
        }
        if (const wire::Epeth* h = p.epeth()) k.port_mask = h->port_mask;
        if (p.info->is(OpFlags::cnp)) {
            k.role = Role::cnp;
        } else if (k.op == wire::Opcode::MRC_PORT_STATUS) {
            k.role = Role::port_status;
        } else if (p.info->is(OpFlags::response)) {
            k.role = Role::response;
        } else {
            k.role = Role::request;
        }
        k.key = twin_key(p, bytes.subspan(0, raw.bytes.size()), raw.wire_length);
        k.inbound = raw.direction == kDirInbound;
        all.push_back(std::move(k));
        return true;
    }

    /**
     * Drops the second copy of every packet captured at both ends and gives the rest to their
     * connections, in file order. Which copy stays: the one on the requester's side (a request as
     * it was sent, a response as it was received), so that a connection's story is told by one
     * device's clock and in its order. (Two devices' frames in one file need not be in time order
     * between the devices, nor their clocks agree to the microsecond.) Copies are matched by
     * content, not by time: a request sent n times and received m < n times lost n - m copies,
     * taken to be its first ones (a loss is what makes a sender repeat itself).
     */
    void place_all() {
        std::unordered_map<std::uint64_t, std::uint32_t> out_n, in_n;
        for (const Pkt& k : all)
            ++(k.inbound ? in_n : k.outbound ? out_n : in_n)[k.key];
        std::unordered_map<std::uint64_t, std::uint32_t> seen_out, dropped_in;
        for (Pkt& k : all) {
            const bool sender_side = k.role == Role::request || k.role == Role::port_status;
            if (k.outbound) {
                const std::uint32_t outs = out_n[k.key];
                const std::uint32_t ins = in_n.count(k.key) ? in_n[k.key] : 0;
                if (ins > 0 && !sender_side) {
                    ++twins; // a response as its responder sent it: its received copy stays
                    continue;
                }
                if (sender_side && ins > 0) {
                    k.arrival_known = true;
                    // The first outs - ins copies are the ones that did not arrive.
                    k.lost_on_wire = seen_out[k.key]++ < (outs > ins ? outs - ins : 0);
                }
            } else if (k.inbound && out_n.count(k.key) != 0) {
                if (sender_side) {
                    ++twins; // a request as received: its sent copy stays
                    continue;
                }
            }
            place(std::move(k));
        }
        all.clear();
    }

    void place(Pkt&& k) {
        const wire::Transport tr = wire::transport_of(k.op);
        const bool mrc = tr == wire::Transport::mrc;
        std::size_t ci;
        if (k.role == Role::request && k.op != wire::Opcode::MRC_PROBE) {
            ci = conn_for_request(k, mrc, tr);
        } else {
            ci = conn_for_reply(k, mrc);
            if (ci == SIZE_MAX && k.op == wire::Opcode::MRC_PROBE) {
                for (std::size_t i = 0; i < conns.size(); ++i)
                    if (conns[i].mrc && conns[i].out.responder_qpn == k.qpn) ci = i;
            }
        }
        if (ci == SIZE_MAX) {
            orphans.push_back(std::move(k));
            return;
        }
        Conn& c = conns[ci];
        if (k.role == Role::request && k.op != wire::Opcode::MRC_PROBE) {
            if (!c.any_psn) {
                c.psn_lo = c.psn_hi = k.psn;
                c.any_psn = true;
            } else {
                if (dist(k.psn, c.psn_hi) > 0) c.psn_hi = k.psn;
                if (dist(k.psn, c.psn_lo) < 0) c.psn_lo = k.psn;
            }
            if (k.op == wire::Opcode::RC_RDMA_READ_REQUEST) {
                const std::uint32_t n = std::max<std::uint32_t>(1, (k.read_len + 255) / 256);
                const std::uint32_t last = (k.psn + n - 1) & wire::Psn::kMask;
                if (!c.any_read || dist(last, c.read_hi) > 0) c.read_hi = last;
                c.any_read = true;
            }
        }
        c.last_t = k.t;
        if (k.role == Role::request) c.requester_ips.insert(k.src);
        if (k.arrival_known && k.role == Role::request) c.arrival_known = true;
        c.pkts.push_back(std::move(k));
    }
};

namespace {

/** Walks one connection's packets and writes its story. */
class Narrator {
  public:
    explicit Narrator(Conn& c) : c_(c), o_(c.out) {}

    void run() {
        if (c_.pkts.empty()) return;
        o_.first_frame = c_.pkts.front().frame;
        o_.last_frame = c_.pkts.back().frame;
        o_.t_first_ns = c_.pkts.front().t;
        o_.t_last_ns = c_.pkts.back().t;
        for (const Pkt& k : c_.pkts)
            if (k.role == Role::request && k.op != wire::Opcode::MRC_PROBE) req_.push_back(&k);
        if (c_.mrc) find_plane_silences();
        for (std::size_t i = 0; i < c_.pkts.size(); ++i) {
            const Pkt& k = c_.pkts[i];
            emit_plane_events_before(k.t);
            switch (k.role) {
            case Role::request:
                if (k.op == wire::Opcode::MRC_PROBE) {
                    ++run_.probes;
                    touch_run(k);
                } else {
                    on_request(k);
                }
                break;
            case Role::response:
                on_response(k);
                break;
            case Role::cnp:
                on_cnp(k);
                break;
            case Role::port_status:
                on_port_status(k);
                break;
            }
        }
        emit_plane_events_before(INT64_MAX);
        flush_run();
        close_retx();
        flush_port_status();
        close_cnp_episode();
        cnp_rates();
        unsent_event();
        for (std::size_t m = 0; m < o_.marks.size(); ++m)
            if (req_[m]->lost_on_wire) o_.marks[m].kind = kMarkLost;
        for (const FlowMark& m : o_.marks)
            if (m.kind == kMarkLost) ++o_.lost;
        o_.both_ends = c_.arrival_known;
    }

  private:
    /** An in-order run being collected. */
    struct Run {
        bool open = false;
        std::uint64_t first_frame = 0, last_frame = 0;
        std::int64_t t0 = 0, t1 = 0;
        std::uint64_t packets = 0, acks = 0, sacks = 0, read_resp = 0, probes = 0, replies = 0;
        std::uint64_t sacks_with_holes = 0;
        bool have_psn = false;
        std::uint32_t psn_first = 0, psn_last = 0;
        bool have_ack = false;
        std::uint32_t ack_psn = 0;
        std::map<std::string, std::uint64_t> ops;
        std::map<int, std::uint64_t> planes;
    };
    /** A group of retransmissions with one cause. */
    struct Retx {
        bool open = false;
        std::string cause; ///< sequence_nak, rnr, timeout, read_response_gap, sack_hole, ...
        std::string why;
        std::uint64_t first_frame = 0, last_frame = 0;
        std::int64_t t0 = 0;
        std::vector<std::uint32_t> psns;
        std::vector<int> planes;
        std::int64_t t1 = 0;       ///< time of the last packet
        std::uint64_t bursts = 1;  ///< resends of one episode merged into this group
        std::uint64_t between = 0; ///< ACKs and SACKs between the bursts
    };
    /** A NAK or RNR NAK waiting for the resend it causes. */
    struct Trigger {
        bool armed = false;
        bool rnr = false;
        std::uint64_t frame = 0;
        std::int64_t t = 0;
        std::uint32_t psn = 0;
        std::size_t event = SIZE_MAX;
    };
    struct Silence {
        int plane = -1;
        std::int64_t t_last = 0; ///< last packet before the silence
        std::uint64_t frame = 0;
        std::int64_t t_back = -1; ///< first packet after it, -1 when the plane never came back
        std::uint64_t back_frame = 0;
        std::uint64_t others = 0; ///< packets the other planes sent during it
        bool down_emitted = false, up_emitted = false;
    };

    std::int64_t psn_off(std::uint32_t psn) const { return dist(psn, o_.first_psn); }

    FlowEvent& event(FlowEventKind kind, const Pkt& k, std::string text) {
        FlowEvent e;
        e.kind = kind;
        e.first_frame = e.last_frame = k.frame;
        e.t_ns = k.t;
        e.text = std::move(text);
        o_.events.push_back(std::move(e));
        return o_.events.back();
    }

    void marker(std::int64_t t, std::int64_t off, const char* type, std::string label) {
        o_.markers.push_back(FlowMarker{t, off, type, std::move(label)});
    }

    void touch_run(const Pkt& k) {
        if (!run_.open) {
            run_ = Run{};
            run_.open = true;
            run_.first_frame = k.frame;
            run_.t0 = k.t;
        }
        run_.last_frame = k.frame;
        run_.t1 = k.t;
    }

    void flush_run() {
        if (!run_.open) return;
        Run r = std::move(run_);
        run_ = Run{};
        FlowEvent e;
        e.kind = FlowEventKind::packets;
        e.first_frame = r.first_frame;
        e.last_frame = r.last_frame;
        e.t_ns = r.t0;
        std::string s;
        if (r.packets > 0) {
            s = psns_text(r.psn_first, r.psn_last) +
                " sent in order: " + std::to_string(r.packets) + " packet" +
                (r.packets == 1 ? "" : "s") + " (";
            bool first = true;
            for (const auto& [op, n] : r.ops) {
                s += (first ? "" : ", ") + std::to_string(n) + " " + op;
                first = false;
            }
            s += ")";
            if (c_.mrc && !r.planes.empty()) {
                s += ", by plane";
                for (const auto& [pl, n] : r.planes)
                    s += " " + (pl < 0 ? std::string("?") : std::to_string(pl)) + ":" +
                         std::to_string(n);
            }
            e.data["psn_first"] = r.psn_first;
            e.data["psn_last"] = r.psn_last;
        }
        auto clause = [&](const std::string& t) { s += (s.empty() ? "" : "; ") + t; };
        if (r.acks > 0) {
            clause(std::to_string(r.acks) + " ACK" + (r.acks == 1 ? "" : "s") +
                   (r.have_ack ? ", the last for PSN " + std::to_string(r.ack_psn) : ""));
        }
        if (r.read_resp > 0) clause(std::to_string(r.read_resp) + " READ response packets");
        if (r.sacks > 0) {
            std::string t = std::to_string(r.sacks) + " SACK" + (r.sacks == 1 ? "" : "s") +
                            (r.have_ack ? ", cumulative PSN " + std::to_string(r.ack_psn) : "");
            if (r.sacks_with_holes > 0) {
                t += " (" + std::to_string(r.sacks_with_holes) +
                     " of them showed a hole, packets still on their way while later ones had "
                     "arrived: spraying over paths reorders; nothing had to be resent for those)";
            }
            clause(t);
        }
        if (r.probes > 0) clause(std::to_string(r.probes) + " path probes");
        if (r.replies > 0) clause(std::to_string(r.replies) + " probe replies");
        e.text = s;
        e.data["packets"] = r.packets;
        e.data["acks"] = r.acks;
        e.data["sacks"] = r.sacks;
        o_.events.push_back(std::move(e));
    }

    void close_retx() {
        if (!retx_.open) return;
        Retx r = std::move(retx_);
        retx_ = Retx{};
        // A resend that follows an earlier one of the same cause with nothing new sent in
        // between (only ACKs, SACKs or probes) is the same episode, e.g. a timeout storm: one
        // line for all of it keeps the story readable.
        bool merge = last_retx_event_ < o_.events.size() && last_retx_.cause == r.cause &&
                     r.cause != "sequence_nak";
        std::uint64_t between = 0;
        for (std::size_t i = last_retx_event_ + 1; merge && i < o_.events.size(); ++i) {
            const FlowEvent& e = o_.events[i];
            if (e.kind != FlowEventKind::packets || e.data.value("packets", 1) != 0) {
                merge = false;
            } else {
                between += e.data.value("acks", 0) + e.data.value("sacks", 0);
            }
        }
        if (merge) {
            o_.events.resize(last_retx_event_ + 1);
            last_retx_.psns.insert(last_retx_.psns.end(), r.psns.begin(), r.psns.end());
            last_retx_.planes.insert(last_retx_.planes.end(), r.planes.begin(), r.planes.end());
            last_retx_.last_frame = r.last_frame;
            last_retx_.t1 = r.t1;
            ++last_retx_.bursts;
            last_retx_.between += between;
            o_.events.back() = retx_event(last_retx_);
            return;
        }
        last_retx_ = std::move(r);
        last_retx_event_ = o_.events.size();
        o_.events.push_back(retx_event(last_retx_));
    }

    FlowEvent retx_event(const Retx& r) const {
        FlowEvent e;
        e.kind = FlowEventKind::retransmit;
        e.first_frame = r.first_frame;
        e.last_frame = r.last_frame;
        e.t_ns = r.t0;
        // The distinct PSNs in serial order: a storm resends the same ones many times.
        std::vector<std::uint32_t> psns = r.psns;
        const std::uint32_t base = psns.empty() ? 0 : psns.front();
        std::sort(psns.begin(), psns.end(), [base](std::uint32_t a, std::uint32_t b) {
            return dist(a, base) < dist(b, base);
        });
        psns.erase(std::unique(psns.begin(), psns.end()), psns.end());
        std::vector<PsnRange> ranges = to_ranges(psns);
        std::vector<int> planes = r.planes;
        std::sort(planes.begin(), planes.end());
        planes.erase(std::unique(planes.begin(), planes.end()), planes.end());
        e.text = std::to_string(r.psns.size()) + " packet" + (r.psns.size() == 1 ? "" : "s") +
                 " sent again";
        if (r.bursts > 1) {
            e.text += " in " + std::to_string(r.bursts) + " bursts over " + ms(r.t1 - r.t0) + " (" +
                      std::to_string(r.between) + " ACKs/SACKs in between, nothing new sent)";
        }
        e.text += " (PSN " + short_ranges(ranges);
        if (psns.size() != r.psns.size())
            e.text += "; " + std::to_string(psns.size()) + " distinct";
        e.text += ")";
        if (c_.mrc)
            e.text +=
                " on plane" + std::string(planes.size() == 1 ? " " : "s ") + plane_set_text(planes);
        e.text += ": " + r.why;
        e.data["cause"] = r.cause;
        e.data["count"] = r.psns.size();
        e.data["distinct"] = psns.size();
        e.data["bursts"] = r.bursts;
        e.data["psns"] = format_ranges(ranges);
        Json pl = Json::array();
        for (int p : planes)
            pl.push_back(p);
        if (c_.mrc) e.data["planes"] = pl;
        return e;
    }

    /** One line for the requests seen only as received (both ends captured, see on_request()). */
    void unsent_event() {
        if (unsent_.count == 0) return;
        std::vector<std::uint32_t> psns = unsent_.psns;
        const std::uint32_t base = psns.front();
        std::sort(psns.begin(), psns.end(), [base](std::uint32_t a, std::uint32_t b) {
            return dist(a, base) < dist(b, base);
        });
        FlowEvent e;
        e.kind = FlowEventKind::packets;
        e.first_frame = unsent_.first_frame;
        e.last_frame = unsent_.last_frame;
        e.t_ns = unsent_.t0;
        e.text = std::to_string(unsent_.count) + " request packet" +
                 (unsent_.count == 1 ? "" : "s") + " (PSN " + short_ranges(to_ranges(psns)) +
                 ") seen only as received: the capture holds both ends but not their sending, "
                 "which fell before it began (or the capture missed it). First copies, not "
                 "retransmissions.";
        e.data["packets"] = unsent_.count;
        e.data["received_only"] = unsent_.count;
        e.data["psns"] = format_ranges(to_ranges(psns));
        o_.events.push_back(std::move(e));
    }

    /**
     * Marks the latest copy of @p psn sent before @p t as lost, as what followed (a NAK, a timeout,
     * a dead plane) implies. Not a copy captured as received, nor one whose received twin is in
     * the capture: it arrived (its ACK may be what went missing), and a copy that did not arrive
     * is already marked by place_all(); counting both made one PSN sent three times and received
     * twice count twice.
     */
    void mark_lost(std::uint32_t psn, std::int64_t t) {
        auto it = last_copy_.find(psn);
        if (it == last_copy_.end()) return;
        const Pkt& sent = *req_[it->second];
        if (sent.inbound || (sent.arrival_known && !sent.lost_on_wire)) return;
        FlowMark& m = o_.marks[it->second];
        if (m.t_ns <= t) m.kind = kMarkLost;
    }

    void on_request(const Pkt& k) {
        ++o_.requests;
        const bool seen = last_copy_.count(k.psn) != 0;
        const bool flagged = k.mdeth && (k.mflags & wire::kMdethRetransmit);
        // Both ends captured: a received request left here has no sent copy in the file (place_all
        // dropped the received twins of those that do). Without an earlier copy of its PSN, its
        // one transmission fell before the capture began (or the capture missed it): a first
        // copy, however far behind the sender's front it comes in the file.
        const bool unsent = c_.arrival_known && k.inbound && !seen && !flagged;
        const bool retx = !unsent && (seen || (have_max_ && dist(k.psn, max_psn_) <= 0) || flagged);
        if (c_.mrc) {
            const std::size_t pl = k.plane < 0 ? 0 : static_cast<std::size_t>(k.plane);
            if (o_.plane_packets.size() <= pl) {
                o_.plane_packets.resize(pl + 1);
                o_.plane_retx.resize(pl + 1);
            }
            ++o_.plane_packets[pl];
            if (retx) ++o_.plane_retx[pl];
            if (k.mdeth) {
                if (o_.plane_paths.size() <= pl) o_.plane_paths.resize(pl + 1);
                auto& paths = o_.plane_paths[pl];
                if (std::find(paths.begin(), paths.end(), k.path) == paths.end()) {
                    paths.insert(std::upper_bound(paths.begin(), paths.end(), k.path), k.path);
                }
            }
        }
        FlowMark m;
        m.t_ns = k.t;
        m.psn_off = psn_off(k.psn);
        m.plane = k.plane;
        m.kind = retx ? kMarkRetx : kMarkNew;
        m.frame = k.frame;
        m.psn = k.psn;
        if (retx) {
            ++o_.retransmissions;
            flush_run();
            if (c_.mrc) {
                on_mrc_retx(k);
            } else {
                on_rc_retx(k);
            }
        } else if (unsent) {
            // Told apart from the in-order runs: their PSNs are behind the sender's front.
            ++o_.new_psns;
            ++o_.sent_before_capture;
            if (unsent_.count == 0) {
                unsent_.first_frame = k.frame;
                unsent_.t0 = k.t;
            }
            ++unsent_.count;
            unsent_.last_frame = k.frame;
            unsent_.psns.push_back(k.psn);
            plane_of_.insert_or_assign(k.psn, k.plane);
            last_copy_.insert_or_assign(k.psn, o_.marks.size());
            o_.marks.push_back(m);
            return;
        } else {
            close_retx();
            ++o_.new_psns;
            touch_run(k);
            ++run_.packets;
            if (!run_.have_psn) run_.psn_first = k.psn;
            run_.have_psn = true;
            run_.psn_last = k.psn;
            ++run_.ops[short_op(k)];
            if (c_.mrc) ++run_.planes[k.plane];
            if (have_new_ && dist(k.psn, last_new_) > 1) span_[last_new_] = dist(k.psn, last_new_);
            last_new_ = k.psn;
            have_new_ = true;
            max_psn_ = k.psn;
            have_max_ = true;
        }
        prev_req_t_ = k.t;
        prev_req_frame_ = k.frame;
        plane_of_.insert_or_assign(k.psn, k.plane);
        last_copy_.insert_or_assign(k.psn, o_.marks.size());
        o_.marks.push_back(m);
    }

    void on_rc_retx(const Pkt& k) {
        // The next request of the pass: one PSN on, or a READ request's span on (a READ request
        // takes as many PSNs as its response has packets).
        const auto sp = span_.find(pass_psn_);
        const std::int32_t step = dist(k.psn, pass_psn_);
        // A pass resends what was sent before it began: a packet first sent after the pass's
        // start (new, once the pass had caught up) that goes again has a cause of its own.
        const auto prev = last_copy_.find(k.psn);
        const bool sent_during_pass =
            prev != last_copy_.end() && o_.marks[prev->second].frame > pass_frame_;
        const bool next_in_pass = have_pass_ && !trig_.armed && !sent_during_pass && step >= 1 &&
                                  step <= (sp == span_.end() ? 1 : sp->second);
        pass_psn_ = k.psn;
        have_pass_ = true;
        if (next_in_pass && retx_.open) {
            retx_.psns.push_back(k.psn);
            retx_.last_frame = k.frame;
            retx_.t1 = k.t;
            return;
        }
        close_retx();
        retx_.open = true;
        retx_.first_frame = retx_.last_frame = k.frame;
        retx_.t0 = retx_.t1 = k.t;
        retx_.psns.push_back(k.psn);
        if (next_in_pass) {
            // The same go-back-N pass, resumed once ACKs opened the requester's window again.
            retx_.cause = pass_cause_;
            retx_.why = "the resend that began at frame #" + std::to_string(pass_frame_) +
                        " goes on (" + pass_cause_ +
                        "): ACKs for the resent packets let the requester send the next ones";
            return;
        }
        pass_frame_ = k.frame;
        if (trig_.armed && !trig_.rnr) {
            retx_.cause = "sequence_nak";
            retx_.why = "go-back-N: the NAK of frame #" + std::to_string(trig_.frame) +
                        " (PSN sequence error, expected PSN " + std::to_string(trig_.psn) +
                        ") makes the requester resend every packet from that PSN on, " +
                        ms(k.t - trig_.t) + " after the NAK";
        } else if (trig_.armed && trig_.rnr) {
            retx_.cause = "rnr";
            retx_.why = "the RNR NAK of frame #" + std::to_string(trig_.frame) +
                        " told the requester to wait; it resent from PSN " +
                        std::to_string(trig_.psn) + " after " + ms(k.t - trig_.t);
            if (trig_.event < o_.events.size()) {
                FlowEvent& rnr = o_.events[trig_.event];
                rnr.text += " The requester waited " + ms(k.t - trig_.t) + " and resent from PSN " +
                            std::to_string(k.psn) + " (frame #" + std::to_string(k.frame) + ").";
                rnr.data["waited_ms"] = ms_value(k.t - trig_.t);
            }
        } else if (k.op == wire::Opcode::RC_RDMA_READ_REQUEST && have_read_resp_ &&
                   prev != last_copy_.end() &&
                   last_read_resp_frame_ > o_.marks[prev->second].frame &&
                   dist(last_read_resp_psn_, k.psn) > 0) {
            // Not a timeout: a later response of the READ came while PSN k.psn did not, so that
            // response packet was lost on the way back; the request itself had arrived.
            retx_.cause = "read_response_gap";
            retx_.why = "the READ's responses came with a gap: PSN " +
                        std::to_string(last_read_resp_psn_) + " (frame #" +
                        std::to_string(last_read_resp_frame_) + ") arrived while PSN " +
                        std::to_string(k.psn) +
                        " had not (a response packet lost on its way back); the requester asks "
                        "again for the READ from the first PSN it lacks, " +
                        ms(k.t - prev_req_t_) + " after its previous request";
        } else {
            retx_.cause = "timeout";
            retx_.why = "no NAK came: the local ACK timer ran out (IBTA 9.7.6.1) after " +
                        ms(k.t - prev_req_t_) + " without a packet from the requester" +
                        (have_ack_ ? " and " + ms(k.t - last_ack_t_) + " since the last ACK (PSN " +
                                         std::to_string(last_ack_psn_) + ")"
                                   : " and no ACK at all") +
                        "; the requester goes back to the oldest unacknowledged PSN";
            mark_lost(k.psn, k.t);
        }
        pass_cause_ = retx_.cause;
        trig_.armed = false;
    }

    /** Why an MRC packet was sent again: the first of these that applies. */
    void on_mrc_retx(const Pkt& k) {
        std::string cause, why;
        auto pit = plane_of_.find(k.psn);
        const int orig_plane = pit == plane_of_.end() ? -1 : pit->second;
        const Silence* dead = nullptr;
        for (const Silence& s : silences_)
            if (s.plane == orig_plane && s.t_last <= k.t && (s.t_back < 0 || s.t_back > k.t))
                dead = &s;
        auto nack = nacked_.find(k.psn);
        auto hole = holed_.find(k.psn);
        if (dead != nullptr) {
            cause = "plane_down";
            why = "they were in flight on plane " + std::to_string(orig_plane) +
                  ", which fell silent after frame #" + std::to_string(dead->frame) +
                  ": the requester declares a dead plane's packets lost and resends them on the "
                  "planes still up";
        } else if (nack != nacked_.end()) {
            cause = "mrc_nack";
            why = "the responder refused them in an MRC NACK (frame #" +
                  std::to_string(nack->second) + ")";
        } else if (hole != holed_.end()) {
            cause = "sack_hole";
            why =
                "selective repeat: the SACK of frame #" + std::to_string(hole->second) +
                " reported these PSNs missing while later ones had arrived (a hole), so only these "
                "are resent, on another path";
        } else {
            cause = "timeout";
            why = "no SACK covered them in time: the requester's ACK timer ran out "
                  "(MRC: linear-then-exponential timeout)";
            if (sacks_cut_ > 0) {
                cause = "timeout_or_sack_hole";
                why = "no SACK in the capture reported them missing, but the capture's snap "
                      "length cut the SACK bitmaps (" +
                      std::to_string(sacks_cut_) +
                      " so far), so a hole or the ACK timer: the capture cannot tell";
            }
        }
        mark_lost(k.psn, k.t);
        if (!(retx_.open && retx_.cause == cause)) {
            close_retx();
            retx_.open = true;
            retx_.cause = cause;
            retx_.why = why;
            retx_.first_frame = k.frame;
            retx_.t0 = k.t;
        }
        retx_.last_frame = k.frame;
        retx_.t1 = k.t;
        retx_.psns.push_back(k.psn);
        retx_.planes.push_back(k.plane);
    }

    void on_response(const Pkt& k) {
        ++o_.responses;
        if (k.seth) {
            ++o_.sacks;
            close_retx();
            touch_run(k);
            ++run_.sacks;
            run_.have_ack = true;
            run_.ack_psn = k.cum;
            if (!k.holes.empty()) ++run_.sacks_with_holes;
            if (k.sack_cut) ++sacks_cut_;
            for (const PsnRange& r : k.holes)
                for (std::uint32_t i = 0; i < r.count() && i < 4096; ++i)
                    holed_.insert_or_assign((r.first + i) & wire::Psn::kMask, k.frame);
            return;
        }
        if (k.neth) {
            ++o_.mrc_nacks;
            flush_run();
            close_retx();
            nacked_.insert_or_assign(k.npsn, k.frame);
            event(FlowEventKind::mrc_nack, k,
                  "MRC NACK for PSN " + std::to_string(k.npsn) + ", reason " +
                      nack_reason_name(k.reason) +
                      ": the responder refused this one packet (a trimmed packet or one past its "
                      "window is resent; an access or request error fails the work request).")
                .data["psn"] = k.npsn;
            marker(k.t, psn_off(k.npsn), "nak", "MRC NACK PSN " + std::to_string(k.npsn));
            return;
        }
        if (k.op == wire::Opcode::MRC_PROBE_REPLY) {
            touch_run(k);
            ++run_.replies;
            return;
        }
        if (k.info->is(OpFlags::read)) {
            last_read_resp_psn_ = k.psn;
            last_read_resp_frame_ = k.frame;
            have_read_resp_ = true;
        }
        if (!k.aeth) {
            // READ RESPONSE MIDDLE: data back to the requester, in the same PSN space.
            touch_run(k);
            ++run_.read_resp;
            if (!have_max_ || dist(k.psn, max_psn_) > 0) {
                max_psn_ = k.psn;
                have_max_ = true;
            }
            return;
        }
        const wire::AethKind kind = static_cast<wire::AethKind>(k.syndrome >> 5);
        const std::uint8_t code = k.syndrome & 0x1fu;
        if (kind == wire::AethKind::ack) {
            close_retx();
            touch_run(k);
            if (!k.info->is(OpFlags::read)) ++o_.acks;
            if (k.info->is(OpFlags::read)) {
                ++run_.read_resp;
                if (!have_max_ || dist(k.psn, max_psn_) > 0) {
                    max_psn_ = k.psn;
                    have_max_ = true;
                }
            } else {
                ++run_.acks;
                run_.have_ack = true; // "the last [ACK] for PSN": a READ response is not one
                run_.ack_psn = k.psn;
            }
            have_ack_ = true;
            last_ack_t_ = k.t;
            last_ack_psn_ = k.psn;
            return;
        }
        flush_run();
        close_retx();
        if (kind == wire::AethKind::rnr_nak) {
            ++o_.rnr_naks;
            const std::string timer = format_rnr_timer(code);
            FlowEvent& e =
                event(FlowEventKind::rnr_nak, k,
                      "RNR NAK for PSN " + std::to_string(k.psn) +
                          ": the responder had no receive WQE posted for this SEND (receiver not "
                          "ready, IBTA 9.7.5.2.8); it asks the requester to wait at least the RNR "
                          "timer, code " +
                          std::to_string(code) + " = " + timer + ", then resend from this PSN.");
            e.data["psn"] = k.psn;
            e.data["rnr_timer"] = code;
            e.data["rnr_timer_ms"] = rnr_timer_usec(code) / 1000.0;
            trig_ = Trigger{true, true, k.frame, k.t, k.psn, o_.events.size() - 1};
            marker(k.t, psn_off(k.psn), "rnr",
                   "RNR NAK PSN " + std::to_string(k.psn) + ", " + timer);
            return;
        }
        if (kind == wire::AethKind::nak &&
            code == static_cast<std::uint8_t>(wire::NakCode::psn_sequence_error)) {
            ++o_.naks;
            on_sequence_nak(k);
            return;
        }
        ++o_.error_naks;
        event(FlowEventKind::error_nak, k,
              "NAK for PSN " + std::to_string(k.psn) + ": " + describe_syndrome(k.syndrome) + ".")
            .data["psn"] = k.psn;
        marker(k.t, psn_off(k.psn), "error", "NAK " + std::string(wire::nak_code_name(code)));
    }

    void on_sequence_nak(const Pkt& k) {
        const std::uint32_t expected = k.psn;
        // The requester's packet right after its latest copy of the expected PSN: the first
        // later PSN that can have reached the responder and shown it the gap.
        std::string got_text;
        std::vector<std::uint32_t> missing;
        Json got = nullptr;
        auto it = last_copy_.find(expected);
        if (it != last_copy_.end()) {
            const std::size_t at = it->second;
            for (std::size_t j = at + 1; j < o_.marks.size() && o_.marks[j].t_ns <= k.t; ++j) {
                if (dist(o_.marks[j].psn, expected) > 0) {
                    got = o_.marks[j].psn;
                    got_text = "PSN " + std::to_string(o_.marks[j].psn) + " (frame #" +
                               std::to_string(o_.marks[j].frame) + ", the next packet sent after " +
                               "PSN " + std::to_string(expected) + ")";
                    // The requests sent in the gap (a READ request stands for its whole span).
                    for (std::uint32_t q = expected;
                         dist(q, o_.marks[j].psn) < 0 && missing.size() < 4096;
                         q = (q + 1) & wire::Psn::kMask)
                        if (q == expected || last_copy_.count(q) != 0) missing.push_back(q);
                    break;
                }
            }
        }
        std::string text = "NAK, PSN sequence error (IBTA 9.7.5.2.2): the responder expected PSN " +
                           std::to_string(expected) + " but got a later one";
        if (!got_text.empty()) {
            text += ", " + got_text + "; missing: " + short_ranges(to_ranges(missing)) + " (" +
                    std::to_string(missing.size()) + " packet" + (missing.size() == 1 ? "" : "s") +
                    " lost on the way). The responder drops what follows until PSN " +
                    std::to_string(expected) + " comes again and NAKs once.";
            for (std::uint32_t q : missing)
                mark_lost(q, k.t);
        } else {
            text += " (the packet that showed it the gap is not in the capture).";
        }
        FlowEvent& e = event(FlowEventKind::nak, k, text);
        e.data["expected_psn"] = expected;
        e.data["got_psn"] = got;
        e.data["missing"] = format_ranges(to_ranges(missing));
        trig_ = Trigger{true, false, k.frame, k.t, expected, o_.events.size() - 1};
        marker(k.t, psn_off(expected), "nak",
               "NAK sequence error: expected PSN " + std::to_string(expected));
    }

    /** CNPs come in episodes (one per min_time_between_cnps while the marks last): those less
     *  than kCnpEpisodeGap apart are one event, and one marker. */
    static constexpr std::int64_t kCnpEpisodeGap = 2'000'000; // ns

    void on_cnp(const Pkt& k) {
        ++o_.cnps;
        if (cnp_ep_.count > 0 && k.t - cnp_ep_.t1 < kCnpEpisodeGap) {
            ++cnp_ep_.count;
            cnp_ep_.t1 = k.t;
            cnp_ep_.last_frame = k.frame;
            return;
        }
        close_cnp_episode();
        flush_run(); // the story reads: what was sent, the CNPs, what was sent after them
        cnp_ep_ =
            CnpEpisode{1, k.frame, k.frame, k.t, k.t, k.qpn, have_max_ ? psn_off(max_psn_) : 0};
    }

    void close_cnp_episode() {
        if (cnp_ep_.count == 0) return;
        const CnpEpisode ep = cnp_ep_;
        cnp_ep_ = CnpEpisode{};
        FlowEvent e;
        e.kind = FlowEventKind::cnp;
        e.first_frame = ep.first_frame;
        e.last_frame = ep.last_frame;
        e.t_ns = ep.t0;
        e.text = (ep.count == 1
                      ? std::string("CNP to QP ")
                      : std::to_string(ep.count) + " CNPs over " + ms(ep.t1 - ep.t0) + " to QP ") +
                 qpn_text(ep.qpn) +
                 " (RoCEv2 Annex A17.9): the responder's side saw ECN-CE marked packets of this "
                 "connection and tells the requester to slow down; its DCQCN reaction point cuts "
                 "the rate (at most once per rate_reduce_monitor_period).";
        e.data["cnps"] = ep.count;
        e.data["span_ms"] = ms_value(ep.t1 - ep.t0);
        o_.events.push_back(std::move(e));
        cnp_events_.push_back({o_.events.size() - 1, ep.t0, ep.t1});
        marker(ep.t0, ep.psn_off, "cnp",
               std::to_string(ep.count) + (ep.count == 1 ? " CNP" : " CNPs"));
    }

    /** Each CNP: the spacing of the requester's data packets before it and after it. */
    void cnp_rates() {
        constexpr std::size_t kWindow = 16;
        for (const CnpRef& ref : cnp_events_) {
            FlowEvent& e = o_.events[ref.event];
            // New packets only: a resend burst says nothing of the pacer's rate.
            std::vector<const Pkt*> before, after;
            for (std::size_t m = 0; m < req_.size(); ++m) {
                if (o_.marks[m].kind == kMarkRetx) continue;
                if (req_[m]->t < ref.t0) {
                    before.push_back(req_[m]);
                    if (before.size() > kWindow + 1) before.erase(before.begin());
                } else if (req_[m]->t > ref.t1 && after.size() < kWindow + 1) {
                    after.push_back(req_[m]);
                }
            }
            auto rate = [](const std::vector<const Pkt*>& v, double& gap_us, double& gbps) {
                if (v.size() < 2) return false;
                const std::int64_t span = v.back()->t - v.front()->t;
                std::uint64_t bytes = 0;
                for (std::size_t i = 1; i < v.size(); ++i)
                    bytes += v[i]->wire_len;
                gap_us = static_cast<double>(span) / 1e3 / static_cast<double>(v.size() - 1);
                gbps = span > 0 ? static_cast<double>(bytes) * 8 / static_cast<double>(span) : 0;
                return true;
            };
            double gb = 0, rb = 0, ga = 0, ra = 0;
            const bool hb = rate(before, gb, rb), ha = rate(after, ga, ra);
            char buf[256];
            if (hb && ha) {
                std::snprintf(buf, sizeof buf,
                              " In the capture the requester's data packets came %.2f us apart "
                              "(%.3f Gb/s) over the %zu before the first CNP and %.2f us "
                              "apart (%.3f Gb/s) over the %zu after the last",
                              gb, rb, before.size(), ga, ra, after.size());
                e.text += buf;
                if (ga > gb * 1.2) {
                    std::snprintf(buf, sizeof buf, ": the sender slowed down (x%.2f spacing).",
                                  ga / gb);
                } else {
                    std::snprintf(buf, sizeof buf,
                                  ": no slow-down visible here (the cut may be small, or "
                                  "the sender was not at its rate limit).");
                }
                e.text += buf;
                e.data["gap_before_us"] = gb;
                e.data["gap_after_us"] = ga;
                e.data["rate_before_gbps"] = rb;
                e.data["rate_after_gbps"] = ra;
            } else {
                e.text += " Too few data packets around it in the capture to see the rate.";
            }
        }
    }

    void on_port_status(const Pkt& k) {
        ++o_.port_status;
        const bool from_requester = c_.requester_ips.count(k.src) != 0;
        if (ps_.open && ps_.mask == k.port_mask && ps_.from_requester == from_requester) {
            ++ps_.count;
            ps_.last_frame = k.frame;
            return;
        }
        flush_run();
        close_retx();
        flush_port_status();
        ps_ = PortStatus{true, k.port_mask, from_requester, 1, k.frame, k.frame, k.t};
    }

    void flush_port_status() {
        if (!ps_.open) return;
        PortStatus p = ps_;
        ps_ = PortStatus{};
        FlowEvent e;
        e.kind = FlowEventKind::port_status;
        e.first_frame = p.first_frame;
        e.last_frame = p.last_frame;
        e.t_ns = p.t;
        e.text = std::string("MRC port status from the ") +
                 (p.from_requester ? "requester" : "responder") + ": planes up " +
                 plane_list(p.mask) + ", down " + plane_list(static_cast<std::uint8_t>(~p.mask)) +
                 " (" + std::to_string(p.count) + " cop" + (p.count == 1 ? "y" : "ies") +
                 ": one per plane still up, repeated); the peer stops using the planes that are "
                 "down.";
        e.data["from"] = p.from_requester ? "requester" : "responder";
        e.data["port_mask"] = p.mask;
        e.data["copies"] = p.count;
        o_.events.push_back(std::move(e));
    }

    /**
     * A plane that stops while the others go on: gaps in a plane's requests during which the
     * other planes sent many packets. A plane never used is not "down".
     */
    void find_plane_silences() {
        std::map<int, std::vector<const Pkt*>> by_plane;
        for (const Pkt* k : req_)
            by_plane[k->plane].push_back(k);
        if (by_plane.size() < 2 || req_.size() < 64) return;
        const std::int64_t span = req_.back()->t - req_.front()->t;
        const std::int64_t mean_gap = span / static_cast<std::int64_t>(req_.size());
        // A silence counts when the rest sent this many packets during it: ordinary spraying
        // never leaves a plane out that long.
        const std::uint64_t kOthers = 64;
        for (const auto& [plane, v] : by_plane) {
            if (plane < 0) continue;
            for (std::size_t i = 0; i < v.size(); ++i) {
                const std::int64_t from = v[i]->t;
                const std::int64_t to = i + 1 < v.size() ? v[i + 1]->t : INT64_MAX;
                if (to - from < 32 * std::max<std::int64_t>(mean_gap, 1)) continue;
                std::uint64_t others = 0;
                for (const Pkt* k : req_)
                    if (k->t > from && k->t < to && k->plane != plane) ++others;
                if (others < kOthers) continue;
                Silence s;
                s.plane = plane;
                s.t_last = from;
                s.frame = v[i]->frame;
                s.others = others;
                if (i + 1 < v.size()) {
                    s.t_back = to;
                    s.back_frame = v[i + 1]->frame;
                }
                silences_.push_back(s);
            }
        }
    }

    void emit_plane_events_before(std::int64_t t) {
        for (Silence& s : silences_) {
            if (!s.down_emitted && s.t_last < t) {
                s.down_emitted = true;
                flush_run();
                close_retx();
                ++o_.plane_downs;
                // What was in flight on it: its PSNs sent again later on other planes.
                std::vector<std::uint32_t> resent;
                std::vector<int> where;
                std::map<std::uint32_t, int> first_plane;
                for (const Pkt* k : req_) {
                    if (k->t <= s.t_last) {
                        first_plane.insert_or_assign(k->psn, k->plane);
                    } else if (s.t_back < 0 || k->t < s.t_back) {
                        auto it = first_plane.find(k->psn);
                        if (it != first_plane.end() && it->second == s.plane &&
                            k->plane != s.plane) {
                            resent.push_back(k->psn);
                            where.push_back(k->plane);
                            first_plane.erase(it);
                        }
                    }
                }
                std::sort(where.begin(), where.end());
                where.erase(std::unique(where.begin(), where.end()), where.end());
                FlowEvent e;
                e.kind = FlowEventKind::plane_down;
                e.first_frame = e.last_frame = s.frame;
                e.t_ns = s.t_last;
                e.text = "plane " + std::to_string(s.plane) + " fell silent after frame #" +
                         std::to_string(s.frame) + ": " +
                         (s.t_back < 0 ? "no packet on it to the end of the capture"
                                       : "no packet on it for " + ms(s.t_back - s.t_last)) +
                         ", while the other planes sent " + std::to_string(s.others) +
                         " (the plane went down: a port taken out or a cable pulled). ";
                if (!resent.empty()) {
                    std::sort(resent.begin(), resent.end(),
                              [](std::uint32_t a, std::uint32_t b) { return dist(a, b) < 0; });
                    e.text += std::to_string(resent.size()) + " packet" +
                              (resent.size() == 1 ? " that was" : "s that were") +
                              " in flight on it (PSN " + short_ranges(to_ranges(resent)) +
                              ") went out again on plane" + (where.size() == 1 ? " " : "s ") +
                              plane_set_text(where) + "; new packets use the others only.";
                } else {
                    e.text += "Nothing sent on it had to be resent; new packets use the others "
                              "only.";
                }
                e.data["plane"] = s.plane;
                e.data["silent_ms"] =
                    s.t_back < 0 ? Json(nullptr) : Json(ms_value(s.t_back - s.t_last));
                e.data["resent"] = resent.size();
                e.data["resent_psns"] = format_ranges(to_ranges(resent));
                o_.events.push_back(std::move(e));
                marker(s.t_last, have_max_ ? psn_off(max_psn_) : 0, "plane_down",
                       "plane " + std::to_string(s.plane) + " down");
            }
            if (s.t_back >= 0 && !s.up_emitted && s.t_back <= t) {
                s.up_emitted = true;
                flush_run();
                close_retx();
                FlowEvent e;
                e.kind = FlowEventKind::plane_up;
                e.first_frame = e.last_frame = s.back_frame;
                e.t_ns = s.t_back;
                e.text = "plane " + std::to_string(s.plane) + " carries packets again (frame #" +
                         std::to_string(s.back_frame) + "), " + ms(s.t_back - s.t_last) +
                         " after it fell silent.";
                e.data["plane"] = s.plane;
                o_.events.push_back(std::move(e));
                marker(s.t_back, have_max_ ? psn_off(max_psn_) : 0, "plane_up",
                       "plane " + std::to_string(s.plane) + " up");
            }
        }
    }

    struct PortStatus {
        bool open = false;
        std::uint8_t mask = 0;
        bool from_requester = false;
        std::uint64_t count = 0, first_frame = 0, last_frame = 0;
        std::int64_t t = 0;
    };

    Conn& c_;
    FlowConnection& o_;
    std::vector<const Pkt*> req_; ///< the requests, in order; marks_[i] is req_[i]
    Run run_;
    Retx retx_;
    Retx last_retx_;                         ///< the group of the last retransmit event
    std::size_t last_retx_event_ = SIZE_MAX; ///< its index in o_.events
    Trigger trig_;
    PortStatus ps_;
    bool have_pass_ = false;       ///< an RC resend pass has started
    std::uint32_t pass_psn_ = 0;   ///< the last PSN it resent
    std::uint64_t pass_frame_ = 0; ///< the frame it began with
    std::string pass_cause_;
    bool have_max_ = false;
    std::uint32_t max_psn_ = 0;
    std::int64_t prev_req_t_ = 0;
    std::uint64_t prev_req_frame_ = 0;
    bool have_ack_ = false;
    std::int64_t last_ack_t_ = 0;
    bool have_read_resp_ = false; ///< the newest READ response packet of the connection
    std::uint32_t last_read_resp_psn_ = 0;
    std::uint64_t last_read_resp_frame_ = 0;
    std::uint32_t last_ack_psn_ = 0;
    std::unordered_map<std::uint32_t, std::size_t> last_copy_; ///< PSN -> index in marks
    std::unordered_map<std::uint32_t, int> plane_of_;          ///< PSN -> plane of its last copy
    std::unordered_map<std::uint32_t, std::int32_t> span_; ///< request PSN -> PSNs it takes (> 1)
    bool have_new_ = false;
    std::uint32_t last_new_ = 0; ///< PSN of the latest first-copy request
    std::unordered_map<std::uint32_t, std::uint64_t> holed_;  ///< PSN -> SACK frame missing it
    std::unordered_map<std::uint32_t, std::uint64_t> nacked_; ///< PSN -> MRC NACK frame
    std::vector<Silence> silences_;
    struct CnpEpisode {
        std::uint64_t count = 0, first_frame = 0, last_frame = 0;
        std::int64_t t0 = 0, t1 = 0;
        std::uint32_t qpn = 0;
        std::int64_t psn_off = 0; ///< the requester's front when the first CNP came
    };
    struct CnpRef {
        std::size_t event = 0; ///< index in o_.events
        std::int64_t t0 = 0, t1 = 0;
    };
    CnpEpisode cnp_ep_;
    std::vector<CnpRef> cnp_events_;
    /** Requests seen only as received (both ends captured, their sending not). */
    struct Unsent {
        std::uint64_t count = 0, first_frame = 0, last_frame = 0;
        std::int64_t t0 = 0;
        std::vector<std::uint32_t> psns;
    };
    Unsent unsent_;
    std::uint64_t sacks_cut_ = 0; ///< SACKs whose bitmap the snap length cut
};

} // namespace

FlowExplainer::FlowExplainer() : impl_(std::make_unique<Impl>()) {}
FlowExplainer::~FlowExplainer() = default;

void FlowExplainer::add(const RawFrame& frame) {
    impl_->add(frame);
}

FlowStory FlowExplainer::finish(const std::string& file) {
    impl_->place_all();
    FlowStory s;
    s.file = file;
    s.frames = impl_->frames;
    s.roce_frames = impl_->roce_frames;
    s.roce_packets = impl_->roce_packets;
    s.gso_sends = impl_->gso_sends;
    s.gso_packets = impl_->gso_packets;
    s.not_ethernet = impl_->not_ethernet;
    s.twins = impl_->twins;
    s.rejected = impl_->rejected;
    s.rejected_first = impl_->rejected_first;
    s.directions = impl_->directions;
    // Replies seen before their connection's first request (an MRC port status goes out when
    // the QP is set up; a capture started mid-run begins with ACKs of requests it missed): give
    // them to the connection now that it exists.
    std::vector<Pkt> orphans;
    for (Pkt& k : impl_->orphans) {
        const std::size_t ci =
            impl_->conn_for_reply(k, wire::transport_of(k.op) == wire::Transport::mrc, true);
        if (ci == SIZE_MAX) {
            orphans.push_back(std::move(k));
            continue;
        }
        auto& v = impl_->conns[ci].pkts;
        auto at = std::upper_bound(v.begin(), v.end(), k.frame,
                                   [](std::uint64_t f, const Pkt& p) { return f < p.frame; });
        v.insert(at, std::move(k));
    }
    impl_->orphans = std::move(orphans);
    for (Conn& c : impl_->conns) {
        Narrator(c).run();
        std::stable_sort(
            c.out.events.begin(), c.out.events.end(),
            [](const FlowEvent& a, const FlowEvent& b) { return a.first_frame < b.first_frame; });
        s.connections.push_back(std::move(c.out));
    }
    // CNPs whose QP no connection claimed (only the CNPs of the capture, no data): one entry
    // per QPN, so that they are not lost from the story.
    std::map<std::uint32_t, FlowConnection> lone;
    for (const Pkt& k : impl_->orphans) {
        FlowConnection& c = lone[k.qpn];
        if (c.first_frame == 0) {
            c.transport = "?";
            c.requester_ip = k.dst;
            c.responder_ip = k.src;
            c.requester_qpn = k.qpn;
            c.first_frame = k.frame;
            c.t_first_ns = k.t;
        }
        c.last_frame = k.frame;
        c.t_last_ns = k.t;
        ++c.responses;
        FlowEvent e;
        e.first_frame = e.last_frame = k.frame;
        e.t_ns = k.t;
        if (k.role == Role::cnp) {
            ++c.cnps;
            e.kind = FlowEventKind::cnp;
            e.text = "CNP to QP " + qpn_text(k.qpn) +
                     ": the sender of that QP is told to slow down; its data is not in the "
                     "capture.";
        } else {
            e.kind = FlowEventKind::packets;
            e.text = std::string(k.info != nullptr ? k.info->name : "?") + " PSN " +
                     std::to_string(k.psn) + " to QP " + qpn_text(k.qpn) +
                     ", a response whose requests are not in the capture.";
        }
        c.events.push_back(std::move(e));
    }
    for (auto& [q, c] : lone)
        s.connections.push_back(std::move(c));
    std::stable_sort(s.connections.begin(), s.connections.end(),
                     [](const FlowConnection& a, const FlowConnection& b) {
                         return a.first_frame < b.first_frame;
                     });
    return s;
}

} // namespace droce::trace
