/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc through the OCP MRC application API (droce's include/mrc.h), in one process over
 * config/demo.ini: droce_a and droce_b, four ring planes each (10.0.N.x/24). Every
 * function's success and failure paths: NULL arguments, EINVAL for READ / SEND / atomics,
 * EOPNOTSUPP for the masks droce does not support, version checks; MRC QPs connected the way the
 * OCP example connects them (the peer's GID of port 1 only; lib_mrc derives the other plane), data
 * checked byte for byte, WRITE with immediate, completion channels, asynchronous events (port
 * down / up, QP fatal, CQ overrun), cleanup by mrc_destroy_context.
 *
 * The test also looks behind the handles (lib/mrcapi/internal.h: the native QP's paths, the
 * context's event pipe for a bounded wait) and, for the port events, takes a port down with
 * Device::set_port_admin through droce's private accessor.
 */
#include "mrc_fixture.h"

namespace {

using namespace mrc_fixture;

// ---------------------------------------------------------------- versions, device, context

TEST_F(MrcApi, QueryVersion) {
    std::uint32_t cur = 0, last = 1, vend = 0, vlast = 1;
    mrc_query_version(&cur, &last, &vend, &vlast);
    EXPECT_EQ(cur, 0x01000001u); // 1.0.1
    EXPECT_EQ(cur, static_cast<std::uint32_t>(MRC_API_VER(1, 0, 1)));
    EXPECT_EQ(last, 0u);
    EXPECT_EQ(vend, 0x01000000u); // 1.0.0
    EXPECT_EQ(vlast, 0u);
    mrc_query_version(nullptr, nullptr, nullptr, nullptr); // any pointer may be NULL
    mrc_query_version(&cur, nullptr, nullptr, nullptr);
    EXPECT_EQ(cur, 0x01000001u);
}

TEST_F(MrcApi, QueryDevice) {
    mrc_device_attr a{};
    int supported = 0;
    ASSERT_EQ(mrc_query_device(side[0]->ctx, &a, &supported), 0);
    EXPECT_EQ(supported, 1);
    EXPECT_EQ(a.mrc_protocol_version, static_cast<std::uint32_t>(MRC_PROTOCOL_VERSION_1));
    EXPECT_EQ(a.wimm_attr.max_wimm, 256); // mrc::kMaxWimm
    EXPECT_EQ(a.wimm_attr.max_wimm_dest, 256);
    EXPECT_EQ(a.mpr_attr.max_mpr, 32); // mrc::kMaxMpr
    EXPECT_EQ(a.mpr_attr.mpr_resolution, 1);
    EXPECT_EQ(a.qp_attr.max_qp_hint, 16384u);
    EXPECT_EQ(a.cap,
              static_cast<std::uint32_t>(MRC_DEVICE_CAP_TRIM_NACK)); // no DYNAMIC_MPR, SVC_TIME
    mrc_device_attr x{};
    supported = 0;
    ASSERT_EQ(mrc_query_device_ex(side[0]->ctx, mctx[0], &x, &supported), 0);
    EXPECT_EQ(supported, 1);
    EXPECT_EQ(std::memcmp(&a, &x, sizeof a), 0);
    ASSERT_EQ(mrc_query_device_ex(side[0]->ctx, nullptr, &x, &supported), 0);
    // Errors: NULL arguments, an MRC context of another device.
    errno = 0;
    EXPECT_EQ(mrc_query_device(nullptr, &a, &supported), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_query_device(side[0]->ctx, nullptr, &supported), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_query_device(side[0]->ctx, &a, nullptr), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_query_device_ex(side[0]->ctx, mctx[1], &x, &supported), -1);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrcApi, Context) {
    mrc_context_attr ca{};
    mrc_context* c = mrc_create_context(side[0]->ctx, &ca); // 0: not stated
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(mrc_destroy_context(c), 0);
    errno = 0;
    EXPECT_EQ(mrc_destroy_context(c), -1); // already destroyed
    EXPECT_EQ(errno, EINVAL);
    for (std::uint32_t v : {static_cast<std::uint32_t>(MRC_API_VER(1, 0, 0)),
                            static_cast<std::uint32_t>(MRC_API_CURRENT_VERSION),
                            static_cast<std::uint32_t>(MRC_API_VER_LATEST), 1u /* the example */}) {
        ca.mrc_api_version_used = v;
        c = mrc_create_context(side[0]->ctx, &ca);
        ASSERT_NE(c, nullptr) << std::hex << v;
        EXPECT_EQ(mrc_destroy_context(c), 0);
    }
    ca.mrc_api_version_used = MRC_API_VER(1, 0, 2); // newer than droce implements
    errno = 0;
    EXPECT_EQ(mrc_create_context(side[0]->ctx, &ca), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ca.mrc_api_version_used = 0;
    ca.mrc_vendor_api_version_used = MRC_API_VER(2, 0, 0);
    errno = 0;
    EXPECT_EQ(mrc_create_context(side[0]->ctx, &ca), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_create_context(nullptr, nullptr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_destroy_context(nullptr), -1);
    EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------- channels and CQs

TEST_F(MrcApi, CompChannelAndCq) {
    mrc_comp_channel* ch = nullptr;
    ASSERT_EQ(mrc_create_comp_channel(mctx[0], &ch), 0);
    ASSERT_NE(ch, nullptr);
    int fd = -1;
    ASSERT_EQ(mrc_get_comp_channel_fd(ch, &fd), 0);
    EXPECT_GE(fd, 0);
    errno = 0;
    EXPECT_EQ(mrc_create_comp_channel(nullptr, &ch), EINVAL);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_create_comp_channel(mctx[0], nullptr), EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_get_comp_channel_fd(nullptr, &fd), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_get_comp_channel_fd(ch, nullptr), -1);

    int user = 7;
    mrc_cq* cq = mrc_create_cq(mctx[0], 64, &user, ch, 0);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(mrc_destroy_comp_channel(ch), EBUSY); // a CQ is attached
    ibv_wc wc[4];
    EXPECT_EQ(mrc_poll_cq(cq, 4, wc), 0);
    EXPECT_EQ(mrc_poll_cq(cq, 0, wc), 0);
    errno = 0;
    EXPECT_EQ(mrc_poll_cq(nullptr, 4, wc), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_poll_cq(cq, 4, nullptr), -1);
    EXPECT_EQ(mrc_req_notify_cq(cq, 0), 0);
    EXPECT_EQ(mrc_req_notify_cq(nullptr, 0), EINVAL);
    mrc_cq* got = nullptr;
    void* got_ctx = nullptr;
    errno = 0;
    EXPECT_EQ(mrc_get_cq_event(nullptr, &got, &got_ctx), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_get_cq_event(ch, nullptr, &got_ctx), -1);
    mrc_ack_cq_events(nullptr, 1); // no effect

    // Bad CQs: depth 0 or above 65536, a completion vector that does not exist, a channel of
    // another context, no context.
    for (int cqe : {0, -1, 65537}) {
        errno = 0;
        EXPECT_EQ(mrc_create_cq(mctx[0], cqe, nullptr, nullptr, 0), nullptr) << cqe;
        EXPECT_EQ(errno, EINVAL);
    }
    errno = 0;
    EXPECT_EQ(mrc_create_cq(mctx[0], 8, nullptr, nullptr, 1), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_create_cq(mctx[1], 8, nullptr, ch, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_create_cq(nullptr, 8, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);

    EXPECT_EQ(mrc_destroy_cq(cq), 0);
    EXPECT_EQ(mrc_destroy_cq(nullptr), EINVAL);
    EXPECT_EQ(mrc_destroy_comp_channel(ch), 0);
    EXPECT_EQ(mrc_destroy_comp_channel(nullptr), EINVAL);
}

// ---------------------------------------------------------------- QP hints

TEST_F(MrcApi, QpHints) {
    mrc_qp_hint_init_attr ia{};
    ia.attr.num_qps_per_peer = 2;
    ia.attr.num_send_peers = 8;
    ia.attr.num_remote_recv_peers = 16;
    ia.attr.vendor_cfg[0] = 0xab;
    mrc_qp_hint* h = mrc_create_qp_hint(mctx[0], &ia);
    ASSERT_NE(h, nullptr);
    mrc_qp_hint_attr q{};
    const int all = MRC_QP_HINT_NUM_QPS_PER_PEER | MRC_QP_HINT_NUM_SEND_PEERS |
                    MRC_QP_HINT_NUM_REMOTE_RECV_PEERS | MRC_QP_HINT_VENDOR_CFG;
    ASSERT_EQ(mrc_query_qp_hint(h, &q, all), 0);
    EXPECT_EQ(q.num_qps_per_peer, 2);
    EXPECT_EQ(q.num_send_peers, 8);
    EXPECT_EQ(q.num_remote_recv_peers, 16);
    EXPECT_EQ(q.vendor_cfg[0], 0xab);
    mrc_qp_hint_attr m{};
    m.num_send_peers = 3;
    ASSERT_EQ(mrc_modify_qp_hint(h, &m, MRC_QP_HINT_NUM_SEND_PEERS), 0);
    q = {};
    ASSERT_EQ(mrc_query_qp_hint(h, &q, MRC_QP_HINT_NUM_SEND_PEERS), 0);
    EXPECT_EQ(q.num_send_peers, 3);
    EXPECT_EQ(q.num_qps_per_peer, 0); // not asked for: untouched
    // Errors.
    errno = 0;
    EXPECT_EQ(mrc_query_qp_hint(h, &q, 1 << 5), -1); // unknown bit
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_modify_qp_hint(h, &m, 1 << 5), -1);
    m.num_qps_per_peer = -1;
    EXPECT_EQ(mrc_modify_qp_hint(h, &m, MRC_QP_HINT_NUM_QPS_PER_PEER), -1);
    EXPECT_EQ(mrc_query_qp_hint(nullptr, &q, all), -1);
    EXPECT_EQ(mrc_query_qp_hint(h, nullptr, all), -1);
    EXPECT_EQ(mrc_modify_qp_hint(nullptr, &m, 0), -1);
    errno = 0;
    EXPECT_EQ(mrc_create_qp_hint(nullptr, &ia), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_create_qp_hint(mctx[0], nullptr), nullptr);
    ia.attr.num_send_peers = -2;
    EXPECT_EQ(mrc_create_qp_hint(mctx[0], &ia), nullptr);

    // A QP names the hint: the hint cannot go while it does.
    mrc_qp* q0 = make_qp(0);
    ASSERT_NE(q0, nullptr);
    mrc_qp_attr ma{};
    ma.qp_hint = h;
    ASSERT_EQ(mrc_modify_qp(q0, nullptr, 0, &ma, MRC_QP_HINT), 0);
    mrc_qp_attr back{};
    ASSERT_EQ(mrc_query_qp(q0, nullptr, 0, &back, MRC_QP_HINT, nullptr), 0);
    EXPECT_EQ(back.qp_hint, h);
    errno = 0;
    EXPECT_EQ(mrc_destroy_qp_hint(h), -1);
    EXPECT_EQ(errno, EBUSY);
    mrc_qp_hint* other = mrc_create_qp_hint(mctx[1], &ia);
    EXPECT_EQ(other, nullptr); // (num_send_peers -2 still set)
    ia.attr.num_send_peers = 1;
    other = mrc_create_qp_hint(mctx[1], &ia);
    ASSERT_NE(other, nullptr);
    ma.qp_hint = other; // a hint of another context
    EXPECT_EQ(mrc_modify_qp(q0, nullptr, 0, &ma, MRC_QP_HINT), EINVAL);
    ma.qp_hint = nullptr; // no hint
    ASSERT_EQ(mrc_modify_qp(q0, nullptr, 0, &ma, MRC_QP_HINT), 0);
    EXPECT_EQ(mrc_destroy_qp_hint(h), 0);
    EXPECT_EQ(mrc_destroy_qp_hint(other), 0);
    errno = 0;
    EXPECT_EQ(mrc_destroy_qp_hint(nullptr), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_destroy_qp(q0), 0);
}

// ---------------------------------------------------------------- QP creation

TEST_F(MrcApi, CreateQp) {
    mrc_cq* cq = mrc_create_cq(mctx[0], 256, nullptr, nullptr, 0);
    mrc_cq* cq_b = mrc_create_cq(mctx[1], 256, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ASSERT_NE(cq_b, nullptr);
    int qctx = 0;
    mrc_qp_init_attr a{};
    a.qp_context = &qctx;
    a.send_cq = cq;
    a.recv_cq = cq;
    a.pd = side[0]->pd;
    a.cap.max_send_wr = 100;
    a.cap.max_recv_wr = 10;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 1;
    a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    mrc_qp* q = mrc_create_qp(mctx[0], &a);
    ASSERT_NE(q, nullptr) << errno;
    EXPECT_GE(a.cap.max_send_wr, 100u); // granted: a power of two
    EXPECT_GE(a.cap.max_recv_wr, 10u);
    std::uint32_t qpn = 0;
    ASSERT_EQ(mrc_get_qpn(q, &qpn), 0);
    EXPECT_NE(qpn, 0u);
    errno = 0;
    EXPECT_EQ(mrc_get_qpn(nullptr, &qpn), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_get_qpn(q, nullptr), -1);
    mrc_qp_init_attr back{};
    ibv_qp_attr v{};
    ASSERT_EQ(mrc_query_qp(q, &v, IBV_QP_STATE, nullptr, 0, &back), 0);
    EXPECT_EQ(v.qp_state, IBV_QPS_RESET);
    EXPECT_EQ(back.qp_context, &qctx);
    EXPECT_EQ(back.pd, side[0]->pd);
    EXPECT_EQ(back.send_cq, cq);
    EXPECT_EQ(back.cap.max_send_wr, a.cap.max_send_wr);
    EXPECT_EQ(back.protocol_version, MRC_PROTOCOL_VERSION_1); // 0 asked: the default, version 1
    EXPECT_EQ(mrc_destroy_cq(cq), EBUSY);                     // the QP uses it

    const auto refused = [&](mrc_qp_init_attr x, int err, const char* what) {
        errno = 0;
        EXPECT_EQ(mrc_create_qp(mctx[0], &x), nullptr) << what;
        EXPECT_EQ(errno, err) << what;
    };
    mrc_qp_init_attr x = a;
    x.pd = nullptr;
    refused(x, EINVAL, "no PD");
    x = a;
    x.send_cq = nullptr;
    refused(x, EINVAL, "no send CQ");
    x = a;
    x.recv_cq = cq_b;
    refused(x, EINVAL, "CQ of another context");
    x = a;
    x.pd = side[1]->pd;
    refused(x, EINVAL, "PD of another device");
    x = a;
    x.send_ops_flags = IBV_QP_EX_WITH_SEND;
    refused(x, EOPNOTSUPP, "SEND");
    x.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
    refused(x, EOPNOTSUPP, "READ");
    x.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    refused(x, EOPNOTSUPP, "atomic");
    x = a;
    x.protocol_version = static_cast<mrc_protocol_version>(1 << 1);
    refused(x, EOPNOTSUPP, "wire version 2");
    x.protocol_version = static_cast<mrc_protocol_version>(3);
    refused(x, EINVAL, "two wire versions");
    x = a;
    x.cap.max_send_wr = 1u << 20;
    refused(x, EINVAL, "SQ too deep");
    x = a;
    x.cap.max_send_sge = 17;
    refused(x, EINVAL, "too many SGEs");
    errno = 0;
    EXPECT_EQ(mrc_create_qp(nullptr, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_create_qp(mctx[0], nullptr), nullptr);

    EXPECT_EQ(mrc_destroy_qp(q), 0);
    EXPECT_EQ(mrc_destroy_qp(nullptr), EINVAL);
    EXPECT_EQ(mrc_destroy_cq(cq), 0);
    EXPECT_EQ(mrc_destroy_cq(cq_b), 0);
}

// ---------------------------------------------------------------- modify rules

TEST_F(MrcApi, ModifyRules) {
    mrc_qp* q = make_qp(0);
    ASSERT_NE(q, nullptr);
    ibv_qp_attr v{};
    v.qp_state = IBV_QPS_INIT;
    v.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS;
    // Not supported on MRC: alternate path, migration state, rate limit.
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask | IBV_QP_ALT_PATH, nullptr, 0), EOPNOTSUPP);
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask | IBV_QP_PATH_MIG_STATE, nullptr, 0), EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask | IBV_QP_RATE_LIMIT, nullptr, 0), EOPNOTSUPP);
    EXPECT_EQ(errno, EOPNOTSUPP);
    // Missing what INIT needs, a port that does not exist, NULL attributes.
    EXPECT_EQ(mrc_modify_qp(q, &v, IBV_QP_STATE | IBV_QP_PKEY_INDEX, nullptr, 0), EINVAL);
    v.port_num = 5; // demo.ini's devices have four ports
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask | IBV_QP_PORT, nullptr, 0), EINVAL);
    EXPECT_EQ(mrc_modify_qp(q, nullptr, init_mask, nullptr, 0), EINVAL);
    EXPECT_EQ(mrc_modify_qp(nullptr, &v, init_mask, nullptr, 0), EINVAL);
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, nullptr, MRC_QP_MPR), EINVAL);

    mrc_qp_attr m{};
    // MRC attributes droce does not support: dynamic MPR, vendor bytes; profiles that no controller
    // brought ONLINE (ctl_test has the ones that are).
    m.cap = MRC_QP_CAP_DYNAMIC_MPR;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_CAP), EOPNOTSUPP);
    m.cap = 1 << 7;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_CAP), EINVAL); // unknown capability
    m = {};
    m.profile.ev_profile_id = 5;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_EV_PROFILE_ID), EINVAL);
    m.profile.cc_profile_id = 9;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_CC_PROFILE_ID), EINVAL);
    m = {};
    m.vendor_cfg[3] = 1;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_VENDOR_CFG), EOPNOTSUPP);
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, 1 << 12), EINVAL); // unknown MRC mask bit
    // Values out of range.
    m = {};
    m.mpr.mpr = 33;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_MPR), EINVAL);
    m.mpr.mpr = 0;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_MPR), EINVAL);
    m = {};
    m.timeout = 25;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_TIMEOUT), EINVAL);
    m = {};
    m.retry.linear_cnt = 8;
    m.retry.exp_cnt = 1;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_RETRY_CNT), EINVAL);
    m.retry.linear_cnt = 1;
    m.retry.exp_cnt = 26;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_RETRY_CNT), EINVAL);
    m = {};
    m.wimm.max_wimm_dest = 257;
    EXPECT_EQ(mrc_modify_qp(q, &v, init_mask, &m, MRC_QP_MAX_WIMM_DEST), EINVAL);
    ibv_qp_attr st{};
    ASSERT_EQ(mrc_query_qp(q, &st, IBV_QP_STATE, nullptr, 0, nullptr), 0);
    EXPECT_EQ(st.qp_state, IBV_QPS_RESET); // every refusal left it alone

    // INIT with the responder's attributes, profile 0 (none), zero vendor bytes, the trim NACK
    // and service time capabilities.
    m = {};
    m.mpr.mpr_dest = 8;
    m.wimm.max_wimm_dest = 32;
    m.cap = MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED | MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED;
    ASSERT_EQ(mrc_modify_qp(q, &v, init_mask, &m,
                            MRC_QP_MPR_DEST | MRC_QP_MAX_WIMM_DEST | MRC_QP_CAP |
                                MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID | MRC_QP_VENDOR_CFG),
              0);
    // RTR: the requester's attributes may still come; the responder's with this transition too.
    m = {};
    m.mpr.mpr_dest = 4;
    m.mpr.mpr = 2;
    ibv_gid peer = side[1]->gid;
    // The AV: a GRH is required, and the source GID index must be 0 (one GID per port).
    {
        ibv_qp_attr r{};
        r.qp_state = IBV_QPS_RTR;
        r.path_mtu = IBV_MTU_1024;
        r.ah_attr.is_global = 0;
        r.ah_attr.grh.dgid = peer;
        r.dest_qp_num = 0x12;
        const int rmask =
            IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU;
        EXPECT_EQ(mrc_modify_qp(q, &r, rmask, nullptr, 0), EINVAL);
        r.ah_attr.is_global = 1;
        r.ah_attr.grh.sgid_index = 3;
        EXPECT_EQ(mrc_modify_qp(q, &r, rmask, nullptr, 0), EINVAL);
        r.ah_attr.grh.sgid_index = 0;
        EXPECT_EQ(mrc_modify_qp(q, &r, rmask & ~IBV_QP_RQ_PSN, nullptr, 0), EINVAL); // missing
        r.path_mtu = static_cast<ibv_mtu>(7);
        EXPECT_EQ(mrc_modify_qp(q, &r, rmask, nullptr, 0), EINVAL); // no such MTU
    }
    ASSERT_EQ(to_rtr(q, 0x12, peer, 0, &m, MRC_QP_MPR_DEST | MRC_QP_MPR), 0);
    m = {};
    m.mpr.mpr_dest = 16;
    EXPECT_EQ(mrc_modify_qp(q, nullptr, 0, &m, MRC_QP_MPR_DEST), EINVAL); // responder: before RTR
    EXPECT_EQ(mrc_modify_qp(q, nullptr, 0, &m, MRC_QP_EV_PROFILE_ID), EINVAL);
    // RTS with the requester's attributes.
    m = {};
    m.wimm.max_wimm = 16;
    m.timeout = 12;
    m.retry.linear_cnt = 3;
    m.retry.exp_cnt = 25;
    ASSERT_EQ(to_rts(q, 0x20, &m, MRC_QP_MAX_WIMM | MRC_QP_TIMEOUT | MRC_QP_RETRY_CNT), 0);
    EXPECT_EQ(mrc_modify_qp(q, nullptr, 0, &m, MRC_QP_MAX_WIMM), EINVAL); // requester: before RTS

    mrc_qp_attr got{};
    ibv_qp_attr vq{};
    ASSERT_EQ(mrc_query_qp(q, &vq, IBV_QP_STATE, &got, MRC_QP_MPR | MRC_QP_MAX_WIMM, nullptr), 0);
    EXPECT_EQ(vq.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(vq.dest_qp_num, 0x12u);
    EXPECT_EQ(vq.sq_psn, 0x20u);
    EXPECT_EQ(vq.path_mtu, IBV_MTU_4096);
    EXPECT_EQ(std::memcmp(vq.ah_attr.grh.dgid.raw, peer.raw, 16), 0);
    EXPECT_EQ(vq.qp_access_flags, static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE));
    EXPECT_EQ(got.mpr.mpr, 2);
    EXPECT_EQ(got.mpr.mpr_dest, 4);
    EXPECT_EQ(got.wimm.max_wimm, 16);
    EXPECT_EQ(got.wimm.max_wimm_dest, 32);
    EXPECT_EQ(got.timeout, 12);
    EXPECT_EQ(got.retry.linear_cnt, 3);
    EXPECT_EQ(got.retry.exp_cnt, 25);
    EXPECT_EQ(got.cap, static_cast<std::uint32_t>(MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED |
                                                  MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED));
    EXPECT_EQ(mrc_query_qp(q, nullptr, IBV_QP_STATE, nullptr, 0, nullptr), EINVAL);
    EXPECT_EQ(mrc_query_qp(q, nullptr, 0, nullptr, 1 << 12, nullptr), EINVAL);
    EXPECT_EQ(mrc_query_qp(nullptr, &vq, 0, nullptr, 0, nullptr), EINVAL);

    // Back to RESET, then ERR by the application (no QP fatal event for that).
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(mrc_modify_qp(q, &r, IBV_QP_STATE, nullptr, 0), 0);
    r.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(mrc_modify_qp(q, &r, IBV_QP_STATE, nullptr, 0), 0);
    r.cur_qp_state = IBV_QPS_RTS; // a wrong assertion of the current state
    r.qp_state = IBV_QPS_RESET;
    EXPECT_EQ(mrc_modify_qp(q, &r, IBV_QP_STATE | IBV_QP_CUR_STATE, nullptr, 0), EINVAL);
    EXPECT_EQ(mrc_destroy_qp(q), 0);
    EXPECT_FALSE(readable(mctx[0]->async_rfd, 100));
}

