/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc's OCP MRC controller API (droce's include/mrc_ctl.h), in one process over
 * config/demo.ini (droce_a, droce_b, four ring planes): device and version queries, port admin
 * state (a disabled port reported DOWN, traffic going on over the other planes), EV format
 * profiles, explicit and generated EV profiles through their state machines (every error the OCP
 * header names), QPs that name a profile (their paths carry the profile's EVs; DENY takes an EV
 * out of every QP that uses it), CC profiles (DCQCN, none; NSCC EOPNOTSUPP), EV event CQs, and
 * connectionless EV probes with RTT.
 *
 * CtlEvents runs in its own test process with DROCE_IMPAIR (random loss on every port): the
 * transport's own GOOD -> ASSUMED_BAD -> GOOD transitions come back as EV events.
 */
#include <mrc_ctl.h>

#include "mrc/mrc.h"
#include "mrc_fixture.h"

namespace {

using namespace mrc_fixture;
namespace mrc = droce::mrc;

class MrcCtl : public MrcApi {
  protected:
    /** A format profile @p id: @p mode with @p widths, brought ONLINE. */
    void fmt_online(std::uint64_t id, mrc_ctl_ev_fmt_mode mode, std::vector<std::uint8_t> widths) {
        std::vector<mrc_ctl_ev_fmt_field> f;
        for (std::uint8_t w : widths)
            f.push_back({w});
        mrc_ctl_ev_fmt_profile_attr a{};
        a.profile_state = MRC_CTL_PROFILE_OFFLINE;
        a.ev_fmt_mode = mode;
        a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
        a.ev_fmt_op.fmt_fields = f.data();
        a.ev_fmt_op.fmt_field_count = static_cast<int>(f.size());
        ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], id, &a,
                                                MRC_CTL_EV_FMT_PROFILE_STATE |
                                                    MRC_CTL_EV_FMT_PROFILE_MODE |
                                                    MRC_CTL_EV_FMT_PROFILE_OP),
                  0)
            << errno;
        a = {};
        a.profile_state = MRC_CTL_PROFILE_ONLINE;
        ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], id, &a, MRC_CTL_EV_FMT_PROFILE_STATE), 0)
            << errno;
    }
    static mrc_ctl_ev ev_of(std::uint32_t v, std::uint8_t port) {
        mrc_ctl_ev e{};
        std::memcpy(e.val, &v, sizeof v);
        e.port = port;
        return e;
    }
    /** An explicit profile @p id on format @p fmt: @p values on ports 1..4 in turn, ONLINE. */
    void explicit_online(std::uint64_t id, std::uint64_t fmt,
                         const std::vector<std::uint32_t>& values, std::uint32_t min_active = 1) {
        mrc_ctl_ev_profile_attr a{};
        a.profile_state = MRC_CTL_PROFILE_OFFLINE;
        a.ev_mode = MRC_CTL_EV_MODE_EXP;
        a.ev_fmt_profile_id = fmt;
        a.ev_count = static_cast<std::uint32_t>(values.size());
        a.ev_min_active = min_active;
        const int m = MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                      MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
                      MRC_CTL_EV_PROFILE_MIN_ACTIVE;
        ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], id, &a, m), 0) << errno;
        std::vector<mrc_ctl_ev_op_entry> en(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
            en[i].ev = MRC_CTL_EV_UNPOPULATED;
            en[i].ev_new = ev_of(values[i], static_cast<std::uint8_t>(i % 4 + 1));
        }
        a = {};
        a.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
        a.ev_op.entries = en.data();
        a.ev_op.entry_count = static_cast<int>(en.size());
        ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], id, &a, MRC_CTL_EV_PROFILE_EV_OP), 0) << errno;
        a = {};
        a.profile_state = MRC_CTL_PROFILE_ONLINE;
        ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], id, &a, MRC_CTL_EV_PROFILE_STATE), 0) << errno;
    }
    /** Back to INIT (tests share the process's controller state). */
    void ev_profile_init(std::uint64_t id) {
        mrc_ctl_ev_profile_attr a{};
        a.profile_state = MRC_CTL_PROFILE_OFFLINE;
        (void)mrc_ctl_modify_ev_profile(mctx[0], id, &a, MRC_CTL_EV_PROFILE_STATE);
        a.profile_state = MRC_CTL_PROFILE_INIT;
        EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], id, &a, MRC_CTL_EV_PROFILE_STATE), 0) << errno;
    }
    void fmt_init(std::uint64_t id) {
        mrc_ctl_ev_fmt_profile_attr a{};
        a.profile_state = MRC_CTL_PROFILE_OFFLINE;
        (void)mrc_ctl_modify_ev_fmt_profile(mctx[0], id, &a, MRC_CTL_EV_FMT_PROFILE_STATE);
        a.profile_state = MRC_CTL_PROFILE_INIT;
        EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], id, &a, MRC_CTL_EV_FMT_PROFILE_STATE), 0);
    }
    /** Connects qp[0] (on EV profile @p ev_profile, CC profile @p cc) with qp[1] (defaults). */
    void connect_with_profiles(std::uint64_t ev_profile, std::uint64_t cc = 0) {
        for (int i = 0; i < 2; ++i) {
            qp[i] = make_qp(i);
            ASSERT_NE(qp[i], nullptr);
            ASSERT_EQ(to_init(qp[i]), 0);
        }
        std::uint32_t qpn[2];
        for (int i = 0; i < 2; ++i)
            ASSERT_EQ(mrc_get_qpn(qp[i], &qpn[i]), 0);
        for (int i = 0; i < 2; ++i) {
            mrc_qp_attr m{};
            m.profile.ev_profile_id = i == 0 ? ev_profile : 0;
            m.profile.cc_profile_id = i == 0 ? cc : 0;
            ASSERT_EQ(to_rtr(qp[i], qpn[1 - i], side[1 - i]->gid, 0x1000 + 1 - i, &m,
                             MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID),
                      0);
            ASSERT_EQ(to_rts(qp[i], 0x1000 + i), 0);
        }
    }
    /** WRITEs @p n messages of @p len bytes 0 -> 1 with a pattern and checks every byte. */
    void transfer_checked(int n, std::size_t len, std::uint8_t seed) {
        for (int k = 0; k < n; ++k) {
            std::uint8_t* src = side[0]->buf.data();
            for (std::size_t b = 0; b < len; ++b)
                src[b] = static_cast<std::uint8_t>(seed + k + b * 7);
            std::memset(side[1]->buf.data(), 0, len);
            ASSERT_EQ(write(0, 0, len, 100 + static_cast<std::uint64_t>(k)), 0);
            const auto wc = poll_n(scq[0], 1);
            ASSERT_EQ(wc.size(), 1u);
            ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
            ASSERT_EQ(std::memcmp(side[0]->buf.data(), side[1]->buf.data(), len), 0) << k;
        }
    }
};

