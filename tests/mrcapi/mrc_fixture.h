/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The fixture of the lib_mrc tests (api_test, ctl_test): config/demo.ini's two devices (droce_a,
 * droce_b) opened once per process, an MRC context on each per test, and helpers that create,
 * connect and drive MRC QPs the way the OCP example does.
 */
#pragma once

#include <mrc.h>
#include <mrc_ctl.h>

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine/device.h"
#include "mrcapi/internal.h"
#include "verbs/droce_private.h"
#include "wire/ipv6.h"

namespace mrc_fixture {

constexpr std::size_t kBuf = 1 << 20;

/** One device of demo.ini: verbs context, PD, a registered buffer. */
struct Side {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    std::vector<std::uint8_t> buf;
    ibv_mr* mr = nullptr;
    ibv_gid gid{}; ///< port 1, index 0
};

struct Env {
    Side s[2];
};
inline Env& env() {
    static Env e = [] {
        Env r;
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        for (int i = 0; list && i < n; ++i) {
            const char* name = ibv_get_device_name(list[i]);
            const int k = std::strcmp(name, "droce_a") == 0   ? 0
                          : std::strcmp(name, "droce_b") == 0 ? 1
                                                              : -1;
            if (k >= 0) r.s[k].ctx = ibv_open_device(list[i]);
        }
        ibv_free_device_list(list);
        for (Side& s : r.s) {
            if (!s.ctx) continue;
            s.pd = ibv_alloc_pd(s.ctx);
            s.buf.assign(kBuf, 0);
            s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
            ibv_query_gid(s.ctx, 1, 0, &s.gid);
        }
        return r;
    }();
    return e;
}

/** Waits up to @p ms for @p fd to be readable. */
inline bool readable(int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1;
}

/** Polls @p cq until @p n completions arrived or @p ms passed. */
inline std::vector<ibv_wc> poll_n(mrc_cq* cq, std::size_t n, int ms = 10'000) {
    std::vector<ibv_wc> out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    ibv_wc wc[16];
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
        const int got = mrc_poll_cq(cq, 16, wc);
        if (got < 0) break;
        out.insert(out.end(), wc, wc + got);
        if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return out;
}

/** The next event of @p ctx within @p ms (false on timeout). */
inline bool next_event(mrc_context* ctx, mrc_async_event* ev, int ms = 10'000) {
    if (!readable(ctx->async_rfd, ms)) return false;
    return mrc_get_async_event(ctx, ev) == 0;
}

class MrcApi : public ::testing::Test {
  protected:
    void SetUp() override {
        for (int i = 0; i < 2; ++i) {
            side[i] = &env().s[i];
            ASSERT_NE(side[i]->ctx, nullptr) << "demo.ini devices";
            ASSERT_NE(side[i]->mr, nullptr);
            mctx[i] = mrc_create_context(side[i]->ctx, nullptr);
            ASSERT_NE(mctx[i], nullptr) << "errno " << errno;
        }
    }
    void TearDown() override {
        for (int i = 0; i < 2; ++i) {
            if (!mctx[i]) continue;
            // Every port back up, whatever a test (or a failed one) left: the controller state is
            // the process's, shared by every test.
            mrc_ctl_port_attr pa{};
            pa.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
            for (std::uint8_t p = 1; p <= 4; ++p)
                (void)mrc_ctl_modify_port(mctx[i], p, &pa, MRC_CTL_PORT_ADMIN_STATE);
            EXPECT_EQ(mrc_destroy_context(mctx[i]), 0);
        }
    }

    /** A QP on side @p i with fresh CQs (kept in scq / rcq). */
    mrc_qp* make_qp(int i, std::uint32_t send_wr = 256, std::uint32_t recv_wr = 64) {
        scq[i] = mrc_create_cq(mctx[i], 1024, nullptr, nullptr, 0);
        rcq[i] = mrc_create_cq(mctx[i], 1024, nullptr, nullptr, 0);
        EXPECT_NE(scq[i], nullptr);
        EXPECT_NE(rcq[i], nullptr);
        mrc_qp_init_attr a{};
        a.send_cq = scq[i];
        a.recv_cq = rcq[i];
        a.pd = side[i]->pd;
        a.cap.max_send_wr = send_wr;
        a.cap.max_recv_wr = recv_wr;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        mrc_qp* q = mrc_create_qp(mctx[i], &a);
        EXPECT_NE(q, nullptr) << "errno " << errno;
        return q;
    }