// ---------------------------------------------------------------- data

TEST_F(MrcApi, PlanesFromOneGid) {
    connect_pair();
    // The application gave the peer's port-1 GID (10.0.0.x); plane p (10.0.p.0/24) reaches the
    // peer at the same host part: 10.0.p.x.
    for (int i = 0; i < 2; ++i) {
        const droce::rc::Qp& n = *qp[i]->native;
        ASSERT_EQ(n.num_paths, 4); // demo.ini: four planes
        for (std::uint8_t p = 0; p < 4; ++p) {
            const auto want =
                droce::wire::ipv4_mapped({10, 0, p, static_cast<std::uint8_t>(2 - i)});
            EXPECT_EQ(n.paths[p].hdr.dst_ip, want) << "side " << i << " plane " << int(p);
            EXPECT_EQ(n.paths[p].port, p);
        }
    }
}

TEST_F(MrcApi, WriteSweepAndImmediate) {
    connect_pair();
    std::mt19937 rng(42);
    for (auto& b : side[0]->buf)
        b = static_cast<std::uint8_t>(rng());
    std::fill(side[1]->buf.begin(), side[1]->buf.end(), 0);
    // A sweep of sizes, one signaled WRITE each, into distinct places.
    std::size_t off = 0;
    std::uint64_t id = 1;
    std::vector<std::pair<std::size_t, std::size_t>> done;
    for (std::size_t len = 1; len <= 256 * 1024; len *= 4) {
        ASSERT_EQ(write(0, off, len, id++), 0);
        done.emplace_back(off, len);
        off += len + 64;
    }
    auto wcs = poll_n(scq[0], done.size());
    ASSERT_EQ(wcs.size(), done.size());
    for (std::size_t k = 0; k < wcs.size(); ++k) {
        EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[k].status);
        EXPECT_EQ(wcs[k].opcode, IBV_WC_RDMA_WRITE);
        EXPECT_EQ(wcs[k].wr_id, k + 1); // in order
    }
    // WRITE with immediate: the receive completes only after its data, in order.
    for (int r = 0; r < 4; ++r)
        ASSERT_EQ(post_recv(1, 100 + static_cast<std::uint64_t>(r)), 0);
    for (int r = 0; r < 4; ++r)
        ASSERT_EQ(write(0, off + static_cast<std::size_t>(r) * 8192, 8192, 200 + r, true, true,
                        0xabc00 + static_cast<std::uint32_t>(r)),
                  0);
    wcs = poll_n(scq[0], 4);
    ASSERT_EQ(wcs.size(), 4u);
    auto rw = poll_n(rcq[1], 4);
    ASSERT_EQ(rw.size(), 4u);
    for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(rw[r].status, IBV_WC_SUCCESS);
        EXPECT_EQ(rw[r].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        EXPECT_TRUE(rw[r].wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(be32toh(rw[r].imm_data), 0xabc00u + static_cast<std::uint32_t>(r));
        EXPECT_EQ(rw[r].wr_id, 100u + static_cast<std::uint64_t>(r));
        EXPECT_EQ(rw[r].byte_len, 8192u);
        EXPECT_EQ(rw[r].qp_num, qp[1]->qpn);
    }
    done.emplace_back(off, 4 * 8192);
    for (auto [o, l] : done)
        ASSERT_EQ(std::memcmp(side[0]->buf.data() + o, side[1]->buf.data() + o, l), 0)
            << "offset " << o << " length " << l;
    // Both planes carried traffic and nothing had to be sent again: every plane's address was
    // right.
    std::uint64_t retransmits = 0, bad = 0;
    droce::Device* dev = droce_verbs_device(side[0]->ctx);
    ASSERT_NE(dev, nullptr);
    char scope[32];
    std::snprintf(scope, sizeof scope, "qp/0x%06x/mrc", qp[0]->qpn);
    bool found = false;
    dev->counter_registry().for_each(
        [&](std::string_view s, std::string_view name, std::uint64_t v) {
            if (s != scope) return;
            found = true;
            if (name == "retransmits") retransmits = v;
            if (name == "ev_assumed_bad") bad = v;
        });
    EXPECT_TRUE(found);
    EXPECT_EQ(retransmits, 0u);
    EXPECT_EQ(bad, 0u);
}