// ---------------------------------------------------------------- versions, device

TEST_F(MrcCtl, VersionAndDevice) {
    std::uint32_t cur = 0, last = 1, vend = 0, vlast = 1;
    mrc_ctl_query_version(&cur, &last, &vend, &vlast);
    EXPECT_EQ(cur, 0x01000001u); // 1.0.1
    EXPECT_EQ(last, 0u);
    EXPECT_EQ(vend, 0x01000000u);
    mrc_ctl_device_attr a{};
    ASSERT_EQ(mrc_ctl_query_device(side[0]->ctx, &a), 0);
    EXPECT_EQ(a.mrc_ctl_protocol_version, static_cast<std::uint32_t>(MRC_CTL_PROTOCOL_VERSION_1));
    EXPECT_EQ(a.phy_port_mask, 0x1eu); // ports 1..4, bit N = port N
    EXPECT_EQ(a.ev.ev_max_count_profile, 256u);
    EXPECT_EQ(a.ev.ev_fmt_mode_mask,
              static_cast<std::uint32_t>(MRC_CTL_EV_FMT_MODE_STEV | MRC_CTL_EV_FMT_MODE_UDP));
    EXPECT_EQ(a.ev.ev_mode_mask,
              static_cast<std::uint32_t>(MRC_CTL_EV_MODE_AUTO | MRC_CTL_EV_MODE_EXP |
                                         MRC_CTL_EV_MODE_GEN));
    EXPECT_TRUE(a.opt_attr & MRC_CTL_OPT_CAP_EV_EVENT);
    EXPECT_TRUE(a.opt_attr & MRC_CTL_OPT_CAP_EP_OP_EV_PROBE);
    ASSERT_NE(a.cc.algorithms, nullptr);
    std::vector<std::string> algs;
    for (const char** p = a.cc.algorithms; *p; ++p)
        algs.emplace_back(*p);
    EXPECT_EQ(algs, (std::vector<std::string>{"dcqcn", "dcqcn-paper"}));
    int supported = 0;
    mrc_ctl_device_attr x{};
    ASSERT_EQ(mrc_ctl_query_device_ex(side[0]->ctx, mctx[0], &x, &supported), 0);
    EXPECT_EQ(supported, 1);
    EXPECT_EQ(x.ev.ev_free_count, a.ev.ev_free_count);
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_device(nullptr, &a), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_device_ex(side[0]->ctx, mctx[1], &x, &supported), -1); // other device
    EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------- ports

