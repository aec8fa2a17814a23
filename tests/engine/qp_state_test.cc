/* SPDX-License-Identifier: BSD-3-Clause */
// QP state machine and verbs argument checks of the native API (ibv_modify_qp / ibv_post_* rules).
#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "engine/device.h"

namespace droce {
namespace {

using namespace rc;

/** A port that transmits into the void; enough for control-path tests. */
class NullPort final : public PortDriver {
  public:
    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        for (std::uint16_t i = 0; i < n; ++i)
            bufs[i] = &buf_;
        return n;
    }
    void free_bulk(PktBuf**, std::uint16_t) noexcept override {}
    std::uint16_t tx_burst(PktBuf**, std::uint16_t n) noexcept override {
        sent += n;
        return n;
    }
    std::uint16_t rx_burst(PktBuf**, std::uint16_t) noexcept override { return 0; }
    std::uint32_t max_frame() const noexcept override { return 4400; }
    bool link_up() const noexcept override { return true; }
    std::uint64_t sent = 0;

  private:
    std::vector<std::uint8_t> storage_ = std::vector<std::uint8_t>(4400);
    PktBuf buf_{storage_.data(), 0, 4400, 0, false, nullptr};
};

class QpStateTest : public ::testing::Test {
  protected:
    Clock clock = Clock::virtual_clock();
    NullPort port;
    Device dev{
        "droce0", clock, {PortSpec{&port, {2, 0, 0, 0, 0, 1}, gid_from_ipv4(10, 0, 0, 1), 4096}}};
    mem::Pd* pd = nullptr;
    Cq* cq = nullptr;
    Qp* qp = nullptr;

    void SetUp() override {
        int err = -1;
        pd = dev.alloc_pd(&err);
        ASSERT_NE(pd, nullptr);
        cq = dev.create_cq(64, &err);
        ASSERT_NE(cq, nullptr);
        qp = dev.create_qp(pd, cq, cq, QpCap{16, 16, 2, 2, 64}, false, &err);
        ASSERT_NE(qp, nullptr);
        ASSERT_EQ(err, 0);
    }

    static QpAttr init_attr() {
        QpAttr a;
        a.qp_state = QpState::init;
        a.port_num = 1;
        a.pkey_index = 0;
        a.qp_access_flags = kAccessRemoteWrite | kAccessRemoteRead;
        return a;
    }
    static constexpr std::uint32_t kInitMask = kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags;
    static QpAttr rtr_attr() {
        QpAttr a;
        a.qp_state = QpState::rtr;
        a.path_mtu = Mtu::mtu1024;
        a.dest_qp_num = 0x12;
        a.rq_psn = 100;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 12;
        a.ah_attr.dgid = gid_from_ipv4(10, 0, 0, 2);
        a.ah_attr.dmac = {2, 0, 0, 0, 0, 2};
        a.ah_attr.port_num = 1;
        return a;
    }
    static constexpr std::uint32_t kRtrMask =
        kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
    static QpAttr rts_attr() {
        QpAttr a;
        a.qp_state = QpState::rts;
        a.sq_psn = 200;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 4;
        return a;
    }
    static constexpr std::uint32_t kRtsMask =
        kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;