TEST_F(MrcApi, PostErrors) {
    mrc_qp* early = make_qp(0);
    ASSERT_NE(early, nullptr);
    qp[0] = early;
    errno = 0;
    EXPECT_EQ(write(0, 0, 64, 1), EINVAL); // not in RTS yet
    EXPECT_EQ(mrc_destroy_qp(early), 0);
    EXPECT_EQ(mrc_destroy_cq(scq[0]), 0);
    EXPECT_EQ(mrc_destroy_cq(rcq[0]), 0);
    connect_pair();
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(side[0]->buf.data()), 64, side[0]->mr->lkey};
    for (ibv_wr_opcode op :
         {IBV_WR_RDMA_READ, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_ATOMIC_CMP_AND_SWP,
          IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_SEND_WITH_INV, IBV_WR_LOCAL_INV, IBV_WR_BIND_MW}) {
        ibv_send_wr wr{};
        wr.opcode = op;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_send_wr* bad = nullptr;
        errno = 0;
        EXPECT_EQ(mrc_post_send(qp[0], &wr, &bad), EINVAL) << op;
        EXPECT_EQ(errno, EINVAL);
        EXPECT_EQ(bad, &wr);
    }
    // A chain: WRITE, READ: the WRITE is posted, bad_wr points at the READ.
    ibv_send_wr w2{};
    w2.opcode = IBV_WR_RDMA_READ;
    ibv_send_wr w1{};
    w1.wr_id = 77;
    w1.opcode = IBV_WR_RDMA_WRITE;
    w1.sg_list = &sge;
    w1.num_sge = 1;
    w1.send_flags = IBV_SEND_SIGNALED;
    w1.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(side[1]->buf.data());
    w1.wr.rdma.rkey = side[1]->mr->rkey;
    w1.next = &w2;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(mrc_post_send(qp[0], &w1, &bad), EINVAL);
    EXPECT_EQ(bad, &w2);
    auto wcs = poll_n(scq[0], 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 77u);
    // Too many SGEs for the QP, no QP, no WR.
    ibv_sge sges[2] = {sge, sge};
    w1.next = nullptr;
    w1.sg_list = sges;
    w1.num_sge = 2;
    EXPECT_EQ(mrc_post_send(qp[0], &w1, &bad), EINVAL);
    EXPECT_EQ(mrc_post_send(nullptr, &w1, &bad), EINVAL);
    EXPECT_EQ(mrc_post_send(qp[0], nullptr, &bad), EINVAL);
    // Inline WRITE: the data is taken at post time.
    std::memcpy(side[0]->buf.data() + 4096, "inline!", 8);
    ibv_sge isge{reinterpret_cast<std::uintptr_t>(side[0]->buf.data() + 4096), 8, 0};
    ibv_send_wr iw{};
    iw.wr_id = 78;
    iw.opcode = IBV_WR_RDMA_WRITE;
    iw.sg_list = &isge;
    iw.num_sge = 1;
    iw.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    iw.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(side[1]->buf.data() + 4096);
    iw.wr.rdma.rkey = side[1]->mr->rkey;
    EXPECT_EQ(mrc_post_send(qp[0], &iw, &bad), EINVAL); // max_inline_data 0 for this QP

    ibv_recv_wr r{};
    ibv_recv_wr* rbad = nullptr;
    ibv_sge rs[3] = {sge, sge, sge};
    r.sg_list = rs;
    r.num_sge = 3; // above max_recv_sge (1)
    errno = 0;
    EXPECT_EQ(mrc_post_recv(qp[1], &r, &rbad), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(rbad, &r);
    errno = 0;
    EXPECT_EQ(mrc_post_recv(nullptr, &r, &rbad), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_post_recv(qp[1], nullptr, &rbad), -1);
}