TEST_F(MrcCtl, PortAdminStateIsAPlaneOutOfService) {
    connect_pair();
    mrc_ctl_port_attr pa{};
    ASSERT_EQ(mrc_ctl_query_port(mctx[0], 3, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
    EXPECT_EQ(pa.port_admin_state, MRC_CTL_PORT_ADMIN_ENABLED);
    pa.port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED;
    ASSERT_EQ(mrc_ctl_modify_port(mctx[0], 3, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
    pa = {};
    ASSERT_EQ(mrc_ctl_query_port(mctx[0], 3, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
    EXPECT_EQ(pa.port_admin_state, MRC_CTL_PORT_ADMIN_DISABLED);
    ibv_port_attr vp{};
    ASSERT_EQ(ibv_query_port(side[0]->ctx, 3, &vp), 0);
    EXPECT_EQ(vp.state, IBV_PORT_DOWN); // OCP: disabled ports report DOWN
    ASSERT_EQ(ibv_query_port(side[0]->ctx, 2, &vp), 0);
    EXPECT_EQ(vp.state, IBV_PORT_ACTIVE);
    // Traffic goes on over the three other planes; nothing leaves by port 3.
    const mrc::PlaneStats* ps = mrc::plane_stats(*qp[0]->native, 2);
    ASSERT_NE(ps, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the engine's next link check
    const std::uint64_t before = ps->tx_pkts.load();
    transfer_checked(8, 256 * 1024, 1);
    EXPECT_EQ(ps->tx_pkts.load(), before);
    EXPECT_GT(mrc::plane_stats(*qp[0]->native, 1)->tx_pkts.load(), 0u);
    pa.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
    ASSERT_EQ(mrc_ctl_modify_port(mctx[0], 3, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
    ASSERT_EQ(ibv_query_port(side[0]->ctx, 3, &vp), 0);
    EXPECT_EQ(vp.state, IBV_PORT_ACTIVE);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    transfer_checked(8, 256 * 1024, 2);
    EXPECT_GT(ps->tx_pkts.load(), before); // port 3 carries traffic again
    // Errors: port 0, a port the device does not have, an unknown mask bit, a bad state.
    for (std::uint8_t p : {0, 5}) {
        errno = 0;
        EXPECT_EQ(mrc_ctl_modify_port(mctx[0], p, &pa, MRC_CTL_PORT_ADMIN_STATE), -1);
        EXPECT_EQ(errno, EINVAL);
    }
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_port(mctx[0], 1, &pa, 2), -1);
    EXPECT_EQ(errno, EINVAL);
    pa.port_admin_state = static_cast<mrc_ctl_port_admin_state>(7);
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_port(mctx[0], 1, &pa, MRC_CTL_PORT_ADMIN_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_port(nullptr, 1, &pa, MRC_CTL_PORT_ADMIN_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------- EV format profiles

TEST_F(MrcCtl, FormatProfileStateMachine) {
    mrc_ctl_ev_fmt_profile_attr a{};
    // INIT -> ONLINE directly, or to OFFLINE without a mode: refused.
    a.profile_state = MRC_CTL_PROFILE_ONLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    a.profile_state = MRC_CTL_PROFILE_OFFLINE;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_STATE), -1);
    // SRv6: droce has no SRv6 encapsulation.
    a.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_SRV6;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(
                  mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE),
              -1);
    EXPECT_EQ(errno, EOPNOTSUPP);
    // UDP: at most 16 bits; wider is E2BIG.
    a.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
    ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(
                  mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE),
              0);
    mrc_ctl_ev_fmt_field f[2] = {{16}, {4}};
    a = {};
    a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
    a.ev_fmt_op.fmt_fields = f;
    a.ev_fmt_op.fmt_field_count = 2;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_OP), -1);
    EXPECT_EQ(errno, E2BIG);
    // OFFLINE -> ONLINE needs the fields.
    a = {};
    a.profile_state = MRC_CTL_PROFILE_ONLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
    a.ev_fmt_op.fmt_fields = f;
    a.ev_fmt_op.fmt_field_count = 1;
    ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(
                  mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_OP),
              0);
    // Query: state, mode, fields (E2BIG with the count when the array is short).
    mrc_ctl_ev_fmt_profile_attr q{};
    q.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_QUERY_FIELDS;
    q.ev_fmt_op.fmt_field_count = 0;
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_ev_fmt_profile(mctx[0], 7, &q, MRC_CTL_EV_FMT_PROFILE_OP), -1);
    EXPECT_EQ(errno, E2BIG);
    EXPECT_EQ(q.ev_fmt_op.fmt_field_count, 1);
    mrc_ctl_ev_fmt_field got[4] = {};
    q.ev_fmt_op.fmt_fields = got;
    q.ev_fmt_op.fmt_field_count = 4;
    ASSERT_EQ(mrc_ctl_query_ev_fmt_profile(mctx[0], 7, &q,
                                           MRC_CTL_EV_FMT_PROFILE_STATE |
                                               MRC_CTL_EV_FMT_PROFILE_MODE |
                                               MRC_CTL_EV_FMT_PROFILE_OP),
              0);
    EXPECT_EQ(q.cur_profile_state, MRC_CTL_PROFILE_ONLINE);
    EXPECT_EQ(q.ev_fmt_mode, MRC_CTL_EV_FMT_MODE_UDP);
    EXPECT_EQ(q.ev_fmt_op.fmt_field_count, 1);
    EXPECT_EQ(got[0].width, 16);
    // ONLINE: fields and mode are fixed.
    a = {};
    a.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
    a.ev_fmt_op.fmt_fields = f;
    a.ev_fmt_op.fmt_field_count = 1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, MRC_CTL_EV_FMT_PROFILE_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    // A query cannot modify; unknown mask bits; vendor bytes.
    q.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_ev_fmt_profile(mctx[0], 7, &q, MRC_CTL_EV_FMT_PROFILE_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, 1 << 9), -1);
    EXPECT_EQ(errno, EINVAL);
    a = {};
    a.vendor_cfg[0] = 1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 7, &a, MRC_CTL_EV_FMT_VENDOR_CFG), -1);
    EXPECT_EQ(errno, EOPNOTSUPP);
    fmt_init(7);
    q = {};
    ASSERT_EQ(mrc_ctl_query_ev_fmt_profile(mctx[0], 7, &q, MRC_CTL_EV_FMT_PROFILE_STATE), 0);
    EXPECT_EQ(q.cur_profile_state, MRC_CTL_PROFILE_INIT);
}