    /** RESET -> INIT as the OCP example does it (port, P_Key index, access; IBV_QP_PORT too). */
    static int to_init(mrc_qp* q) {
        ibv_qp_attr v{};
        v.qp_state = IBV_QPS_INIT;
        v.pkey_index = 0;
        v.port_num = 1;
        v.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        return mrc_modify_qp(q, &v,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                             nullptr, 0);
    }
    /** INIT -> RTR toward @p peer_qpn at @p peer_gid (the peer's port-1 GID only). */
    static int to_rtr(mrc_qp* q, std::uint32_t peer_qpn, const ibv_gid& peer_gid,
                      std::uint32_t rq_psn, mrc_qp_attr* m = nullptr, int mmask = 0) {
        ibv_qp_attr v{};
        v.qp_state = IBV_QPS_RTR;
        v.path_mtu = IBV_MTU_4096;
        v.ah_attr.is_global = 1;
        v.ah_attr.grh.dgid = peer_gid;
        v.ah_attr.grh.sgid_index = 0;
        v.ah_attr.port_num = 1;
        v.dest_qp_num = peer_qpn;
        v.rq_psn = rq_psn;
        return mrc_modify_qp(
            q, &v, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU, m,
            mmask);
    }
    /** RTR -> RTS with the verbs retry attributes the OCP example passes (no effect on MRC). */
    static int to_rts(mrc_qp* q, std::uint32_t sq_psn, mrc_qp_attr* m = nullptr, int mmask = 0) {
        ibv_qp_attr v{};
        v.qp_state = IBV_QPS_RTS;
        v.sq_psn = sq_psn;
        v.timeout = 7;
        v.retry_cnt = 14;
        v.rnr_retry = 14;
        return mrc_modify_qp(q, &v,
                             IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_TIMEOUT,
                             m, mmask);
    }
    /** Creates and connects an MRC QP on each side (qp[0] <-> qp[1]). */
    void connect_pair() {
        for (int i = 0; i < 2; ++i) {
            qp[i] = make_qp(i);
            ASSERT_NE(qp[i], nullptr);
            ASSERT_EQ(to_init(qp[i]), 0);
        }
        std::uint32_t qpn[2];
        for (int i = 0; i < 2; ++i)
            ASSERT_EQ(mrc_get_qpn(qp[i], &qpn[i]), 0);
        for (int i = 0; i < 2; ++i) {
            ASSERT_EQ(to_rtr(qp[i], qpn[1 - i], side[1 - i]->gid, 0x1000 + 1 - i), 0);
            ASSERT_EQ(to_rts(qp[i], 0x1000 + i), 0);
        }
    }

    int write(int i, std::size_t off, std::size_t len, std::uint64_t wr_id, bool signaled = true,
              bool imm = false, std::uint32_t imm_data = 0) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(side[i]->buf.data() + off),
                    static_cast<std::uint32_t>(len), side[i]->mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
        wr.imm_data = htobe32(imm_data);
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(side[1 - i]->buf.data() + off);
        wr.wr.rdma.rkey = side[1 - i]->mr->rkey;
        ibv_send_wr* bad = nullptr;
        return mrc_post_send(qp[i], &wr, &bad);
    }
    int post_recv(int i, std::uint64_t wr_id) {
        ibv_recv_wr wr{};
        wr.wr_id = wr_id;
        ibv_recv_wr* bad = nullptr;
        return mrc_post_recv(qp[i], &wr, &bad);
    }

    Side* side[2] = {};
    mrc_context* mctx[2] = {};
    mrc_cq* scq[2] = {};
    mrc_cq* rcq[2] = {};
    mrc_qp* qp[2] = {};
};

} // namespace mrc_fixture
