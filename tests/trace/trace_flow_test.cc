/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace explain (flow_explain.h) on conversations built frame by frame with lib/wire, so that
 * each cause is known: a sequence NAK and its go-back-N, an RNR NAK and the wait it asked for, a
 * local ACK timeout, a CNP before which the sender paced packets 1 us apart and after which 4 us
 * apart, and the --qp filter and HTML page. The captures droce makes are in trace_explain_test.py.
 */
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "flow_explain.h"
#include "trace_test_util.h"

namespace droce::trace {
namespace {

using test::build;
using test::test_path;
using wire::Opcode;
using wire::PacketFields;
using wire::Psn;

constexpr std::uint32_t kResponderQp = 0x22;
constexpr std::uint32_t kRequesterQp = 0x11;
constexpr std::uint32_t kFirstPsn = 1000;

/** A requester (10.0.0.1, QP 0x11) and a responder (10.0.0.2, QP 0x22) seen from one capture. */
class Flow {
  public:
    /** A request (RC SEND ONLY, 256 B) with PSN kFirstPsn + @p n at @p t_us. */
    void send(std::uint32_t n, double t_us) {
        PacketFields f;
        f.opcode = Opcode::RC_SEND_ONLY;
        f.dest_qp = kResponderQp;
        f.psn = Psn(kFirstPsn + n);
        add(build(f, 256), t_us);
    }
    /** A response (AETH @p syndrome) for PSN kFirstPsn + @p n at @p t_us. */
    void respond(std::uint32_t n, std::uint8_t syndrome, double t_us) {
        PacketFields f;
        f.opcode = Opcode::RC_ACKNOWLEDGE;
        f.dest_qp = kRequesterQp;
        f.psn = Psn(kFirstPsn + n);
        f.syndrome = syndrome;
        add(build(f, 0, reverse()), t_us);
    }
    /** An RDMA READ request of @p len bytes with PSN kFirstPsn + @p n at @p t_us. */
    void read(std::uint32_t n, std::uint32_t len, double t_us) {
        PacketFields f;
        f.opcode = Opcode::RC_RDMA_READ_REQUEST;
        f.dest_qp = kResponderQp;
        f.psn = Psn(kFirstPsn + n);
        f.va = 0x10000;
        f.rkey = 0x1234;
        f.dma_len = len;
        add(build(f, 0), t_us);
    }
    /** A READ response packet @p op (FIRST and LAST carry an AETH) of 1024 bytes. */
    void read_response(Opcode op, std::uint32_t n, double t_us) {
        PacketFields f;
        f.opcode = op;
        f.dest_qp = kRequesterQp;
        f.psn = Psn(kFirstPsn + n);
        f.syndrome = 0x1f;
        add(build(f, 1024, reverse()), t_us);
    }
    void cnp(double t_us) {
        PacketFields f;
        f.opcode = Opcode::CNP;
        f.dest_qp = kRequesterQp;
        f.becn = true;
        f.pkey = 0xffff;
        add(build(f, 0, reverse()), t_us);
    }
    /** Flips the last byte of frame @p i (its ICRC no longer matches). */
    void damage(std::size_t i) { frames_.at(i).back() ^= 0xff; }
    /** The bytes of frame @p i, as built. */
    [[nodiscard]] const std::vector<std::uint8_t>& frame_bytes(std::size_t i) const {
        return frames_.at(i);
    }
    /** The direction (pcapng epb_flags) of the frames added from now on: a capture of both ends
     *  writes a request as sent (kDirOutbound) at the requester and as received (kDirInbound) at
     *  the responder. */
    void direction(std::uint8_t dir) { dir_ = dir; }
    FlowStory story() {
        FlowExplainer x;
        for (std::size_t i = 0; i < frames_.size(); ++i) {
            RawFrame r = test::raw_of(frames_[i]);
            r.index = i + 1;
            r.ts_ns = times_[i];
            r.direction = dirs_[i];
            x.add(r);
        }
        return x.finish("built");
    }