// ---------------------------------------------------------------- explicit EV profiles

TEST_F(MrcCtl, ExplicitProfileGivesTheQpItsPaths) {
    fmt_online(13, MRC_CTL_EV_FMT_MODE_STEV, {16, 16});
    // 16 EVs, value (i << 16) | (0xd000 + i) as the OCP example builds them: the low 16 bits go in
    // the UDP source port (demo.ini's planes are IPv4: no flow label).
    std::vector<std::uint32_t> values;
    for (std::uint32_t i = 0; i < 16; ++i)
        values.push_back((i << 16) | (0xd000u + i));
    // ONLINE before every EV is populated: refused.
    mrc_ctl_ev_profile_attr a{};
    a.profile_state = MRC_CTL_PROFILE_OFFLINE;
    a.ev_mode = MRC_CTL_EV_MODE_EXP;
    a.ev_fmt_profile_id = 13;
    a.ev_count = 2;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 21, &a,
                                        MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                                            MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT),
              0);
    a = {};
    a.profile_state = MRC_CTL_PROFILE_ONLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 21, &a, MRC_CTL_EV_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    ev_profile_init(21);

    explicit_online(1, 13, values, 2);
    // The format cannot go OFFLINE under an ONLINE EV profile.
    mrc_ctl_ev_fmt_profile_attr fa{};
    fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 13, &fa, MRC_CTL_EV_FMT_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EBUSY);
    // The EV array as the controller wrote it (E2BIG with the count for a short array).
    mrc_ctl_ev_profile_attr q{};
    q.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
    q.ev_op.entry_count = 3;
    std::vector<mrc_ctl_ev_op_entry> arr(16);
    q.ev_op.entries = arr.data();
    errno = 0;
    EXPECT_EQ(mrc_ctl_query_ev_profile(mctx[0], 1, &q, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, E2BIG);
    EXPECT_EQ(q.ev_op.entry_count, 16);
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], 1, &q,
                                       MRC_CTL_EV_PROFILE_EV_OP | MRC_CTL_EV_PROFILE_COUNT |
                                           MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_STATE),
              0);
    EXPECT_EQ(q.ev_count, 16u);
    EXPECT_EQ(q.ev_mode, MRC_CTL_EV_MODE_EXP);
    EXPECT_EQ(q.cur_profile_state, MRC_CTL_PROFILE_ONLINE);
    for (std::size_t i = 0; i < 16; ++i) {
        std::uint32_t v;
        std::memcpy(&v, arr[i].ev.val, sizeof v);
        EXPECT_EQ(v, values[i]);
        EXPECT_EQ(arr[i].ev.port, i % 4 + 1);
        EXPECT_EQ(arr[i].state, MRC_CTL_EV_GOOD);
    }

    connect_with_profiles(1);
    // The QP's paths are the profile's EVs, on the ports the profile named.
    std::array<mrc::EvInfo, mrc::kMaxEvs> infos;
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 16u);
    for (std::size_t i = 0; i < 16; ++i) {
        EXPECT_EQ(infos[i].udp_sport, 0xd000 + i);
        EXPECT_EQ(infos[i].plane, i % 4);
    }
    mrc_qp_attr mq{};
    ibv_qp_attr vq{};
    mrc_qp_init_attr iq{};
    ASSERT_EQ(mrc_query_qp(qp[0], &vq, 0, &mq, MRC_QP_EV_PROFILE_ID, &iq), 0);
    EXPECT_EQ(mq.profile.ev_profile_id, 1u);
    transfer_checked(4, 512 * 1024, 3);
    for (std::size_t i = 0; i < 16; ++i)
        infos[i] = {};
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 16u);
    for (std::size_t i = 0; i < 16; ++i)
        EXPECT_GT(infos[i].tx_pkts, 0u) << "EV " << i << " carried nothing";

    // ONLINE -> OFFLINE while a QP uses it: EBUSY.
    a = {};
    a.profile_state = MRC_CTL_PROFILE_OFFLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EBUSY);

    // DENY two EVs: the QP stops using them, data goes on; QUERY_EV_STATE says DENIED.
    std::vector<mrc_ctl_ev_op_entry> en(2);
    en[0].ev = ev_of(values[5], 2);
    en[0].state = MRC_CTL_EV_DENIED;
    en[1].ev = ev_of(values[6], 3);
    en[1].state = MRC_CTL_EV_DENIED;
    a = {};
    a.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
    a.ev_op.entries = en.data();
    a.ev_op.entry_count = 2;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_EV_OP), 0) << errno;
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 16u);
    EXPECT_EQ(infos[5].state, mrc::EvState::denied);
    EXPECT_EQ(infos[6].state, mrc::EvState::denied);
    EXPECT_EQ(infos[7].state, mrc::EvState::good);
    const std::uint64_t denied_tx = infos[5].tx_pkts;
    transfer_checked(4, 512 * 1024, 4);
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 16u);
    EXPECT_EQ(infos[5].tx_pkts, denied_tx); // a DENIED EV carries nothing
    std::vector<mrc_ctl_ev_op_entry> qs(2);
    qs[0].ev = ev_of(values[5], 2);
    qs[1].ev = ev_of(values[7], 4);
    q = {};
    q.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_STATE;
    q.ev_op.entries = qs.data();
    q.ev_op.entry_count = 2;
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], 1, &q, MRC_CTL_EV_PROFILE_EV_OP), 0);
    EXPECT_EQ(qs[0].state, MRC_CTL_EV_DENIED);
    EXPECT_EQ(qs[1].state, MRC_CTL_EV_GOOD);
    // An EV the profile does not have: ENOENT; ASSUMED_BAD is the transport's, not settable.
    en[0].ev = ev_of(0x12345, 1);
    en[0].state = MRC_CTL_EV_DENIED;
    a.ev_op.entry_count = 1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, ENOENT);
    en[0].ev = ev_of(values[5], 2);
    en[0].state = MRC_CTL_EV_ASSUMED_BAD;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    // Back to GOOD: used again.
    en[0].state = MRC_CTL_EV_GOOD;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_EV_OP), 0);
    transfer_checked(4, 512 * 1024, 5);
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 16u);
    EXPECT_EQ(infos[5].state, mrc::EvState::good);
    EXPECT_GT(infos[5].tx_pkts, denied_tx);
    // REPLACE_EV while ONLINE (droce offers EV_PROFILE_MODIFY_ONLINE): the QP's path changes value.
    std::vector<mrc_ctl_ev_op_entry> rp(1);
    rp[0].ev = ev_of(values[0], 1);
    rp[0].ev_new = ev_of(0xe000, 1);
    a = {};
    a.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
    a.ev_op.entries = rp.data();
    a.ev_op.entry_count = 1;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_EV_OP), 0) << errno;
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 16u);
    EXPECT_EQ(infos[0].udp_sport, 0xe000);
    // ... but not its port (the path's plane) while QPs use it.
    rp[0].ev = ev_of(0xe000, 1);
    rp[0].ev_new = ev_of(0xe000, 2);
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 1, &a, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    transfer_checked(2, 256 * 1024, 6);

    // A QP cannot name a profile that is not ONLINE.
    mrc_qp* extra = make_qp(0);
    ASSERT_NE(extra, nullptr);
    mrc_qp_attr m{};
    m.profile.ev_profile_id = 22;
    EXPECT_EQ(mrc_modify_qp(extra, nullptr, 0, &m, MRC_QP_EV_PROFILE_ID), EINVAL);
    EXPECT_EQ(mrc_destroy_qp(extra), 0);

    EXPECT_EQ(mrc_destroy_qp(qp[0]), 0);
    qp[0] = nullptr;
    ev_profile_init(1); // no QP uses it any more
    fmt_init(13);
}