    void to_rts() {
        ASSERT_EQ(dev.modify_qp(qp, init_attr(), kInitMask), 0);
        ASSERT_EQ(dev.modify_qp(qp, rtr_attr(), kRtrMask), 0);
        ASSERT_EQ(dev.modify_qp(qp, rts_attr(), kRtsMask), 0);
    }
};

TEST_F(QpStateTest, NewQpIsInResetWithQpnFrom0x11) {
    EXPECT_EQ(qp->state, QpState::reset);
    EXPECT_EQ(qp->qpn, 0x11u);
    EXPECT_EQ(dev.qp_by_num(0x11), qp);
}

TEST_F(QpStateTest, LegalPathResetInitRtrRts) {
    to_rts();
    EXPECT_EQ(qp->state, QpState::rts);
    EXPECT_EQ(qp->req.next_psn, Psn(200));
    EXPECT_EQ(qp->resp.expected_psn, Psn(100));
    EXPECT_EQ(qp->mtu, 1024u);
    // The UDP source port follows rdma_get_udp_sport for (0x11, 0x12).
    EXPECT_EQ(qp->paths[0].hdr.udp_sport, 0xC132);
    EXPECT_FALSE(qp->paths[0].hdr.ipv6);
}

TEST_F(QpStateTest, EachMissingRequiredAttributeIsEinval) {
    for (std::uint32_t bit : {kQpPkeyIndex, kQpPort, kQpAccessFlags}) {
        EXPECT_EQ(dev.modify_qp(qp, init_attr(), kInitMask & ~bit), EINVAL)
            << "INIT without bit " << bit;
        EXPECT_EQ(qp->state, QpState::reset);
    }
    ASSERT_EQ(dev.modify_qp(qp, init_attr(), kInitMask), 0);
    for (std::uint32_t bit :
         {kQpAv, kQpPathMtu, kQpDestQpn, kQpRqPsn, kQpMaxDestRdAtomic, kQpMinRnrTimer}) {
        EXPECT_EQ(dev.modify_qp(qp, rtr_attr(), kRtrMask & ~bit), EINVAL)
            << "RTR without bit " << bit;
        EXPECT_EQ(qp->state, QpState::init);
    }
    ASSERT_EQ(dev.modify_qp(qp, rtr_attr(), kRtrMask), 0);
    for (std::uint32_t bit : {kQpSqPsn, kQpTimeout, kQpRetryCnt, kQpRnrRetry, kQpMaxQpRdAtomic}) {
        EXPECT_EQ(dev.modify_qp(qp, rts_attr(), kRtsMask & ~bit), EINVAL)
            << "RTS without bit " << bit;
        EXPECT_EQ(qp->state, QpState::rtr);
    }
}

TEST_F(QpStateTest, AttributeNotAllowedInTransitionIsEinval) {
    // RESET→INIT does not take a path MTU; INIT→RTR does not take an SQ PSN; RTS→RTS no new path
    // MTU.
    EXPECT_EQ(dev.modify_qp(qp, init_attr(), kInitMask | kQpPathMtu), EINVAL);
    ASSERT_EQ(dev.modify_qp(qp, init_attr(), kInitMask), 0);
    EXPECT_EQ(dev.modify_qp(qp, rtr_attr(), kRtrMask | kQpSqPsn), EINVAL);
    ASSERT_EQ(dev.modify_qp(qp, rtr_attr(), kRtrMask), 0);
    ASSERT_EQ(dev.modify_qp(qp, rts_attr(), kRtsMask), 0);
    QpAttr a = rts_attr();
    EXPECT_EQ(dev.modify_qp(qp, a, kQpPathMtu), EINVAL);
    a.min_rnr_timer = 3;
    EXPECT_EQ(dev.modify_qp(qp, a, kQpMinRnrTimer), 0);
    EXPECT_EQ(qp->attr.min_rnr_timer, 3);
}

TEST_F(QpStateTest, IllegalTransitionsAreEinval) {
    QpAttr a = rts_attr();
    EXPECT_EQ(dev.modify_qp(qp, a, kRtsMask), EINVAL); // RESET→RTS
    a = rtr_attr();
    EXPECT_EQ(dev.modify_qp(qp, a, kRtrMask), EINVAL); // RESET→RTR
    QpAttr sqd;
    sqd.qp_state = QpState::sqd;
    EXPECT_EQ(dev.modify_qp(qp, sqd, kQpState), EINVAL); // RESET→SQD
    EXPECT_EQ(qp->state, QpState::reset);
}

TEST_F(QpStateTest, OutOfRangeValuesAreEinval) {
    ASSERT_EQ(dev.modify_qp(qp, init_attr(), kInitMask), 0);
    QpAttr a = rtr_attr();
    a.path_mtu = static_cast<Mtu>(6);
    EXPECT_EQ(dev.modify_qp(qp, a, kRtrMask), EINVAL);
    a = rtr_attr();
    a.min_rnr_timer = 32;
    EXPECT_EQ(dev.modify_qp(qp, a, kRtrMask), EINVAL);
    a = rtr_attr();
    a.max_dest_rd_atomic = kMaxRdAtomic + 1;
    EXPECT_EQ(dev.modify_qp(qp, a, kRtrMask), EINVAL);
    ASSERT_EQ(dev.modify_qp(qp, rtr_attr(), kRtrMask), 0);
    a = rts_attr();
    a.retry_cnt = 8;
    EXPECT_EQ(dev.modify_qp(qp, a, kRtsMask), EINVAL);
    a = rts_attr();
    a.timeout = 32;
    EXPECT_EQ(dev.modify_qp(qp, a, kRtsMask), EINVAL);
    QpAttr port_attr = init_attr();
    port_attr.port_num = 2; // the device has one port
    EXPECT_EQ(dev.modify_qp(qp, port_attr, kQpPort), EINVAL);
}

TEST_F(QpStateTest, CurStateMustMatchAndOnlyWhereAllowed) {
    // IB_QP_CUR_STATE is accepted only from RTR, RTS, SQD, SQE (kernel ib_modify_qp_is_ok).
    QpAttr a = init_attr();
    a.cur_qp_state = QpState::reset;
    EXPECT_EQ(dev.modify_qp(qp, a, kInitMask | kQpCurState), EINVAL);
    to_rts();
    QpAttr r = rts_attr();
    r.cur_qp_state = QpState::rtr;
    EXPECT_EQ(dev.modify_qp(qp, r, kQpCurState | kQpMinRnrTimer), EINVAL);
    r.cur_qp_state = QpState::rts;
    r.min_rnr_timer = 5;
    EXPECT_EQ(dev.modify_qp(qp, r, kQpCurState | kQpMinRnrTimer), 0);
    EXPECT_EQ(qp->attr.min_rnr_timer, 5);
}

TEST_F(QpStateTest, AnyStateToErrAndReset) {
    to_rts();
    QpAttr a;
    a.qp_state = QpState::err;
    ASSERT_EQ(dev.modify_qp(qp, a, kQpState), 0);
    EXPECT_EQ(qp->state, QpState::err);
    a.qp_state = QpState::reset;
    ASSERT_EQ(dev.modify_qp(qp, a, kQpState), 0);
    EXPECT_EQ(qp->state, QpState::reset);
    to_rts();
    EXPECT_EQ(qp->state, QpState::rts);
}

TEST_F(QpStateTest, PostSendBeforeRtsIsEinval) {
    SendWqe w;
    w.opcode = WrOpcode::send;
    std::uint32_t bad = 99;
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL);
    EXPECT_EQ(bad, 0u);
    ASSERT_EQ(dev.modify_qp(qp, init_attr(), kInitMask), 0);
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL);
}

