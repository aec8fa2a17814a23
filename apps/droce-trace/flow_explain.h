/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * `droce-trace explain`: a capture told as a story, per connection (QP pair).
 *
 * Where `read --explain` explains each frame's headers on their own, this follows a connection
 * through time and says why things happened, from what the capture shows:
 *  - the requester's packets in PSN order, long in-order runs (with the ACKs or SACKs that
 *    answered them) collapsed into one line;
 *  - each NAK (IBTA Vol 1 9.7.5.2): for a PSN sequence error, the PSN the responder expected
 *    (the NAK's PSN), the later PSN the requester had sent after it and the PSNs in between that
 *    went missing; RNR NAKs (9.7.5.2.8) with their timer and how long the requester then waited;
 *  - each retransmission and its cause: go-back-N after a sequence NAK, a resend after an RNR NAK,
 *    a local ACK timeout (9.7.6.1: no NAK, silence), an MRC SACK hole (the SACK that reported the
 *    PSN missing while later ones arrived), an MRC NACK, or an MRC plane going down with the
 *    packet in flight on it;
 *  - CNPs (RoCEv2 Annex A17.9) and what the capture shows of the sender's rate around them: the
 *    spacing of its data packets before and after;
 *  - for MRC (droce's multipath transport, wire format in lib/wire/mrc.h), the plane each packet
 *    took (the pcapng interface of droce's capture: one per device port) and its path (MDETH),
 *    port status messages, and planes that fall silent while the others carry on: a plane that
 *    died, what was in flight on it and where it was resent.
 *
 * What a capture can show depends on where it was taken. droce's own capture (lib/capture) writes
 * the direction of each frame (epb_flags); when it holds both ends of a path (two devices in one
 * process), a packet shows up twice, sent and received, and explain counts it once: an outbound
 * copy without its inbound twin was lost on the wire. With one end only, a loss is inferred from
 * what happened next (a NAK, a SACK hole, a resend). Frames cut by a snap length are read for
 * their headers (zero-filled behind the cut, the ICRC not checked).
 *
 * Connections: requests are grouped by transport and destination QPN (RC, UC, UD also by the IP
 * pair; MRC by QPN alone, since its planes have their own addresses). A response (ACK/NAK, READ
 * response, SACK, NACK, probe reply, CNP) names the requester's QPN, which the requests do not
 * carry; it is paired with the connection whose requester QPN it already named, else with the one
 * whose PSNs it acknowledges. Limits: a connection carrying requests both ways shows as two; PSN
 * arithmetic is 24-bit serial (lib/wire/psn.h).
 *
 * Not thread safe (one explainer per thread); allocates; nothing here is on a datapath.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace_format.h"

namespace droce::trace {

/** Kinds of story events (the JSON "kind" is the enumerator name). */
enum class FlowEventKind : std::uint8_t {
    packets,     ///< an in-order run of requests and the ACKs/SACKs that answered it
    nak,         ///< a PSN sequence error NAK
    error_nak,   ///< another NAK (invalid request, remote access or operational error)
    rnr_nak,     ///< a receiver-not-ready NAK
    retransmit,  ///< requests sent again (one cause, consecutive)
    cnp,         ///< a congestion notification packet
    mrc_nack,    ///< an MRC NACK (NETH)
    port_status, ///< an MRC port status message (or several identical ones in a row)
    plane_down,  ///< an MRC plane fell silent while the others carried on
    plane_up,    ///< a silent plane carried packets again
};

/** Name of @p k, e.g. "rnr_nak". */
[[nodiscard]] const char* to_string(FlowEventKind k) noexcept;

/** One line of a connection's story. */
struct FlowEvent {
    FlowEventKind kind = FlowEventKind::packets;
    std::uint64_t first_frame = 0; ///< capture frame numbers (Wireshark's), first and last
    std::uint64_t last_frame = 0;
    std::int64_t t_ns = 0; ///< time of the first frame, ns since the capture's first frame
    std::string text;      ///< the sentence(s), no trailing newline
    nlohmann::ordered_json data = nlohmann::ordered_json::object(); ///< machine-readable fields
};

/** One request packet on the timeline (every copy sent, at the time it was sent). */
struct FlowMark {
    std::int64_t t_ns = 0;    ///< since the capture's first frame
    std::int64_t psn_off = 0; ///< PSN minus the connection's first PSN (24-bit serial)
    int plane = -1;           ///< MRC plane (device port), -1 when unknown or RC
    std::uint8_t kind = 0;    ///< kMarkNew, kMarkRetx or kMarkLost
    std::uint64_t frame = 0;  ///< capture frame number
    std::uint32_t psn = 0;    ///< the PSN itself
};
inline constexpr std::uint8_t kMarkNew = 0;  ///< first copy of the PSN, acknowledged
inline constexpr std::uint8_t kMarkRetx = 1; ///< a retransmission
/** A copy that was lost: sent and not received (both ends captured), else presumed from what
 *  followed: the PSN a sequence NAK or SACK reported missing, or the copy a timeout or a dead
 *  plane made the sender resend. At most once per copy, never a copy whose received twin is in
 *  the capture. */
inline constexpr std::uint8_t kMarkLost = 2;

/** A NAK, RNR NAK, CNP, plane event ... on the timeline. */
struct FlowMarker {
    std::int64_t t_ns = 0;
    std::int64_t psn_off = 0; ///< where on the PSN axis (the PSN it names, or the sender's front)
    std::string type;         ///< "nak", "rnr", "cnp", "plane_down", "plane_up", "error"
    std::string label;        ///< tooltip text
};

/** What the story knows about one connection. */
struct FlowConnection {
    std::string transport;                      ///< "RC", "UC", "UD" or "MRC"
    std::string requester_ip, responder_ip;     ///< of the first request
    std::uint32_t responder_qpn = 0;            ///< BTH dest_qp of the requests
    std::optional<std::uint32_t> requester_qpn; ///< BTH dest_qp of the responses, once seen
    std::uint32_t first_psn = 0;
    std::uint64_t requests = 0; ///< request packets, every copy
    std::uint64_t new_psns = 0; ///< first copies
    /** Of the first copies, those seen only as received in a capture of both ends: sent before
     *  the capture began. */
    std::uint64_t sent_before_capture = 0;
    std::uint64_t retransmissions = 0;
    std::uint64_t lost = 0; ///< copies marked kMarkLost
    /** Its requests' received copies are in the capture too (both ends): `lost` counts copies sent
     *  and not received; otherwise copies presumed lost from what the sender did next. */
    bool both_ends = false;
    std::uint64_t acks = 0, naks = 0, error_naks = 0, rnr_naks = 0, cnps = 0, sacks = 0;
    std::uint64_t mrc_nacks = 0, port_status = 0, plane_downs = 0;
    std::uint64_t responses = 0; ///< response packets of any kind
    /** Per plane: packets sent, of which retransmissions (index = plane). */
    std::vector<std::uint64_t> plane_packets, plane_retx;
    /** Per plane: the MRC paths (MDETH path, = UDP source port - ev_base) its packets took. */
    std::vector<std::vector<std::uint16_t>> plane_paths;
    std::vector<FlowEvent> events;
    std::vector<FlowMark> marks;
    std::vector<FlowMarker> markers;
    std::uint64_t first_frame = 0, last_frame = 0;
    std::int64_t t_first_ns = 0, t_last_ns = 0;
};

/** A whole capture's story. */
struct FlowStory {
    std::string file;
    std::uint64_t frames = 0;      ///< frames in the capture
    std::uint64_t roce_frames = 0; ///< RoCEv2 frames (accepted, or cut by the snap length)
    /** RoCEv2 packets: one per RoCEv2 frame, but every packet of a UDP GSO send (one frame). */
    std::uint64_t roce_packets = 0;
    /** Frames that are UDP GSO sends captured before the kernel cut them, and their packets. */
    std::uint64_t gso_sends = 0, gso_packets = 0;
    /** Frames skipped because their link type is not Ethernet, by pcap link type (LINKTYPE_*):
     *  an ERF or InfiniBand capture holds no RoCEv2 frame droce-trace can find. */
    std::map<int, std::uint64_t> not_ethernet;
    std::uint64_t twins = 0; ///< inbound copies matched to their outbound copy
    bool directions = false; ///< the capture said which way frames went
    /** Frames the capturing side dropped (pcapng isb_ifdrop: droce's capture ring was full):
     *  missing from the file, so a gap in the story may be the capture's, not the network's. */
    std::uint64_t capture_dropped = 0;
    /** Frames to UDP port 4791 that a RoCE receiver rejects (a bad ICRC, an unknown opcode, lengths
     *  that disagree): left out of every connection, as a receiver drops them; the first few
     *  frame numbers with the reason, so the story says where they went. */
    std::uint64_t rejected = 0;
    std::vector<std::pair<std::uint64_t, std::string>> rejected_first; ///< (frame, reason), <= 8
    std::vector<FlowConnection> connections;
};

/**
 * Builds a FlowStory from the frames of one capture, fed in capture order.
 * Not thread safe; allocates (std::bad_alloc may escape).
 */
class FlowExplainer {
  public:
    FlowExplainer();
    ~FlowExplainer();
    FlowExplainer(const FlowExplainer&) = delete;
    FlowExplainer& operator=(const FlowExplainer&) = delete;

    /**
     * Takes one captured frame (its bytes are copied as far as needed; they may go away after). A
     * UDP GSO send captured before the kernel cut it (split_gso_send()) is one frame whose
     * packets each join the story.
     */
    void add(const RawFrame& frame);
    /** Analyses what was added and returns the story; the explainer is spent afterwards. */
    [[nodiscard]] FlowStory finish(const std::string& file);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/** Options of the renderers. */
struct StoryOptions {
    std::optional<std::uint32_t> qp; ///< only connections with this QPN at either end
    /** Most packet marks drawn per connection in HTML; past it in-order packets are thinned out
     *  (every retransmission and loss is kept) and the page says how many are shown. */
    std::size_t max_marks = 6000;
};

/** True when @p c passes the --qp filter of @p opts. */
[[nodiscard]] bool story_selects(const FlowConnection& c, const StoryOptions& opts);

/** The story as text: per connection a heading, the counts, then one line per event. */
[[nodiscard]] std::string story_text(const FlowStory& s, const StoryOptions& opts);

/**
 * The story as one JSON object: "file", "frames", "roce_frames", "roce_packets", "gso_sends",
 * "gso_packets", "not_ethernet" (link type name
 * -> frames skipped for it), "directions", "twins" and
 * "connections", each with "id", "transport", "requester" {ip, qpn}, "responder" {ip, qpn},
 * "first_psn", the counts ("requests", "new_psns", "sent_before_capture", "retransmissions",
 * "lost", "acks", "naks", "error_naks", "rnr_naks", "cnps", "sacks", "mrc_nacks", "port_status",
 * "plane_downs"), "both_ends", "planes" [{plane, packets, retransmissions}], "timeline" (what the
 * HTML page draws: "marks", "new", "retransmissions", "lost", "thinned_from", "markers" {type:
 * count}, "planes") and "events" [{kind, first_frame, last_frame, t_ms, text, ...kind-specific
 * fields}].
 */
[[nodiscard]] nlohmann::ordered_json story_json(const FlowStory& s, const StoryOptions& opts);

/**
 * One self-contained HTML page (no network resources): the story and, per connection, an SVG
 * timeline drawn by a small inline script from the data embedded in the page: time on x, PSN on
 * y, one colour per plane (one for RC), retransmissions and losses marked, NAK / RNR / CNP /
 * plane markers, a legend. Rendered elements carry classes the browser test counts: "pkt" (with
 * "new", "retx" or "lost"), "marker" (with its type) and "legend-plane".
 */
[[nodiscard]] std::string story_html(const FlowStory& s, const StoryOptions& opts);

} // namespace droce::trace