// ---------------------------------------------------------------- generated EV profiles

TEST_F(MrcCtl, GeneratedProfile) {
    fmt_online(14, MRC_CTL_EV_FMT_MODE_UDP, {8, 8});
    // Two fields (OCP expansion): 0xc0 fixed, then 4 generated bits in the low nibble (3..10).
    mrc_ctl_ev_field fields[2] = {{8, 0xc0, 0, 0, 0}, {8, 0x50, 3, 10, 0x0f}};
    mrc_ctl_ev_profile_attr a{};
    a.profile_state = MRC_CTL_PROFILE_OFFLINE;
    a.ev_mode = MRC_CTL_EV_MODE_GEN;
    a.ev_fmt_profile_id = 14;
    a.ev_count = 8;
    a.ev_min_active = 2;
    a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
    a.ev_fields_op.fields = fields;
    a.ev_fields_op.field_count = 2;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 2, &a,
                                        MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                                            MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
                                            MRC_CTL_EV_PROFILE_MIN_ACTIVE |
                                            MRC_CTL_EV_PROFILE_EV_FIELDS_OP),
              0)
        << errno;
    // A field whose max_val needs more bits than its mask gives: EINVAL; both ops at once: EINVAL.
    mrc_ctl_ev_field bad[1] = {{8, 0, 0, 40, 0x0f}};
    mrc_ctl_ev_profile_attr b{};
    b.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
    b.ev_fields_op.fields = bad;
    b.ev_fields_op.field_count = 1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 2, &b, MRC_CTL_EV_PROFILE_EV_FIELDS_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 2, &b,
                                        MRC_CTL_EV_PROFILE_EV_FIELDS_OP | MRC_CTL_EV_PROFILE_EV_OP),
              -1);
    EXPECT_EQ(errno, EINVAL);
    // REPLACE_EV is for explicit arrays only.
    mrc_ctl_ev_op_entry en{};
    en.ev = MRC_CTL_EV_UNPOPULATED;
    en.ev_new = ev_of(1, 1);
    b = {};
    b.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
    b.ev_op.entries = &en;
    b.ev_op.entry_count = 1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 2, &b, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    b = {};
    b.profile_state = MRC_CTL_PROFILE_ONLINE;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 2, &b, MRC_CTL_EV_PROFILE_STATE), 0) << errno;
    // Fields read back as written.
    mrc_ctl_ev_field got[4] = {};
    mrc_ctl_ev_profile_attr q{};
    q.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS;
    q.ev_fields_op.fields = got;
    q.ev_fields_op.field_count = 4;
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], 2, &q, MRC_CTL_EV_PROFILE_EV_FIELDS_OP), 0);
    ASSERT_EQ(q.ev_fields_op.field_count, 2);
    EXPECT_EQ(got[1].mask, 0x0fu);
    EXPECT_EQ(got[1].max_val, 10u);

    connect_with_profiles(2);
    // Generated EVs 3..10 of the second field; packet value 0xc0 << 8 | 0x5N: UDP port 0xc05N.
    std::array<mrc::EvInfo, mrc::kMaxEvs> infos;
    ASSERT_EQ(mrc::ev_snapshot(*qp[0]->native, infos), 8u);
    for (std::size_t i = 0; i < 8; ++i) {
        EXPECT_EQ(infos[i].udp_sport, 0xc050 + 3 + i) << i;
        EXPECT_EQ(infos[i].plane, i % 4);
    }
    transfer_checked(4, 256 * 1024, 7);
    EXPECT_EQ(mrc_destroy_qp(qp[0]), 0);
    qp[0] = nullptr;
    ev_profile_init(2);
    fmt_init(14);
}