TEST_F(QpStateTest, PostRecvInResetIsEinvalInInitOk) {
    RecvWqe r;
    std::uint32_t bad = 0;
    EXPECT_EQ(dev.post_recv(qp, &r, 1, &bad), EINVAL);
    ASSERT_EQ(dev.modify_qp(qp, init_attr(), kInitMask), 0);
    EXPECT_EQ(dev.post_recv(qp, &r, 1, &bad), 0);
    EXPECT_EQ(bad, 1u);
}

TEST_F(QpStateTest, PostSendArgumentChecks) {
    to_rts();
    std::uint32_t bad = 0;
    SendWqe w;
    w.opcode = WrOpcode::send;
    w.num_sge = 3; // cap is 2
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL);
    w.num_sge = 0;
    w.opcode = WrOpcode::local_inv; // not supported
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL);
    w.opcode = WrOpcode::send;
    w.send_flags = kSendInline;
    w.length = 65; // max_inline_data 64
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL);
    w.opcode = WrOpcode::rdma_read;
    w.length = 8;
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL); // inline READ makes no sense
    w.send_flags = 0;
    w.opcode = WrOpcode::atomic_fetch_and_add;
    w.num_sge = 1;
    w.sg_list[0].length = 4; // atomics move exactly 8 bytes
    EXPECT_EQ(dev.post_send(qp, &w, 1, &bad), EINVAL);
}

TEST_F(QpStateTest, SqFullIsEnomemAndBadIndexReported) {
    to_rts();
    std::vector<SendWqe> wrs(qp->sq.capacity() + 1);
    for (auto& w : wrs)
        w.opcode = WrOpcode::send;
    std::uint32_t bad = 0;
    EXPECT_EQ(dev.post_send(qp, wrs.data(), static_cast<std::uint32_t>(wrs.size()), &bad), ENOMEM);
    EXPECT_EQ(bad, qp->sq.capacity());
}

TEST_F(QpStateTest, CreateQpRejectsCapsAboveLimits) {
    int err = 0;
    EXPECT_EQ(dev.create_qp(pd, cq, cq, QpCap{kMaxQpWr + 1, 1, 1, 1, 0}, false, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    EXPECT_EQ(dev.create_qp(pd, cq, cq, QpCap{1, 1, kMaxSge + 1, 1, 0}, false, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    EXPECT_EQ(dev.create_qp(pd, cq, cq, QpCap{1, 1, 1, 1, kMaxInlineData + 1}, false, &err),
              nullptr);
    EXPECT_EQ(err, EINVAL);
    EXPECT_EQ(dev.create_qp(nullptr, cq, cq, QpCap{}, false, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
}

TEST_F(QpStateTest, DestroyBusyObjectsIsEbusy) {
    std::vector<std::uint8_t> mem(64);
    int err = 0;
    mem::Mr* mr = dev.reg_mr(pd, mem.data(), mem.size(), kAccessLocalWrite, &err);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(dev.destroy_cq(cq), EBUSY);
    EXPECT_EQ(dev.dealloc_pd(pd), EBUSY);
    EXPECT_EQ(dev.destroy_qp(qp), 0);
    EXPECT_EQ(dev.dealloc_pd(pd), EBUSY); // the MR still holds it
    EXPECT_EQ(dev.dereg_mr(mr), 0);
    EXPECT_EQ(dev.destroy_cq(cq), 0);
    EXPECT_EQ(dev.dealloc_pd(pd), 0);
    EXPECT_EQ(dev.destroy_qp(nullptr), 0);
    EXPECT_EQ(dev.destroy_cq(nullptr), 0);
}

} // namespace
} // namespace droce