// ---------------------------------------------------------------- completion channel

TEST_F(MrcApi, CompletionEvents) {
    connect_pair();
    mrc_comp_channel* ch = nullptr;
    ASSERT_EQ(mrc_create_comp_channel(mctx[1], &ch), 0);
    int user = 5;
    mrc_cq* ecq = mrc_create_cq(mctx[1], 64, &user, ch, 0);
    ASSERT_NE(ecq, nullptr);
    // A second QP on side 1 whose receive CQ is the channel's CQ, connected to a new QP on side 0.
    mrc_qp_init_attr a{};
    a.send_cq = scq[1];
    a.recv_cq = ecq;
    a.pd = side[1]->pd;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    mrc_qp* rq = mrc_create_qp(mctx[1], &a);
    ASSERT_NE(rq, nullptr);
    a.send_cq = scq[0];
    a.recv_cq = rcq[0];
    a.pd = side[0]->pd;
    mrc_qp* sq = mrc_create_qp(mctx[0], &a);
    ASSERT_NE(sq, nullptr);
    ASSERT_EQ(to_init(rq), 0);
    ASSERT_EQ(to_init(sq), 0);
    ASSERT_EQ(to_rtr(rq, sq->qpn, side[0]->gid, 7), 0);
    ASSERT_EQ(to_rtr(sq, rq->qpn, side[1]->gid, 9), 0);
    ASSERT_EQ(to_rts(rq, 9), 0);
    ASSERT_EQ(to_rts(sq, 7), 0);
    ibv_recv_wr r{};
    r.wr_id = 55;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(mrc_post_recv(rq, &r, &rbad), 0);
    ASSERT_EQ(mrc_req_notify_cq(ecq, 0), 0);
    int fd = -1;
    ASSERT_EQ(mrc_get_comp_channel_fd(ch, &fd), 0);
    EXPECT_FALSE(readable(fd, 50));
    qp[0] = sq;
    qp[1] = rq;
    ASSERT_EQ(write(0, 0, 100, 9, true, true, 0x1234), 0);
    ASSERT_TRUE(readable(fd, 10'000));
    mrc_cq* got = nullptr;
    void* got_ctx = nullptr;
    ASSERT_EQ(mrc_get_cq_event(ch, &got, &got_ctx), 0);
    EXPECT_EQ(got, ecq);
    EXPECT_EQ(got_ctx, &user);
    auto wcs = poll_n(ecq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 55u);
    EXPECT_EQ(be32toh(wcs[0].imm_data), 0x1234u);
    // mrc_destroy_cq waits for the acknowledgement of the event it handed out.
    ASSERT_EQ(mrc_destroy_qp(rq), 0);
    std::atomic<bool> destroyed{false};
    std::thread t([&] {
        EXPECT_EQ(mrc_destroy_cq(ecq), 0);
        destroyed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(destroyed.load());
    mrc_ack_cq_events(ecq, 1);
    t.join();
    EXPECT_TRUE(destroyed.load());
    EXPECT_EQ(mrc_destroy_comp_channel(ch), 0);
    ASSERT_EQ(mrc_destroy_qp(sq), 0);
    qp[0] = qp[1] = nullptr;
}

// ---------------------------------------------------------------- asynchronous events

TEST_F(MrcApi, AsyncPortEvents) {
    droce::Device* dev = droce_verbs_device(side[0]->ctx);
    ASSERT_NE(dev, nullptr);
    ASSERT_EQ(dev->set_port_admin(1, false), 0); // plane 1 (verbs port 2) down
    mrc_async_event ev{};
    ASSERT_TRUE(next_event(mctx[0], &ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    EXPECT_EQ(ev.element.port_num, 2);
    mrc_ack_async_event(&ev);
    ASSERT_EQ(dev->set_port_admin(1, true), 0);
    ASSERT_TRUE(next_event(mctx[0], &ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    EXPECT_EQ(ev.element.port_num, 2);
    mrc_ack_async_event(&ev);
    EXPECT_FALSE(readable(mctx[1]->async_rfd, 50)); // the other device saw nothing
    errno = 0;
    EXPECT_EQ(mrc_get_async_event(nullptr, &ev), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_get_async_event(mctx[0], nullptr), -1);
    mrc_ack_async_event(nullptr);
}

TEST_F(MrcApi, AsyncQpFatal) {
    connect_pair();
    // A WRITE with an rkey the peer never registered: the responder refuses it (remote access
    // error), the requester's QP fails by itself.
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(side[0]->buf.data()), 64, side[0]->mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 3;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(side[1]->buf.data());
    wr.wr.rdma.rkey = side[1]->mr->rkey ^ 0xff;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(mrc_post_send(qp[0], &wr, &bad), 0);
    auto wcs = poll_n(scq[0], 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
    mrc_async_event ev{};
    ASSERT_TRUE(next_event(mctx[0], &ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
    EXPECT_EQ(ev.element.qp, qp[0]);
    mrc_ack_async_event(&ev);
    ibv_qp_attr v{};
    ASSERT_EQ(mrc_query_qp(qp[0], &v, IBV_QP_STATE, nullptr, 0, nullptr), 0);
    EXPECT_EQ(v.qp_state, IBV_QPS_ERR);
}

TEST_F(MrcApi, AsyncCqOverrun) {
    // A send CQ of one entry under a QP that completes four signaled WRITEs: the CQ overruns.
    mrc_cq* tiny = mrc_create_cq(mctx[0], 1, nullptr, nullptr, 0);
    ASSERT_NE(tiny, nullptr);
    connect_pair();
    mrc_qp_init_attr a{};
    a.send_cq = tiny;
    a.recv_cq = rcq[0];
    a.pd = side[0]->pd;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    mrc_qp* q = mrc_create_qp(mctx[0], &a);
    ASSERT_NE(q, nullptr);
    mrc_qp* peer = make_qp(1);
    ASSERT_NE(peer, nullptr);
    ASSERT_EQ(to_init(q), 0);
    ASSERT_EQ(to_init(peer), 0);
    ASSERT_EQ(to_rtr(q, peer->qpn, side[1]->gid, 1), 0);
    ASSERT_EQ(to_rtr(peer, q->qpn, side[0]->gid, 1), 0);
    ASSERT_EQ(to_rts(q, 1), 0);
    ASSERT_EQ(to_rts(peer, 1), 0);
    qp[0] = q;
    for (int k = 0; k < 4; ++k)
        ASSERT_EQ(write(0, static_cast<std::size_t>(k) * 64, 64, static_cast<std::uint64_t>(k)), 0);
    // Wait until the engine has completed all four (the SQ drains) without polling the CQ.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (q->native->sq.ready() > 0 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ibv_wc wc[4];
    errno = 0;
    EXPECT_EQ(mrc_poll_cq(tiny, 4, wc), -1);
    EXPECT_EQ(errno, EOVERFLOW);
    mrc_async_event ev{};
    ASSERT_TRUE(next_event(mctx[0], &ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    EXPECT_EQ(ev.element.cq, tiny);
    mrc_ack_async_event(&ev);
    EXPECT_EQ(mrc_poll_cq(tiny, 4, wc), -1); // still in error; one event only
    EXPECT_FALSE(readable(mctx[0]->async_rfd, 50));
    // The context cleans up what is left (QPs, CQs) when it is destroyed: TearDown.
}

/** A QP of 8 send and 8 receive WQEs, one SGE each, on @p cq for both queues. */
mrc_qp_init_attr small_qp(mrc_cq* cq, ibv_pd* pd) {
    mrc_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.pd = pd;
    a.cap.max_send_wr = 8;
    a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return a;
}

TEST_F(MrcApi, DestroyContextCleansUp) {
    mrc_context* c = mrc_create_context(side[0]->ctx, nullptr);
    ASSERT_NE(c, nullptr);
    mrc_comp_channel* ch = nullptr;
    ASSERT_EQ(mrc_create_comp_channel(c, &ch), 0);
    mrc_cq* cq = mrc_create_cq(c, 16, nullptr, ch, 0);
    ASSERT_NE(cq, nullptr);
    mrc_qp_hint_init_attr hi{};
    mrc_qp_hint* h = mrc_create_qp_hint(c, &hi);
    ASSERT_NE(h, nullptr);
    mrc_qp_init_attr a = small_qp(cq, side[0]->pd);
    mrc_qp* q = mrc_create_qp(c, &a);
    ASSERT_NE(q, nullptr);
    mrc_qp_attr m{};
    m.qp_hint = h;
    ASSERT_EQ(mrc_modify_qp(q, nullptr, 0, &m, MRC_QP_HINT), 0);
    const std::uint32_t qpn = q->qpn;
    EXPECT_EQ(mrc_destroy_context(c), 0);
    droce::Device* dev = droce_verbs_device(side[0]->ctx);
    ASSERT_NE(dev, nullptr);
    EXPECT_EQ(dev->qp_by_num(qpn), nullptr); // the QP is gone from the device
}

// A handle destroyed once is no handle: a second destroy, or a create, modify or query that names
// it, returns EINVAL and touches nothing (a second mrc_destroy_qp read the freed QP and destroyed
// it again). The objects a destroyed context took with it are gone as well.
TEST_F(MrcApi, DestroyedHandlesAreRefused) {
    mrc_comp_channel* ch = nullptr;
    ASSERT_EQ(mrc_create_comp_channel(mctx[0], &ch), 0);
    mrc_cq* cq = mrc_create_cq(mctx[0], 16, nullptr, ch, 0);
    ASSERT_NE(cq, nullptr);
    mrc_qp_hint_init_attr hi{};
    mrc_qp_hint* h = mrc_create_qp_hint(mctx[0], &hi);
    ASSERT_NE(h, nullptr);
    mrc_qp_init_attr a = small_qp(cq, side[0]->pd);
    mrc_qp* q = mrc_create_qp(mctx[0], &a);
    ASSERT_NE(q, nullptr);
    droce::Device* dev = droce_verbs_device(side[0]->ctx);
    ASSERT_NE(dev, nullptr);
    const std::uint32_t qpn = q->qpn;

    EXPECT_EQ(mrc_destroy_qp(q), 0);
    errno = 0;
    EXPECT_EQ(mrc_destroy_qp(q), EINVAL);
    EXPECT_EQ(errno, EINVAL);
    ibv_qp_attr v{};
    mrc_qp_attr m{};
    EXPECT_EQ(mrc_query_qp(q, &v, IBV_QP_STATE, nullptr, 0, nullptr), EINVAL);
    v.qp_state = IBV_QPS_INIT;
    EXPECT_EQ(mrc_modify_qp(q, &v, IBV_QP_STATE, nullptr, 0), EINVAL);
    EXPECT_EQ(dev->qp_by_num(qpn), nullptr);
    // (A handle is its address: a new object the allocator places there is live again.)
    mrc_qp* q2 = mrc_create_qp(mctx[0], &a);
    ASSERT_NE(q2, nullptr);
    m.qp_hint = h;
    ASSERT_EQ(mrc_modify_qp(q2, nullptr, 0, &m, MRC_QP_HINT), 0);
    EXPECT_EQ(mrc_destroy_qp_hint(h), -1); // a QP names it
    EXPECT_EQ(errno, EBUSY);
    m.qp_hint = nullptr;
    ASSERT_EQ(mrc_modify_qp(q2, nullptr, 0, &m, MRC_QP_HINT), 0);
    EXPECT_EQ(mrc_destroy_qp(q2), 0);

    EXPECT_EQ(mrc_destroy_qp_hint(h), 0);
    errno = 0;
    EXPECT_EQ(mrc_destroy_qp_hint(h), -1);
    EXPECT_EQ(errno, EINVAL);
    mrc_qp_hint_attr ha{};
    EXPECT_EQ(mrc_query_qp_hint(h, &ha, MRC_QP_HINT_NUM_QPS_PER_PEER), -1);
    EXPECT_EQ(mrc_modify_qp_hint(h, &ha, MRC_QP_HINT_NUM_QPS_PER_PEER), -1);

    EXPECT_EQ(mrc_destroy_cq(cq), 0);
    EXPECT_EQ(mrc_destroy_cq(cq), EINVAL);
    a.send_cq = a.recv_cq = cq; // a destroyed CQ
    errno = 0;
    EXPECT_EQ(mrc_create_qp(mctx[0], &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_destroy_comp_channel(ch), 0);
    EXPECT_EQ(mrc_destroy_comp_channel(ch), EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_create_cq(mctx[0], 16, nullptr, ch, 0), nullptr); // a destroyed channel
    EXPECT_EQ(errno, EINVAL);

    // What a context held goes with it; neither its objects nor the context itself can be named.
    mrc_context* c = mrc_create_context(side[0]->ctx, nullptr);
    ASSERT_NE(c, nullptr);
    mrc_cq* ccq = mrc_create_cq(c, 16, nullptr, nullptr, 0);
    ASSERT_NE(ccq, nullptr);
    a.send_cq = a.recv_cq = ccq;
    mrc_qp* cq_qp = mrc_create_qp(c, &a);
    ASSERT_NE(cq_qp, nullptr);
    ASSERT_EQ(mrc_destroy_context(c), 0);
    EXPECT_EQ(mrc_destroy_qp(cq_qp), EINVAL);
    EXPECT_EQ(mrc_destroy_cq(ccq), EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_create_cq(c, 16, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    mrc_comp_channel* ch2 = nullptr;
    EXPECT_EQ(mrc_create_comp_channel(c, &ch2), EINVAL);
    EXPECT_EQ(mrc_create_qp_hint(c, &hi), nullptr);
}

} // namespace