  private:
    static wire::PathHeaders reverse() {
        wire::PathHeaders p = test_path();
        std::swap(p.src_ip, p.dst_ip);
        std::swap(p.src_mac, p.dst_mac);
        return p;
    }
    void add(std::vector<std::uint8_t> bytes, double t_us) {
        frames_.push_back(std::move(bytes));
        times_.push_back(static_cast<std::int64_t>(t_us * 1000.0));
        dirs_.push_back(dir_);
    }
    std::vector<std::vector<std::uint8_t>> frames_;
    std::vector<std::int64_t> times_;
    std::vector<std::uint8_t> dirs_;
    std::uint8_t dir_ = kDirUnknown;
};

constexpr std::uint8_t kAck = 0x1f;        // ACK, credits not in use
constexpr std::uint8_t kSeqNak = 0x60;     // NAK, PSN sequence error
constexpr std::uint8_t kRnr14 = 0x20 | 14; // RNR NAK, timer 14 = 1.28 ms

/** The events of kind @p k of the only connection. */
std::vector<FlowEvent> events(const FlowStory& s, FlowEventKind k) {
    std::vector<FlowEvent> v;
    for (const FlowEvent& e : s.connections.at(0).events)
        if (e.kind == k) v.push_back(e);
    return v;
}

TEST(TraceFlow, SequenceNakAndGoBackN) {
    Flow f;
    for (std::uint32_t n = 0; n < 10; ++n)
        f.send(n, n);          // PSN 1004 is lost on the way
    f.respond(4, kSeqNak, 20); // the responder expected 1004 and saw 1005
    for (std::uint32_t n = 4; n < 10; ++n)
        f.send(n, 25 + n);
    f.respond(9, kAck, 60);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    const FlowConnection& c = s.connections[0];
    EXPECT_EQ(c.transport, "RC");
    EXPECT_EQ(c.requester_qpn, kRequesterQp);
    EXPECT_EQ(c.responder_qpn, kResponderQp);
    EXPECT_EQ(c.requests, 16u);
    EXPECT_EQ(c.retransmissions, 6u);
    EXPECT_EQ(c.naks, 1u);
    EXPECT_EQ(c.lost, 1u); // the first copy of 1004, no other
    const auto naks = events(s, FlowEventKind::nak);
    ASSERT_EQ(naks.size(), 1u);
    EXPECT_EQ(naks[0].data["expected_psn"], 1004u);
    EXPECT_EQ(naks[0].data["got_psn"], 1005u);
    EXPECT_EQ(naks[0].data["missing"], "1004");
    const auto retx = events(s, FlowEventKind::retransmit);
    ASSERT_EQ(retx.size(), 1u);
    EXPECT_EQ(retx[0].data["cause"], "sequence_nak");
    EXPECT_EQ(retx[0].data["psns"], "1004-1009");
    for (const FlowMark& m : c.marks) {
        if (m.kind == kMarkLost) {
            EXPECT_EQ(m.psn, 1004u);
            EXPECT_EQ(m.frame, 5u);
        }
    }
}

/** A go-back-N pass (NAK at 1004, 1004-1009 resent), then a new packet 1010 whose ACK never
 *  comes and which goes again 100 ms later: that resend is the ACK timer's, not the pass's going
 *  on (it was first sent after the pass, so the pass cannot be resending it). */
TEST(TraceFlow, ATimeoutAfterAPassIsNotThePassGoingOn) {
    Flow f;
    for (std::uint32_t n = 0; n < 10; ++n)
        f.send(n, n);
    f.respond(4, kSeqNak, 20);
    for (std::uint32_t n = 4; n < 10; ++n)
        f.send(n, 25 + n);
    f.respond(9, kAck, 60);
    f.send(10, 70);      // new
    f.send(10, 100'070); // no ACK: resent after the timer
    f.respond(10, kAck, 100'080);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    const auto retx = events(s, FlowEventKind::retransmit);
    ASSERT_EQ(retx.size(), 2u);
    EXPECT_EQ(retx[0].data["cause"], "sequence_nak");
    EXPECT_EQ(retx[1].data["cause"], "timeout") << retx[1].text;
    EXPECT_EQ(retx[1].data["psns"], "1010");
}

/** A READ of 3 KiB answered in three packets whose first is lost on its way back: the requester
 *  sees the LAST (PSN 1002) without the FIRST and asks again at once. That is a response lost,
 *  not a local ACK timeout, and the request is not lost (it was answered). */
TEST(TraceFlow, AReadAskedAgainAfterAGapInItsResponseIsNotATimeout) {
    Flow f;
    f.read(0, 3072, 0);
    f.read_response(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 10);
    f.read_response(Opcode::RC_RDMA_READ_RESPONSE_LAST, 2, 11);
    f.read(0, 3072, 13); // asked again
    f.read_response(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, 20);
    f.read_response(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 21);
    f.read_response(Opcode::RC_RDMA_READ_RESPONSE_LAST, 2, 22);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    const auto retx = events(s, FlowEventKind::retransmit);
    ASSERT_EQ(retx.size(), 1u);
    EXPECT_EQ(retx[0].data["cause"], "read_response_gap") << retx[0].text;
    EXPECT_EQ(s.connections[0].lost, 0u);
}

/** A packet whose ICRC does not match is what a receiver drops: left out of the connection, but
 *  counted and named in the story's first line (it vanished without a word). */
TEST(TraceFlow, AFrameWithABadIcrcIsCountedNotHidden) {
    Flow f;
    for (std::uint32_t n = 0; n < 3; ++n)
        f.send(n, n);
    f.respond(2, kAck, 10);
    f.damage(0);
    const FlowStory s = f.story();
    EXPECT_EQ(s.rejected, 1u);
    ASSERT_EQ(s.rejected_first.size(), 1u);
    EXPECT_EQ(s.rejected_first[0].first, 1u);
    EXPECT_EQ(s.rejected_first[0].second, "bad_icrc");
    ASSERT_EQ(s.connections.size(), 1u);
    EXPECT_EQ(s.connections[0].requests, 2u);
    EXPECT_NE(story_text(s, {}).find("1 RoCEv2 frames a receiver rejects are left out of the story "
                                     "(#1 bad_icrc)"),
              std::string::npos)
        << story_text(s, {});
}

/** A capture started while the QP ran: its first frame is the ACK of requests sent before it
 *  (PSN below the first request captured). It is the connection's, not a connection of its own
 *  with an unknown transport. */
TEST(TraceFlow, AckOfRequestsBeforeTheCaptureBelongsToTheConnection) {
    Flow f;
    f.respond(static_cast<std::uint32_t>(-3), kAck, 0); // PSN 997: sent before the capture
    for (std::uint32_t n = 0; n < 5; ++n)
        f.send(n, 1 + n);
    f.respond(4, kAck, 10);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    const FlowConnection& c = s.connections[0];
    EXPECT_EQ(c.transport, "RC");
    EXPECT_EQ(c.first_frame, 1u);
    EXPECT_EQ(c.requests, 5u);
    EXPECT_EQ(c.acks, 2u);
    EXPECT_EQ(c.lost, 0u);
}

/** A record whose original length no Ethernet frame can have (a damaged file) is not a frame:
 *  skipped, nothing allocated for it (it once asked for gigabytes); the others are told as usual.
 */
TEST(TraceFlow, DamagedOriginalLengthIsSkipped) {
    Flow f;
    for (std::uint32_t n = 0; n < 4; ++n)
        f.send(n, n);
    f.respond(3, kAck, 10);
    FlowExplainer x;
    for (std::uint32_t i = 0; i < 5; ++i) {
        RawFrame r = test::raw_of(f.frame_bytes(i));
        r.index = i + 1;
        r.ts_ns = i * 1000;
        if (i == 1) {
            r.bytes = r.bytes.subspan(0, 60); // cut by the snap length, of a frame that claims
            r.wire_length = 3'000'000'000u;   // 3 GB on the wire
        }
        x.add(r);
    }
    const FlowStory s = x.finish("damaged");
    EXPECT_EQ(s.frames, 5u);
    EXPECT_EQ(s.roce_frames, 4u);
    ASSERT_EQ(s.connections.size(), 1u);
    EXPECT_EQ(s.connections[0].requests, 3u);
}

/** Both ends in one file: PSN 1000 sent three times and received twice (its first copy lost; the
 *  ACK of the second lost on its way back, so the timer fired again). One copy was lost, not two:
 *  the second copy arrived, so the timeout that followed it does not make it lost. */
TEST(TraceFlow, ACopyThatArrivedIsNotCountedLost) {
    Flow f;
    f.direction(kDirOutbound);
    f.send(0, 0); // lost on the wire
    f.send(0, 10'000);
    f.direction(kDirInbound);
    f.send(0, 10'001);
    f.direction(kDirOutbound);
    f.respond(0, kAck, 10'002); // lost on its way back
    f.send(0, 20'000);
    f.direction(kDirInbound);
    f.send(0, 20'001);
    f.direction(kDirOutbound);
    f.respond(0, kAck, 20'002);
    f.direction(kDirInbound);
    f.respond(0, kAck, 20'003);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    const FlowConnection& c = s.connections[0];
    EXPECT_EQ(c.requests, 3u);
    EXPECT_EQ(c.retransmissions, 2u);
    EXPECT_TRUE(c.both_ends);
    EXPECT_EQ(c.lost, 1u);
    for (const FlowMark& m : c.marks) {
        if (m.kind == kMarkLost) {
            EXPECT_EQ(m.frame, 1u);
        }
    }
    const std::string text = story_text(s, {});
    EXPECT_NE(text.find("2 retransmitted, 1 lost on the wire (sent, never received)"),
              std::string::npos)
        << text;
}

/** Both ends in one file, cut mid-run: PSNs 1000-1007 were sent before the capture began, and
 *  their received copies come in the file after the requester's next packets 1008-1011 (two
 *  devices' frames need not be in time order between them). They are first copies, not a
 *  retransmission storm, and none of them was lost. */
TEST(TraceFlow, ReceivedCopiesOfRequestsSentBeforeTheCaptureAreNotResends) {
    Flow f;
    f.direction(kDirOutbound);
    for (std::uint32_t n = 8; n < 12; ++n)
        f.send(n, 100 + n);
    f.direction(kDirInbound);
    for (std::uint32_t n = 0; n < 12; ++n)
        f.send(n, 90 + 2 * n);
    f.direction(kDirOutbound);
    f.respond(11, kAck, 120);
    f.direction(kDirInbound);
    f.respond(11, kAck, 121);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    const FlowConnection& c = s.connections[0];
    EXPECT_EQ(c.requests, 12u);
    EXPECT_EQ(c.new_psns, 12u);
    EXPECT_EQ(c.sent_before_capture, 8u);
    EXPECT_EQ(c.retransmissions, 0u);
    EXPECT_EQ(c.lost, 0u);
    EXPECT_TRUE(events(s, FlowEventKind::retransmit).empty()) << story_text(s, {});
    bool told = false;
    for (const FlowEvent& e : events(s, FlowEventKind::packets))
        told = told || (e.data.value("received_only", 0u) == 8u && e.data["psns"] == "1000-1007");
    EXPECT_TRUE(told) << story_text(s, {});
}

TEST(TraceFlow, RnrNakAndTheWait) {
    Flow f;
    for (std::uint32_t n = 0; n < 4; ++n)
        f.send(n, n);
    f.respond(2, kRnr14, 10);
    f.send(2, 1500); // 1.49 ms after the RNR NAK, at least its 1.28 ms
    f.send(3, 1501);
    f.respond(3, kAck, 1600);
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    EXPECT_EQ(s.connections[0].rnr_naks, 1u);
    const auto rnr = events(s, FlowEventKind::rnr_nak);
    ASSERT_EQ(rnr.size(), 1u);
    EXPECT_EQ(rnr[0].data["psn"], 1002u);
    EXPECT_DOUBLE_EQ(rnr[0].data["rnr_timer_ms"].get<double>(), 1.28);
    EXPECT_DOUBLE_EQ(rnr[0].data["waited_ms"].get<double>(), 1.49);
    EXPECT_NE(rnr[0].text.find("waited 1.490 ms"), std::string::npos) << rnr[0].text;
    const auto retx = events(s, FlowEventKind::retransmit);
    ASSERT_EQ(retx.size(), 1u);
    EXPECT_EQ(retx[0].data["cause"], "rnr");
    EXPECT_EQ(retx[0].data["psns"], "1002-1003");
}

TEST(TraceFlow, TimeoutWithoutNak) {
    Flow f;
    for (std::uint32_t n = 0; n < 5; ++n)
        f.send(n, n);
    f.respond(2, kAck, 10);
    f.send(3, 10000); // 10 ms of silence: the local ACK timer
    f.send(4, 10001);
    f.respond(4, kAck, 10100);
    const FlowStory s = f.story();
    const auto retx = events(s, FlowEventKind::retransmit);
    ASSERT_EQ(retx.size(), 1u);
    EXPECT_EQ(retx[0].data["cause"], "timeout");
    EXPECT_EQ(retx[0].data["psns"], "1003-1004");
    EXPECT_EQ(s.connections[0].naks, 0u);
    EXPECT_EQ(s.connections[0].lost, 1u); // the copy of 1003 that the timeout gave up on
    EXPECT_FALSE(s.connections[0].both_ends);
    EXPECT_NE(story_text(s, {}).find("1 presumed lost"), std::string::npos) << story_text(s, {});
}

TEST(TraceFlow, CnpAndTheSpacingAroundIt) {
    Flow f;
    std::uint32_t n = 0;
    for (; n < 40; ++n)
        f.send(n, n); // 1 us apart
    f.respond(39, kAck, 39.5);
    f.cnp(40);
    for (std::uint32_t i = 0; i < 40; ++i, ++n)
        f.send(n, 41 + 4.0 * i); // 4 us apart after the cut
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    EXPECT_EQ(s.connections[0].cnps, 1u);
    const auto cnp = events(s, FlowEventKind::cnp);
    ASSERT_EQ(cnp.size(), 1u);
    EXPECT_NEAR(cnp[0].data["gap_before_us"].get<double>(), 1.0, 1e-6);
    EXPECT_NEAR(cnp[0].data["gap_after_us"].get<double>(), 4.0, 1e-6);
    EXPECT_NE(cnp[0].text.find("slowed down"), std::string::npos) << cnp[0].text;
}

TEST(TraceFlow, CnpWithoutSlowDownSaysSo) {
    Flow f;
    std::uint32_t n = 0;
    for (; n < 40; ++n)
        f.send(n, n);
    f.respond(39, kAck, 39.5);
    f.cnp(40);
    for (std::uint32_t i = 0; i < 40; ++i, ++n)
        f.send(n, 41 + i);
    const auto cnp = events(f.story(), FlowEventKind::cnp);
    ASSERT_EQ(cnp.size(), 1u);
    EXPECT_EQ(cnp[0].text.find("slowed down"), std::string::npos) << cnp[0].text;
    EXPECT_NE(cnp[0].text.find("no slow-down visible"), std::string::npos) << cnp[0].text;
}

TEST(TraceFlow, QpFilterJsonAndPage) {
    Flow f;
    for (std::uint32_t n = 0; n < 3; ++n)
        f.send(n, n);
    f.respond(2, kAck, 5);
    const FlowStory s = f.story();
    StoryOptions all, by_requester, by_responder, other;
    by_requester.qp = kRequesterQp;
    by_responder.qp = kResponderQp;
    other.qp = 0x33;
    EXPECT_EQ(story_json(s, all)["connections"].size(), 1u);
    EXPECT_EQ(story_json(s, by_requester)["connections"].size(), 1u);
    EXPECT_EQ(story_json(s, by_responder)["connections"].size(), 1u);
    EXPECT_EQ(story_json(s, other)["connections"].size(), 0u);
    const auto j = story_json(s, all)["connections"][0];
    EXPECT_EQ(j["timeline"]["marks"], 3u);
    EXPECT_EQ(j["acks"], 1u);
    const std::string page = story_html(s, all);
    EXPECT_NE(page.find("id=\"flow-data\""), std::string::npos);
    EXPECT_NE(page.find("id=\"timeline-1\""), std::string::npos);
    // Self-contained: nothing fetched (the SVG namespace URI is a name, not a resource).
    for (const char* fetch : {"src=\"http", "href=\"http", "url(", "@import", "<link"})
        EXPECT_EQ(page.find(fetch), std::string::npos) << fetch;
    EXPECT_EQ(story_html(s, other).find("id=\"timeline-1\""), std::string::npos);
    const std::string text = story_text(s, all);
    EXPECT_NE(text.find("PSNs 1000-1002 sent in order: 3 packets"), std::string::npos) << text;
}

/** The cells of the first row of the page's index table under each column heading. */
std::map<std::string, std::string> index_row(const std::string& page) {
    auto cells = [&](std::size_t from, std::size_t to, const std::string& tag) {
        std::vector<std::string> v;
        for (std::size_t at = page.find("<" + tag, from); at < to;
             at = page.find("<" + tag, at + 1)) {
            const std::size_t open = page.find('>', at) + 1;
            std::string text = page.substr(open, page.find("</" + tag + ">", open) - open);
            for (std::size_t lt; (lt = text.find('<')) != std::string::npos;)
                text.erase(lt, text.find('>', lt) - lt + 1); // a link inside the cell
            v.push_back(text);
        }
        return v;
    };
    std::map<std::string, std::string> row;
    const std::size_t table = page.find("<table class=\"index\">");
    if (table == std::string::npos) return row;
    const std::size_t head_end = page.find("</tr>", table);
    const std::size_t row_end = page.find("</tr>", head_end + 5);
    const auto heads = cells(table, head_end, "th");
    const auto values = cells(head_end, row_end, "td");
    for (std::size_t i = 0; i < heads.size() && i < values.size(); ++i)
        row[heads[i]] = values[i];
    return row;
}

/** The page's index counts NAKs by AETH syndrome: a PSN sequence error NAK (a resend follows)
 *  and an error NAK (remote access error: the work request fails) are not one number. */
TEST(TraceFlow, PageIndexTellsSequenceNaksFromErrorNaks) {
    Flow f;
    for (std::uint32_t n = 0; n < 6; ++n)
        f.send(n, n);
    f.respond(2, kSeqNak, 10);
    for (std::uint32_t n = 2; n < 6; ++n)
        f.send(n, 20 + n);
    f.respond(4, kAck, 30);
    f.respond(5, 0x60 | 2, 31); // NAK, remote access error
    const FlowStory s = f.story();
    ASSERT_EQ(s.connections.size(), 1u);
    EXPECT_EQ(s.connections[0].naks, 1u);
    EXPECT_EQ(s.connections[0].error_naks, 1u);
    const auto row = index_row(story_html(s, {}));
    EXPECT_EQ(row.count("NAKs"), 0u) << "a column summing every kind of NAK";
    EXPECT_EQ(row.at("packets"), "10");
    EXPECT_EQ(row.at("sequence NAKs"), "1");
    EXPECT_EQ(row.at("error NAKs"), "1");
    EXPECT_EQ(row.at("RNR NAKs"), "0");
    EXPECT_EQ(row.at("MRC NACKs"), "0");
}

TEST(TraceFlow, ThinnedTimelineKeepsEveryResend) {
    Flow f;
    for (std::uint32_t n = 0; n < 100; ++n)
        f.send(n, n);
    f.respond(50, kSeqNak, 101);
    for (std::uint32_t n = 50; n < 100; ++n)
        f.send(n, 110 + n);
    StoryOptions o;
    o.max_marks = 60;
    const auto j = story_json(f.story(), o)["connections"][0]["timeline"];
    EXPECT_EQ(j["thinned_from"], 150u);
    EXPECT_EQ(j["retransmissions"], 50u);
    EXPECT_EQ(j["lost"], 1u);
    EXPECT_LE(j["marks"].get<unsigned>(), 60u + 1u);
    EXPECT_GT(j["every_nth_new"].get<unsigned>(), 1u);
}

} // namespace
} // namespace droce::trace