// ---------------------------------------------------------------- profile 0, CC profiles

TEST_F(MrcCtl, DefaultProfileAndCcProfiles) {
    // CC profile: DCQCN (NVIDIA) and "no CC"; NSCC and unknown names refused.
    mrc_ctl_cc_profile_attr c{};
    c.profile_state = MRC_CTL_PROFILE_OFFLINE;
    c.algorithm = "uet-1.0-nscc";
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c,
                                        MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
              -1);
    EXPECT_EQ(errno, EOPNOTSUPP);
    c.algorithm = "cubic";
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c,
                                        MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
              -1);
    EXPECT_EQ(errno, EINVAL);
    c.algorithm = "dcqcn";
    ASSERT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c,
                                        MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
              0);
    c = {};
    c.profile_state = MRC_CTL_PROFILE_ONLINE;
    ASSERT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c,
                                        MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CONFIG),
              0);
    mrc_ctl_cc_profile_attr cq{};
    ASSERT_EQ(mrc_ctl_query_cc_profile(mctx[0], 3, &cq,
                                       MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
              0);
    EXPECT_EQ(cq.cur_profile_state, MRC_CTL_PROFILE_ONLINE);
    ASSERT_NE(cq.algorithm, nullptr);
    EXPECT_STREQ(cq.algorithm, "dcqcn");

    connect_with_profiles(0, 3);
    // DCQCN on the QP: its reaction point paces it (the rate gauge is set).
    EXPECT_NE(qp[0]->native->pacer.dcqcn, nullptr);
    EXPECT_EQ(qp[1]->native->pacer.dcqcn, nullptr);
    transfer_checked(2, 256 * 1024, 8);
    c = {};
    c.profile_state = MRC_CTL_PROFILE_OFFLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c, MRC_CTL_CC_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EBUSY); // a QP uses it

    // Profile 0 is droce's own path set: ONLINE, AUTO, its EVs the QPs' UDP source ports.
    mrc_ctl_ev_profile_attr q{};
    std::vector<mrc_ctl_ev_op_entry> arr(1024);
    q.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
    q.ev_op.entries = arr.data();
    q.ev_op.entry_count = static_cast<int>(arr.size());
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], 0, &q,
                                       MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                                           MRC_CTL_EV_PROFILE_EV_OP),
              0);
    EXPECT_EQ(q.cur_profile_state, MRC_CTL_PROFILE_ONLINE);
    EXPECT_EQ(q.ev_mode, MRC_CTL_EV_MODE_AUTO);
    ASSERT_EQ(q.ev_op.entry_count, 128); // droce_a's QP: droce's default 128 paths
    std::uint32_t v0;
    std::memcpy(&v0, arr[0].ev.val, sizeof v0);
    EXPECT_EQ(v0, 0xc000u);
    EXPECT_EQ(arr[0].ev.port, 1);
    // DENY one of them: every QP of this device on profile 0 stops using it (the controller state
    // is per device: droce_b's QP keeps its path).
    mrc_ctl_ev_op_entry en{};
    en.ev = arr[1].ev;
    en.state = MRC_CTL_EV_DENIED;
    mrc_ctl_ev_profile_attr a{};
    a.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
    a.ev_op.entries = &en;
    a.ev_op.entry_count = 1;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EV_OP), 0);
    mrc::EvInfo info;
    ASSERT_TRUE(mrc::ev_info(*qp[0]->native, 1, info));
    EXPECT_EQ(info.state, mrc::EvState::denied);
    ASSERT_TRUE(mrc::ev_info(*qp[1]->native, 1, info));
    EXPECT_EQ(info.state, mrc::EvState::good);
    transfer_checked(2, 256 * 1024, 9);
    en.state = MRC_CTL_EV_GOOD;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EV_OP), 0);
    ASSERT_TRUE(mrc::ev_info(*qp[0]->native, 1, info));
    EXPECT_EQ(info.state, mrc::EvState::good);
    // Profile 0's shape is droce's: only its event mask and EV states change.
    a = {};
    a.ev_count = 4;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_COUNT), -1);
    EXPECT_EQ(errno, EINVAL);
    a.ev_event_mask = MRC_CTL_EV_DENIED; // events report GOOD and ASSUMED_BAD only
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EVENT_MASK), -1);
    EXPECT_EQ(errno, EINVAL);

    EXPECT_EQ(mrc_destroy_qp(qp[0]), 0);
    qp[0] = nullptr;
    c.profile_state = MRC_CTL_PROFILE_OFFLINE;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c, MRC_CTL_CC_PROFILE_STATE), 0);
    c.profile_state = MRC_CTL_PROFILE_INIT;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 3, &c, MRC_CTL_CC_PROFILE_STATE), 0);
}

// ---------------------------------------------------------------- EV event CQs

TEST_F(MrcCtl, EventCqRules) {
    mrc_cq* ev = mrc_ctl_create_ev_event_cq(mctx[0], 16, nullptr, nullptr, 0);
    ASSERT_NE(ev, nullptr);
    mrc_ctl_ev_event out[4];
    EXPECT_EQ(mrc_ctl_poll_ev_event(ev, 4, out), 0); // nothing yet
    ibv_wc wc;
    errno = 0;
    EXPECT_EQ(mrc_poll_cq(ev, 1, &wc), -1); // EV events are not completions
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_ctl_poll_ev_event(nullptr, 4, out), -EINVAL);
    EXPECT_EQ(mrc_ctl_poll_ev_event(ev, 4, nullptr), -EINVAL);
    mrc_cq* plain = mrc_create_cq(mctx[0], 16, nullptr, nullptr, 0);
    ASSERT_NE(plain, nullptr);
    EXPECT_EQ(mrc_ctl_poll_ev_event(plain, 4, out), -EINVAL);
    EXPECT_EQ(mrc_destroy_cq(plain), 0);
    errno = 0;
    EXPECT_EQ(mrc_ctl_create_ev_event_cq(mctx[0], 0, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(mrc_destroy_cq(ev), 0);
}

// ---------------------------------------------------------------- EV probes

TEST_F(MrcCtl, EvProbesReturnRtt) {
    mrc_ctl_ep_req req[4] = {};
    mrc_ctl_ep_rsp rsp[4] = {};
    for (int i = 0; i < 4; ++i) {
        // From each port of droce_a to droce_b's GID on that plane (10.0.N.2), one EV each.
        ibv_gid sg{}, dg{};
        ASSERT_EQ(ibv_query_gid(side[0]->ctx, static_cast<std::uint8_t>(i + 1), 0, &sg), 0);
        ASSERT_EQ(ibv_query_gid(side[1]->ctx, static_cast<std::uint8_t>(i + 1), 0, &dg), 0);
        req[i].req_id = static_cast<std::uint16_t>(40 + i);
        req[i].sgid = sg;
        req[i].dgid = dg;
        req[i].ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
        req[i].req_ev =
            ev_of(0xc100u + static_cast<std::uint32_t>(i), static_cast<std::uint8_t>(i + 1));
    }
    int got = 0;
    ASSERT_EQ(mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req, 4, 500'000'000,
                                         rsp, &got),
              0)
        << errno;
    ASSERT_EQ(got, 4);
    std::vector<int> seen;
    for (int i = 0; i < got; ++i) {
        seen.push_back(rsp[i].req_id);
        EXPECT_EQ(rsp[i].port, rsp[i].req_id - 40 + 1); // back on the port it was sent by
        EXPECT_GT(rsp[i].rtt, 0u);
        EXPECT_LT(rsp[i].rtt, 500'000'000u);
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int>{40, 41, 42, 43}));
    // Nobody at 10.0.0.99: ETIMEDOUT, no response.
    req[0].dgid.raw[15] = 99;
    got = -1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req, 1, 20'000'000,
                                         rsp, &got),
              -1);
    EXPECT_EQ(errno, ETIMEDOUT);
    EXPECT_EQ(got, 0);
    // Errors: duplicate ids, a port the device lacks, SRv6, PORT_STATUS_UPDATE.
    req[1].req_id = req[2].req_id;
    errno = 0;
    EXPECT_EQ(
        mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req + 1, 2, 1000, rsp, &got),
        -1);
    EXPECT_EQ(errno, EINVAL);
    req[3].req_ev.port = 9;
    errno = 0;
    EXPECT_EQ(
        mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req + 3, 1, 1000, rsp, &got),
        -1);
    EXPECT_EQ(errno, EINVAL);
    req[3].req_ev.port = 4;
    req[3].ev_fmt_mode = MRC_CTL_EV_FMT_MODE_SRV6;
    errno = 0;
    EXPECT_EQ(
        mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req + 3, 1, 1000, rsp, &got),
        -1);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_PORT_STATUS_UPDATE, req, 1, 1000,
                                         rsp, &got),
              -1);
    EXPECT_EQ(errno, EOPNOTSUPP);
    // A source GID that is not the port's.
    req[0].sgid.raw[15] ^= 1;
    req[0].dgid = req[1].dgid;
    errno = 0;
    EXPECT_EQ(
        mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req, 1, 1000, rsp, &got),
        -1);
    EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------- EV events (under loss)

TEST_F(MrcCtl, CtlEventsUnderLoss) {
    // Run with DROCE_IMPAIR=loss=...: losses make paths ASSUMED_BAD, probes bring them back.
    if (!std::getenv("DROCE_IMPAIR"))
        GTEST_SKIP() << "needs DROCE_IMPAIR (meson test mrcapi-ctl-events)";
    int supported = 0;
    mrc_ctl_device_attr da{};
    ASSERT_EQ(mrc_ctl_query_device_ex(side[0]->ctx, mctx[0], &da, &supported), 0); // 1.0.1 events
    ASSERT_TRUE(da.opt_attr & MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT);
    mrc_comp_channel* ch = nullptr;
    ASSERT_EQ(mrc_create_comp_channel(mctx[0], &ch), 0);
    int user = 5;
    mrc_cq* ev = mrc_ctl_create_ev_event_cq(mctx[0], 4096, &user, ch, 0);
    ASSERT_NE(ev, nullptr);
    ASSERT_EQ(mrc_req_notify_cq(ev, 0), 0);
    mrc_ctl_ev_profile_attr a{};
    a.ev_event_mask = MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EVENT_MASK), 0);
    connect_pair();
    std::size_t bad = 0, good = 0;
    std::vector<mrc_ctl_ev_event> evs(64);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int k = 0;
    while ((bad == 0 || good == 0) && std::chrono::steady_clock::now() < end) {
        transfer_checked(1, 1 << 20, static_cast<std::uint8_t>(k++));
        const int n = mrc_ctl_poll_ev_event(ev, 64, evs.data());
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(evs[static_cast<std::size_t>(i)].profile_id, 0u);
            EXPECT_EQ(evs[static_cast<std::size_t>(i)].drop_count, 0u);
            const mrc_ctl_ev& e = evs[static_cast<std::size_t>(i)].ev;
            std::uint32_t v;
            std::memcpy(&v, e.val, sizeof v);
            EXPECT_GE(v, 0xc000u); // droce's own paths: UDP source ports from 0xc000
            EXPECT_GE(e.port, 1);
            EXPECT_LE(e.port, 4);
            if (evs[static_cast<std::size_t>(i)].state == MRC_CTL_EV_ASSUMED_BAD) ++bad;
            if (evs[static_cast<std::size_t>(i)].state == MRC_CTL_EV_GOOD) ++good;
        }
    }
    EXPECT_GT(bad, 0u) << "no path went ASSUMED_BAD under loss";
    EXPECT_GT(good, 0u) << "no path came back GOOD";
    // The channel was armed: the first event rang it.
    ASSERT_TRUE(readable(ch->rfd, 1000));
    mrc_cq* got_cq = nullptr;
    void* got_ctx = nullptr;
    ASSERT_EQ(mrc_get_cq_event(ch, &got_cq, &got_ctx), 0);
    EXPECT_EQ(got_cq, ev);
    EXPECT_EQ(got_ctx, &user);
    mrc_ack_cq_events(ev, 1);
    a.ev_event_mask = 0;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EVENT_MASK), 0);
    EXPECT_EQ(mrc_destroy_cq(ev), 0);
    EXPECT_EQ(mrc_destroy_comp_channel(ch), 0);
}

} // namespace
