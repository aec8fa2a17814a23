/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce's libibverbs.so.1 through the public verbs API (infiniband/verbs.h, linked against droce's
 * library, not the system's): queries, one positive case per verb family and one negative case per
 * error cause, and data between two devices of one process (config/demo.ini: droce_a and droce_b
 * joined by in-process ring ports). Unsupported verbs must return EOPNOTSUPP, never crash.
 */
#include <infiniband/verbs.h>

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/thread_cpu.h"

namespace {

/** Both devices of demo.ini, opened once for the whole program (the runtime is per process). */
struct Env {
    ibv_context* a = nullptr;
    ibv_context* b = nullptr;
};
Env& env() {
    static Env e = [] {
        Env r;
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        for (int i = 0; list && i < n; ++i) {
            if (std::strcmp(ibv_get_device_name(list[i]), "droce_a") == 0)
                r.a = ibv_open_device(list[i]);
            if (std::strcmp(ibv_get_device_name(list[i]), "droce_b") == 0)
                r.b = ibv_open_device(list[i]);
        }
        ibv_free_device_list(list);
        return r;
    }();
    return e;
}

class Verbs : public ::testing::Test {
  protected:
    void SetUp() override {
        a = env().a;
        b = env().b;
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
    }
    ibv_context* a = nullptr;
    ibv_context* b = nullptr;
};

TEST_F(Verbs, DeviceList) {
    int n = -1;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(list[n], nullptr);
    EXPECT_STREQ(ibv_get_device_name(list[0]), "droce_a");
    EXPECT_EQ(ibv_get_device_index(list[1]), 1);
    EXPECT_NE(ibv_get_device_guid(list[0]), 0u);
    ibv_free_device_list(list);
}

TEST_F(Verbs, ASecondCloseIsEinval) {
    // A second ibv_close_device of one context freed it twice (glibc abort; undefined in
    // rdma-core too): a context that is not open is refused before anything of it is read.
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ibv_context* c = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(ibv_close_device(c), 0);
    errno = 0;
    EXPECT_EQ(ibv_close_device(c), EINVAL);
    EXPECT_EQ(errno, EINVAL);
    // The contexts the other tests use are still open.
    ibv_device_attr d{};
    EXPECT_EQ(ibv_query_device(a, &d), 0);
}

TEST_F(Verbs, QueryDeviceAndPort) {
    ibv_device_attr d{};
    ASSERT_EQ(ibv_query_device(a, &d), 0);
    EXPECT_NE(d.vendor_id, 0x02c9u); // not Mellanox
    EXPECT_EQ(d.max_qp,
              16384); // rc::kMaxQp: an idle QP costs no engine time (timer heap, doorbells)
    EXPECT_EQ(d.max_sge, 16);
    EXPECT_EQ(d.atomic_cap, IBV_ATOMIC_HCA);
    EXPECT_EQ(d.phys_port_cnt, 4); // demo.ini: four planes
    ibv_device_attr_ex dx{};
    ASSERT_EQ(ibv_query_device_ex(a, nullptr, &dx), 0);
    EXPECT_EQ(dx.orig_attr.max_qp_wr, d.max_qp_wr);

    ibv_port_attr p{};
    ASSERT_EQ(ibv_query_port(a, 1, &p), 0);
    EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(p.active_mtu, IBV_MTU_4096);
    EXPECT_EQ(p.gid_tbl_len, 1);
    ASSERT_EQ(ibv_query_port(a, 4, &p), 0);
    EXPECT_EQ(ibv_query_port(a, 5, &p), EINVAL);
    EXPECT_EQ(ibv_query_port(a, 0, &p), EINVAL);

    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(a, 1, 0, &gid), 0);
    const std::uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    EXPECT_EQ(std::memcmp(gid.raw, want, 16), 0);
    errno = 0; // the man page: -1 and errno, where the ex and the other calls return the errno
    EXPECT_EQ(ibv_query_gid(a, 1, 1, &gid), -1);
    EXPECT_EQ(errno, EINVAL);
    ibv_gid_entry e{};
    ASSERT_EQ(ibv_query_gid_ex(a, 1, 0, &e, 0), 0);
    EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
    EXPECT_EQ(ibv_query_gid_ex(a, 1, 5, &e, 0), ENODATA);
    ibv_gid_entry table[4];
    EXPECT_EQ(ibv_query_gid_table(a, table, 4, 0), 4); // one GID per port
    __be16 pkey = 0;
    EXPECT_EQ(ibv_query_pkey(a, 1, 0, &pkey), 0);
    EXPECT_EQ(pkey, 0xffff);
    EXPECT_EQ(ibv_get_pkey_index(a, 1, 0xffff), 0);
    errno = 0;
    EXPECT_EQ(ibv_query_pkey(a, 1, 1, &pkey), -1);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Verbs, PdAndMr) {
    ibv_pd* pd = ibv_alloc_pd(a);
    ASSERT_NE(pd, nullptr);
    std::vector<char> buf(8192);
    ibv_mr* mr =
        ibv_reg_mr(pd, buf.data(), buf.size(),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_NE(mr->lkey, 0u);
    // Remote write without local write: EINVAL (IBTA C10-... as every provider).
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    // An iova other than the address, on-demand paging: not supported, each said once on stderr
    // (README: Unsupported).
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(ibv_reg_mr_iova(pd, buf.data(), buf.size(), 0x1000, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND),
              nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("iova other than the address is not supported"), std::string::npos) << said;
    EXPECT_NE(said.find("IBV_ACCESS_ON_DEMAND) is not supported"), std::string::npos) << said;
    // The PD is busy while the MR lives.
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

/**
 * Memory a kernel provider could not pin is refused at registration with EFAULT, as ib_umem_get
 * refuses it, instead of faulting the process at the first access: an unmapped range, a range
 * running past its mapping, a PROT_NONE page, and a read-only page with local write asked
 * (read-only memory without write access is fine). ibv_rereg_mr to such a range leaves the MR as it
 * was.
 */
TEST_F(Verbs, MemoryThatCannotBeUsedIsRefusedWithEfault) {
    ibv_pd* pd = ibv_alloc_pd(a);
    ASSERT_NE(pd, nullptr);
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    auto* m = static_cast<char*>(
        mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(m, MAP_FAILED);
    ASSERT_EQ(munmap(m + 2 * page, page), 0); // [m, m + 2 pages) mapped, the next page not
    const auto refused = [&](void* addr, std::size_t len, int access) {
        errno = 0;
        ibv_mr* mr = ibv_reg_mr(pd, addr, len, access);
        const bool ok = mr == nullptr && errno == EFAULT;
        if (mr) ibv_dereg_mr(mr);
        return ok;
    };
    constexpr int kLw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    EXPECT_TRUE(refused(m + 2 * page, 64, kLw)) << "unmapped";
    EXPECT_TRUE(refused(m + page, 2 * page, kLw)) << "past the mapping";
    EXPECT_TRUE(refused(m + page, page + 1, 0)) << "one byte past the mapping";
    ibv_mr* whole = ibv_reg_mr(pd, m, 2 * page, kLw);
    ASSERT_NE(whole, nullptr) << std::strerror(errno);
    ASSERT_EQ(mprotect(m + page, page, PROT_READ), 0);
    EXPECT_TRUE(refused(m + page, 64, kLw)) << "read-only, local write asked";
    ibv_mr* ro = ibv_reg_mr(pd, m + page, 64, IBV_ACCESS_REMOTE_READ);
    EXPECT_NE(ro, nullptr) << "read-only memory for remote reads: " << std::strerror(errno);
    if (ro) {
        EXPECT_EQ(ibv_dereg_mr(ro), 0);
    }
    ASSERT_EQ(mprotect(m + page, page, PROT_NONE), 0);
    EXPECT_TRUE(refused(m + page, 64, 0)) << "PROT_NONE";
    // rereg to a range past the mapping: refused, the MR unchanged.
    errno = 0;
    EXPECT_EQ(
        ibv_rereg_mr(whole, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, m, std::size_t{1} << 40, 0),
        IBV_REREG_MR_ERR_INPUT);
    EXPECT_EQ(errno, EFAULT);
    EXPECT_EQ(whole->length, 2 * page);
    EXPECT_EQ(ibv_dereg_mr(whole), 0);
    EXPECT_EQ(munmap(m, 2 * page), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

/**
 * ibv_rereg_mr refuses what libibverbs refuses before a provider sees it (IBV_REREG_MR_ERR_INPUT,
 * errno EINVAL, the MR unchanged): a new translation without an address or with length 0, and
 * access flags without IBV_REREG_MR_CHANGE_ACCESS (they would be dropped without a word).
 */
TEST_F(Verbs, ReregMrRefusesWhatLibibverbsRefuses) {
    ibv_pd* pd = ibv_alloc_pd(a);
    ASSERT_NE(pd, nullptr);
    std::vector<std::uint8_t> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    const auto refused = [&](int flags, void* addr, std::size_t len, int access) {
        errno = 0;
        const int r = ibv_rereg_mr(mr, flags, pd, addr, len, access);
        return r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL && mr->length == buf.size() &&
               mr->addr == buf.data();
    };
    EXPECT_TRUE(refused(IBV_REREG_MR_CHANGE_TRANSLATION, buf.data(), 0, 0)) << "length 0";
    EXPECT_TRUE(refused(IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, 64, 0)) << "no address";
    EXPECT_TRUE(refused(IBV_REREG_MR_CHANGE_PD, nullptr, 0, IBV_ACCESS_REMOTE_READ))
        << "access without IBV_REREG_MR_CHANGE_ACCESS";
    // What is allowed still is: a new length, new access flags.
    EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, buf.data(), 64, 0), 0);
    EXPECT_EQ(mr->length, 64u);
    EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
              0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Verbs, CqBadAttributes) {
    errno = 0;
    EXPECT_EQ(ibv_create_cq(a, 0, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(ibv_create_cq(a, 1 << 20, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(ibv_create_cq(a, 16, nullptr, nullptr, 1), nullptr); // one completion vector
    EXPECT_EQ(errno, EINVAL);
    ibv_cq_init_attr_ex cx{};
    cx.cqe = 16;
    cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    errno = 0;
    EXPECT_EQ(ibv_create_cq_ex(a, &cx), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(ibv_destroy_cq(nullptr), EINVAL);
}

TEST_F(Verbs, QpBadAttributes) {
    ibv_pd* pd = ibv_alloc_pd(a);
    ibv_cq* cq = ibv_create_cq(a, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.cap.max_send_wr = 8;
    ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.qp_type = IBV_QPT_UD;
    errno = 0;
    EXPECT_EQ(ibv_create_qp(pd, &ia), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_sge = 64;
    errno = 0;
    EXPECT_EQ(ibv_create_qp(pd, &ia), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ia.cap.max_send_sge = 1;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_GE(ia.cap.max_send_wr, 8u);
    // RESET -> RTR is not a legal transition.
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RTR;
    EXPECT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE), EINVAL);
    // RESET -> INIT without its required attributes.
    at.qp_state = IBV_QPS_INIT;
    EXPECT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE), EINVAL);
    // Alternate paths are not supported.
    EXPECT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_ALT_PATH), EOPNOTSUPP);
    // A rate limit only on RTR -> RTS and RTS -> RTS (as the kernel's ib_modify_qp_is_ok): not
    // in RESET, nor with RESET -> INIT, which then does not happen either.
    at = {};
    at.rate_limit = 10'000;
    EXPECT_EQ(ibv_modify_qp(qp, &at, IBV_QP_RATE_LIMIT), EINVAL);
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    EXPECT_EQ(ibv_modify_qp(qp, &at,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS |
                                IBV_QP_RATE_LIMIT),
              EINVAL);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_EQ(ibv_modify_qp(qp, &at,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    at = {};
    at.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
    // Posting in RESET.
    char byte = 0;
    ibv_sge sge{reinterpret_cast<uintptr_t>(&byte), 1, 0};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    EXPECT_EQ(ibv_destroy_cq(cq), EBUSY); // still used by the QP
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Verbs, UnsupportedVerbsSayEopnotsupp) {
    ibv_pd* pd = ibv_alloc_pd(a);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 4;
    sa.attr.max_sge = 1;
    errno = 0;
    EXPECT_EQ(ibv_create_srq(pd, &sa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_alloc_mw(pd, IBV_MW_TYPE_1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_xrcd_init_attr xa{};
    errno = 0;
    EXPECT_EQ(ibv_open_xrcd(a, &xa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_td_init_attr ta{};
    errno = 0;
    EXPECT_EQ(ibv_alloc_td(a, &ta), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_cq* cq = ibv_create_cq(a, 4, nullptr, nullptr, 0);
    EXPECT_EQ(ibv_resize_cq(cq, 64), EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_import_device(3), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
}

TEST(VerbsStrings, Helpers) {
    EXPECT_STRNE(ibv_wc_status_str(IBV_WC_SUCCESS), "");
    EXPECT_STRNE(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), ibv_wc_status_str(IBV_WC_SUCCESS));
    EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "PORT_ACTIVE");
    EXPECT_STRNE(ibv_event_type_str(IBV_EVENT_PORT_ERR), "unknown");
    EXPECT_STRNE(ibv_node_type_str(IBV_NODE_CA), "unknown");
    EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
    EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
    EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_40_GBPS), 40000);
    EXPECT_EQ(mbps_to_ibv_rate(40000), IBV_RATE_40_GBPS);
    EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_MAX), -1);
}

/** An RC QP on each device, connected to each other, with a registered buffer on each side. */
class Pair : public Verbs {
  protected:
    struct Side {
        ibv_pd* pd = nullptr;
        ibv_comp_channel* ch = nullptr;
        ibv_cq* cq = nullptr;
        ibv_qp* qp = nullptr;
        std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(65536);
        ibv_mr* mr = nullptr;
    };
    Side sa, sb;
    /** The path MTU both QPs are connected with (a fixture may set it before SetUp). */
    ibv_mtu path_mtu = IBV_MTU_1024;
    /** The local ACK timeout code and retry_cnt both QPs go to RTS with (set before SetUp). */
    std::uint8_t ack_timeout = 14;
    std::uint8_t retry_cnt = 7;
    /** Non-zero: both QPs go from RTR to RTS with IBV_QP_RATE_LIMIT at this many kb/s, after a
     *  rate below the caps was refused on that transition (set before SetUp). */
    std::uint32_t rts_rate_limit_kbps = 0;

    void make(ibv_context* c, Side& s) {
        s.pd = ibv_alloc_pd(c);
        s.ch = ibv_create_comp_channel(c);
        ASSERT_NE(s.ch, nullptr);
        ibv_cq_init_attr_ex cx{};
        cx.cqe = 64;
        cx.channel = s.ch;
        cx.wc_flags = IBV_WC_STANDARD_FLAGS;
        ibv_cq_ex* cqx = ibv_create_cq_ex(c, &cx);
        ASSERT_NE(cqx, nullptr);
        s.cq = ibv_cq_ex_to_cq(cqx);
        ibv_qp_init_attr_ex ia{};
        ia.send_cq = s.cq;
        ia.recv_cq = s.cq;
        ia.cap.max_send_wr = 32;
        ia.cap.max_recv_wr = 32;
        ia.cap.max_send_sge = 2;
        ia.cap.max_recv_sge = 2;
        ia.cap.max_inline_data = 64;
        ia.qp_type = IBV_QPT_RC;
        ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ia.pd = s.pd;
        ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
                            IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        s.qp = ibv_create_qp_ex(c, &ia);
        ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
        s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
        ASSERT_NE(s.mr, nullptr);
    }
    void connect(ibv_context* c, Side& s, const Side& peer, ibv_context* peer_ctx) {
        ibv_qp_attr at{};
        at.qp_state = IBV_QPS_INIT;
        at.pkey_index = 0;
        at.port_num = 1;
        at.qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        ASSERT_EQ(
            ibv_modify_qp(s.qp, &at,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
        at = {};
        at.qp_state = IBV_QPS_RTR;
        at.path_mtu = path_mtu;
        at.dest_qp_num = peer.qp->qp_num;
        at.rq_psn = 100;
        at.max_dest_rd_atomic = 4;
        at.min_rnr_timer = 1;
        at.ah_attr.port_num = 1;
        // Without a global route (RoCE addresses by GID): EINVAL.
        ASSERT_EQ(ibv_modify_qp(s.qp, &at,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER),
                  EINVAL);
        at.ah_attr.is_global = 1;
        ASSERT_EQ(ibv_query_gid(peer_ctx, 1, 0, &at.ah_attr.grh.dgid), 0);
        at.ah_attr.grh.hop_limit = 64;
        at.ah_attr.grh.sgid_index = 1; // one GID per port (gid_tbl_len 1): EINVAL, as the kernel
        ASSERT_EQ(ibv_modify_qp(s.qp, &at,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER),
                  EINVAL);
        at.ah_attr.grh.sgid_index = 0;
        ASSERT_EQ(ibv_modify_qp(s.qp, &at,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER),
                  0);
        at = {};
        at.qp_state = IBV_QPS_RTS;
        at.sq_psn = 100;
        at.timeout = ack_timeout;
        at.retry_cnt = retry_cnt;
        at.rnr_retry = 7;
        at.max_rd_atomic = 4;
        int to_rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        if (rts_rate_limit_kbps != 0) {
            at.rate_limit = 1; // below packet_pacing_caps: EINVAL, and the QP stays in RTR
            ASSERT_EQ(ibv_modify_qp(s.qp, &at, to_rts | IBV_QP_RATE_LIMIT), EINVAL);
            ibv_qp_attr now{};
            ibv_qp_init_attr ia{};
            ASSERT_EQ(ibv_query_qp(s.qp, &now, IBV_QP_STATE, &ia), 0);
            EXPECT_EQ(now.qp_state, IBV_QPS_RTR);
            at.rate_limit = rts_rate_limit_kbps;
            to_rts |= IBV_QP_RATE_LIMIT;
        }
        ASSERT_EQ(ibv_modify_qp(s.qp, &at, to_rts), 0);
        EXPECT_EQ(s.qp->state, IBV_QPS_RTS);
        (void)c;
    }
    void SetUp() override {
        Verbs::SetUp();
        make(a, sa);
        make(b, sb);
        connect(a, sa, sb, b);
        connect(b, sb, sa, a);
    }
    void TearDown() override {
        for (Side* s : {&sa, &sb}) {
            if (s->qp) {
                EXPECT_EQ(ibv_destroy_qp(s->qp), 0);
            }
            if (s->mr) {
                EXPECT_EQ(ibv_dereg_mr(s->mr), 0);
            }
            if (s->cq) {
                EXPECT_EQ(ibv_destroy_cq(s->cq), 0);
            }
            if (s->ch) {
                EXPECT_EQ(ibv_destroy_comp_channel(s->ch), 0);
            }
            if (s->pd) {
                EXPECT_EQ(ibv_dealloc_pd(s->pd), 0);
            }
        }
    }
    /** The inline SEND of "event" (sizeof: 6 bytes) from sa to sb, after a 256-byte receive
     *  (@p recv_id) on sb and sb's CQ armed for its completion event. */
    void armed_send_to_b(std::uint64_t recv_id) {
        ibv_sge rs{reinterpret_cast<uintptr_t>(sb.buf.data()), 256, sb.mr->lkey};
        ibv_recv_wr rw{};
        rw.wr_id = recv_id;
        rw.sg_list = &rs;
        rw.num_sge = 1;
        ibv_recv_wr* rbad = nullptr;
        ASSERT_EQ(ibv_post_recv(sb.qp, &rw, &rbad), 0);
        ASSERT_EQ(ibv_req_notify_cq(sb.cq, 0), 0);
        static char msg[] = "event";
        ibv_sge ss{reinterpret_cast<uintptr_t>(msg), sizeof msg, 0};
        ibv_send_wr wr{};
        wr.wr_id = 1;
        wr.sg_list = &ss;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    }
    /** Polls @p cq for one completion (up to 5 s). */
    static bool poll_one(ibv_cq* cq, ibv_wc* wc) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::chrono::steady_clock::now() < end) {
            int n = ibv_poll_cq(cq, 1, wc);
            if (n == 1) return true;
            if (n < 0) return false;
        }
        return false;
    }
    ibv_send_wr write_wr(ibv_sge* sge, std::uint32_t rkey, std::uint64_t raddr) {
        ibv_send_wr wr{};
        wr.wr_id = 7;
        wr.sg_list = sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        return wr;
    }
    /** Posts one signalled @p len-byte RDMA WRITE from the start of sa's buffer (@p lkey) to the
     *  start of sb's (@p rkey) on sa's QP: @return ibv_post_send's result. */
    int post_write(std::uint32_t len, std::uint32_t lkey, std::uint32_t rkey) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), len, lkey};
        ibv_send_wr wr = write_wr(&sge, rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(sa.qp, &wr, &bad);
    }
    /** Posts one 64 B RDMA WRITE from sa's buffer (@p lkey) to sb's (@p rkey) on sa's QP and
     *  waits for its completion: @return its status (IBV_WC_GENERAL_ERR: none came, or the post
     *  failed). */
    ibv_wc_status write_64(std::uint32_t lkey, std::uint32_t rkey) {
        ibv_wc wc{};
        if (post_write(64, lkey, rkey) != 0 || !poll_one(sa.cq, &wc)) return IBV_WC_GENERAL_ERR;
        return wc.status;
    }
    /**
     * A third QP pair, x on a and y on b, connected; x sends into @p send_cq (a CQ of a) and has
     * posted send_cq->cqe + 4 signalled 64-byte WRITEs to sb's buffer, none polled: more
     * completions than the CQ holds. The caller destroys x.qp and y.qp.
     */
    void overrun_cq(ibv_cq* send_cq, Side& x, Side& y) {
        ibv_qp_init_attr ia{};
        ia.send_cq = send_cq;
        ia.recv_cq = sa.cq;
        ia.cap.max_send_wr = static_cast<std::uint32_t>(send_cq->cqe + 8);
        ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        ia.qp_type = IBV_QPT_RC;
        x.qp = ibv_create_qp(sa.pd, &ia);
        ASSERT_NE(x.qp, nullptr);
        ia.send_cq = sb.cq;
        ia.recv_cq = sb.cq;
        y.qp = ibv_create_qp(sb.pd, &ia);
        ASSERT_NE(y.qp, nullptr);
        connect(a, x, y, b);
        connect(b, y, x, a);
        ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 64, sa.mr->lkey};
        for (int i = 0; i < send_cq->cqe + 4; ++i) {
            ibv_send_wr wr =
                write_wr(&sge, sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
            ibv_send_wr* bad = nullptr;
            ASSERT_EQ(ibv_post_send(x.qp, &wr, &bad), 0) << i;
        }
    }
};

TEST_F(Pair, WriteMovesDataAndBadKeysFail) {
    for (std::size_t i = 0; i < 4096; ++i)
        sa.buf[i] = static_cast<std::uint8_t>(i * 7);
    ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 4096, sa.mr->lkey};
    ibv_send_wr wr = write_wr(&sge, sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(sa.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(std::memcmp(sa.buf.data(), sb.buf.data(), 4096), 0);

    // A bad rkey: the responder NAKs, the requester completes with REM_ACCESS_ERR (and the QP
    // fails).
    wr = write_wr(&sge, sb.mr->rkey ^ 0x100, reinterpret_cast<uintptr_t>(sb.buf.data()));
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    ASSERT_TRUE(poll_one(sa.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
}

TEST_F(Pair, BadLkeyFailsLocally) {
    const ibv_wc_status st = write_64(sa.mr->lkey + 0x1000, sb.mr->rkey);
    EXPECT_EQ(st, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(st);
}

TEST_F(Pair, PostSendRejectsBadWrs) {
    ibv_sge sge[20] = {};
    ibv_send_wr wr{};
    wr.sg_list = sge;
    wr.num_sge = 20; // above the QP's max_send_sge and droce's 16
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(sa.qp, &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    ibv_send_wr w2{};
    w2.opcode = IBV_WR_LOCAL_INV; // not supported on droce
    wr.num_sge = 0;
    wr.next = &w2;
    bad = nullptr;
    // The zero-length SEND before the bad WR is posted: give it a receive and wait for it, so
    // that it is not still in flight (RNR retries) when the next test's QPs reuse these QPNs and
    // PSNs (an application thread that drives progress sends it at once).
    ibv_recv_wr pr{};
    pr.wr_id = 9;
    ibv_recv_wr* prbad = nullptr;
    ASSERT_EQ(ibv_post_recv(sb.qp, &pr, &prbad), 0);
    EXPECT_EQ(ibv_post_send(sa.qp, &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &w2);
    ibv_wc rwc{};
    ASSERT_TRUE(poll_one(sb.cq, &rwc));
    EXPECT_EQ(rwc.wr_id, 9u);
    EXPECT_EQ(rwc.byte_len, 0u);
    ibv_recv_wr rw{};
    rw.sg_list = nullptr;
    rw.num_sge = 40;
    ibv_recv_wr* rbad = nullptr;
    EXPECT_EQ(ibv_post_recv(sa.qp, &rw, &rbad), EINVAL);
    EXPECT_EQ(rbad, &rw);
}

TEST_F(Pair, SendInlineWithCompletionEventAndCqEx) {
    // b posts a receive and arms its CQ; a sends inline data; b's channel fd becomes readable.
    ibv_sge rs{reinterpret_cast<uintptr_t>(sb.buf.data()), 256, sb.mr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = 42;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_recv(sb.qp, &rw, &rbad), 0);
    ASSERT_EQ(ibv_req_notify_cq(sb.cq, 0), 0);
    char msg[] = "droce inline hello";
    ibv_sge ss{reinterpret_cast<uintptr_t>(msg), sizeof msg, 0}; // lkey ignored for inline data
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &ss;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htobe32(0x12345678);
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    pollfd pfd{sb.ch->fd, POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(sb.ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, sb.cq);
    ibv_ack_cq_events(ev_cq, 1);
    // Read it with the ibv_cq_ex interface.
    ibv_cq_ex* cqx = reinterpret_cast<ibv_cq_ex*>(sb.cq);
    ibv_poll_cq_attr pa{};
    ASSERT_EQ(ibv_start_poll(cqx, &pa), 0);
    EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
    EXPECT_EQ(cqx->wr_id, 42u);
    EXPECT_EQ(ibv_wc_read_opcode(cqx), IBV_WC_RECV);
    EXPECT_EQ(ibv_wc_read_byte_len(cqx), sizeof msg);
    EXPECT_TRUE(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM);
    EXPECT_EQ(be32toh(ibv_wc_read_imm_data(cqx)), 0x12345678u);
    EXPECT_EQ(ibv_wc_read_qp_num(cqx), sb.qp->qp_num);
    EXPECT_EQ(ibv_next_poll(cqx), ENOENT);
    ibv_end_poll(cqx);
    EXPECT_STREQ(reinterpret_cast<char*>(sb.buf.data()), msg);
    // The sender's completion; then the CQ is empty: start_poll says ENOENT (no end_poll then).
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(sa.cq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_start_poll(cqx, &pa), ENOENT);
}

TEST_F(Pair, WrApiReadWriteAtomicAndUnsupported) {
    ibv_qp_ex* qx = ibv_qp_to_qp_ex(sa.qp);
    ASSERT_NE(qx, nullptr);
    for (std::size_t i = 0; i < 8192; ++i)
        sb.buf[i] = static_cast<std::uint8_t>(i ^ 0x5a);
    std::uint64_t counter = 5;
    std::memcpy(sb.buf.data() + 16384, &counter, 8);
    const auto raddr = reinterpret_cast<uintptr_t>(sb.buf.data());
    ibv_wr_start(qx);
    qx->wr_id = 1;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_read(qx, sb.mr->rkey, raddr);
    ibv_sge two[2] = {{reinterpret_cast<uintptr_t>(sa.buf.data()), 4096, sa.mr->lkey},
                      {reinterpret_cast<uintptr_t>(sa.buf.data()) + 4096, 4096, sa.mr->lkey}};
    ibv_wr_set_sge_list(qx, 2, two);
    qx->wr_id = 2;
    ibv_wr_atomic_fetch_add(qx, sb.mr->rkey, raddr + 16384, 10);
    ibv_wr_set_sge(qx, sa.mr->lkey, reinterpret_cast<uintptr_t>(sa.buf.data()) + 32768, 8);
    qx->wr_id = 3;
    ibv_wr_rdma_write(qx, sb.mr->rkey, raddr + 20000);
    ibv_wr_set_inline_data(qx, const_cast<char*>("inline!"), 8);
    ASSERT_EQ(ibv_wr_complete(qx), 0);
    for (std::uint64_t want = 1; want <= 3; ++want) {
        ibv_wc wc{};
        ASSERT_TRUE(poll_one(sa.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.wr_id, want);
    }
    EXPECT_EQ(std::memcmp(sa.buf.data(), sb.buf.data(), 8192), 0);
    std::uint64_t old = 0, now = 0;
    std::memcpy(&old, sa.buf.data() + 32768, 8);
    std::memcpy(&now, sb.buf.data() + 16384, 8);
    EXPECT_EQ(old, 5u);
    EXPECT_EQ(now, 15u);
    EXPECT_STREQ(reinterpret_cast<char*>(sb.buf.data()) + 20000, "inline!");

    // Unsupported in a batch: wr_complete says EOPNOTSUPP and nothing of the batch is posted.
    ibv_wr_start(qx);
    qx->wr_id = 9;
    ibv_wr_rdma_write(qx, sb.mr->rkey, raddr);
    ibv_wr_set_sge(qx, sa.mr->lkey, reinterpret_cast<uintptr_t>(sa.buf.data()), 8);
    ibv_wr_local_inv(qx, 0x1234);
    EXPECT_EQ(ibv_wr_complete(qx), EOPNOTSUPP);
    // wr_abort drops a batch.
    ibv_wr_start(qx);
    ibv_wr_send(qx);
    ibv_wr_set_sge(qx, sa.mr->lkey, reinterpret_cast<uintptr_t>(sa.buf.data()), 8);
    ibv_wr_abort(qx);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ibv_wc wc{};
    EXPECT_EQ(ibv_poll_cq(sa.cq, 1, &wc), 0);
}

TEST_F(Pair, ResetDropsTheQpsCompletions) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 64, sa.mr->lkey};
    ibv_send_wr wr = write_wr(&sge, sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    // Let the completion arrive, leave it in the CQ, then RESET the QP: it must be gone.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE), 0);
    EXPECT_EQ(sa.qp->state, IBV_QPS_RESET);
    ibv_wc wc{};
    EXPECT_EQ(ibv_poll_cq(sa.cq, 1, &wc), 0);
}

TEST_F(Pair, QueryQp) {
    ibv_qp_attr at{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_CAP, &ia), 0);
    EXPECT_EQ(at.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(at.dest_qp_num, sb.qp->qp_num);
    EXPECT_EQ(at.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(at.sq_psn, 100u);
    EXPECT_EQ(ia.qp_type, IBV_QPT_RC);
    EXPECT_GE(ia.cap.max_inline_data, 64u);
}

/**
 * IBV_QP_RATE_LIMIT (kb/s) through the verbs library paces the QP on the wire: 64 KiB WRITEs at
 * path MTU 4096 for 0.3 s, wire bytes (every frame's headers and ICRC counted, as the pacer counts
 * them) over wall time, for 1, 5 and 20 Gb/s. Asserted: the QP never exceeds its limit (+5 %); at 1
 * and 5 Gb/s it reaches it (-5 %; measured within 1 %); at 20 Gb/s, near the speed of the one
 * engine thread that drives both devices of demo.ini here, the limit is what paces it (at least
 * 0.85 of it when the same QP unpaced, measured first in this run, moves 1.25 x the limit). The
 * engine thread is away now and then (preempted on the shared host, or a pass receiving a burst for
 * the responder); the pacer's credit (kPacerBurstBytes) makes up for absences up to 64 KiB, so at
 * 20 Gb/s the QP may fall a few percent short (measured 18.5 - 19.1). The test's thread drives the
 * responder's device as well as the requester's (ibv_poll_cq on both CQs). The sim fabric's
 * virtual-clock pacer test (cc-fabric) holds +-5 % at 1, 5 and 20 Gb/s. README, DCQCN.
 */
/** Pair connected at path MTU 4096 (demo.ini's ports carry it): what a user pacing a bulk QP uses.
 */
/** A pair whose QPs ask for the shortest local ACK timeout (code 1, 8.2 us) and no retry. */
class PairShortAckTimeout : public Pair {
  protected:
    void SetUp() override {
        ack_timeout = 1;
        retry_cnt = 0;
        Pair::SetUp();
    }
};

/**
 * A local ACK timeout below 4.2 ms (code 10) runs as 4.2 ms, as rxe never arms its retransmit
 * timer for less than a jiffy; ibv_query_qp reports the code the application set. With the peer
 * silent (its QP in the error state drops what arrives) and retry_cnt 0, the WRITE fails with
 * RETRY_EXC_ERR after one timeout: not before 4.2 ms (at 8.2 us, ib_write_bw -u 1 and -u 4 failed
 * whenever the peer's thread waited for a CPU that long).
 */
TEST_F(PairShortAckTimeout, ShortTimeoutsRunAsOneJiffyAsInRxe) {
    ibv_qp_attr at{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(sa.qp, &at, IBV_QP_TIMEOUT, &ia), 0);
    EXPECT_EQ(at.timeout, 1u);
    at = {};
    at.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(sb.qp, &at, IBV_QP_STATE), 0);
    ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 64, sa.mr->lkey};
    ibv_send_wr wr = write_wr(&sge, sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
    ibv_send_wr* bad = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(sa.cq, &wc));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_GE(ms, 4.096e-3 * 1024) << "the ACK timer ran shorter than 4.2 ms";
    std::printf("RETRY_EXC_ERR after %.2f ms\n", ms);
}

/** ibv_query_qp reports the IBV_QP_TIMEOUT last set, across SQD->SQD, failed modifies and RESET. */
TEST_F(Pair, QueryQpReportsTheTimeoutSetThroughEveryPath) {
    auto query = [&] {
        ibv_qp_attr q{};
        ibv_qp_init_attr ia{};
        EXPECT_EQ(ibv_query_qp(sa.qp, &q, IBV_QP_TIMEOUT, &ia), 0);
        return static_cast<unsigned>(q.timeout);
    };
    EXPECT_EQ(query(), 14u);
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE), 0);
    for (unsigned t : {3u, 9u, 0u, 10u, 1u, 31u, 20u, 3u}) {
        at = {};
        at.qp_state = IBV_QPS_SQD;
        at.timeout = static_cast<std::uint8_t>(t);
        ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT), 0) << t;
        EXPECT_EQ(query(), t);
    }
    for (unsigned t : {32u, 0xffu}) { // out of range: EINVAL, nothing changes
        at = {};
        at.qp_state = IBV_QPS_SQD;
        at.timeout = static_cast<std::uint8_t>(t);
        EXPECT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL) << t;
        EXPECT_EQ(query(), 3u);
    }
    // A modify that fails on another attribute after a timeout in range: nothing changes.
    at = {};
    at.qp_state = IBV_QPS_SQD;
    at.timeout = 5;
    at.retry_cnt = 8;
    EXPECT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), EINVAL);
    EXPECT_EQ(query(), 3u);
    // Without IBV_QP_TIMEOUT (attr.timeout 7 ignored): unchanged.
    at = {};
    at.qp_state = IBV_QPS_SQD;
    at.timeout = 7;
    at.retry_cnt = 5;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_RETRY_CNT), 0);
    EXPECT_EQ(query(), 3u);
    // RTS->RTS does not take IBV_QP_TIMEOUT (IBTA): EINVAL, unchanged.
    at = {};
    at.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE), 0);
    at.timeout = 12;
    EXPECT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL);
    EXPECT_EQ(query(), 3u);
    // RESET keeps the attributes (as the engine does).
    at = {};
    at.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE), 0);
    EXPECT_EQ(query(), 3u);
}

class PairPmtu4096 : public Pair {
  protected:
    void SetUp() override {
        path_mtu = IBV_MTU_4096;
        Pair::SetUp();
    }
};

TEST_F(PairPmtu4096, RateLimitPacesTheQp) {
    ibv_device_attr_ex dx{};
    ASSERT_EQ(ibv_query_device_ex(a, nullptr, &dx), 0);
    EXPECT_EQ(dx.packet_pacing_caps.qp_rate_limit_min, 1000u);
    ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 65536, sa.mr->lkey};
    // 16 packets of 4096 bytes; the first carries the RETH.
    constexpr double kWireBytes = 65536 + (14 + 20 + 8 + 12 + 16 + 4) + 15 * (14 + 20 + 8 + 12 + 4);
    const auto measure = [&](double seconds) {
        ibv_send_wr wr = write_wr(&sge, sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
        std::uint64_t posted = 0, done = 0;
        const auto t0 = std::chrono::steady_clock::now();
        const auto end = t0 + std::chrono::duration<double>(seconds);
        ibv_wc wc[16];
        while (std::chrono::steady_clock::now() < end || done < posted) {
            while (posted - done < 16 && std::chrono::steady_clock::now() < end) {
                ibv_send_wr* bad = nullptr;
                if (ibv_post_send(sa.qp, &wr, &bad) != 0) break;
                ++posted;
            }
            const int n = ibv_poll_cq(sa.cq, 16, wc);
            if (n < 0) return -1.0;
            for (int i = 0; i < n; ++i)
                if (wc[i].status != IBV_WC_SUCCESS) return -1.0;
            done += static_cast<std::uint64_t>(n);
            // The responder's device too (its CQ gets nothing from a WRITE; the call drives its
            // engine): a peer on another host has a core of its own, and here, beside a process
            // that keeps one of the two cores busy, the engine thread alone could not keep the
            // responder's side going: the window filled and 5 and 20 Gb/s limits gave about half.
            if (ibv_poll_cq(sb.cq, 16, wc) < 0) return -1.0;
        }
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return static_cast<double>(done) * kWireBytes * 8 / secs / 1e9;
    };
    const double unpaced = measure(0.3);
    ASSERT_GT(unpaced, 0) << "WRITEs failed";
    std::printf("unpaced: %.2f Gb/s on the wire\n", unpaced);
    for (const double gbps : {1.0, 5.0, 20.0}) {
        ibv_qp_attr at{};
        at.rate_limit = static_cast<std::uint32_t>(gbps * 1e6); // kb/s
        ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), 0);
        double got = measure(0.3);
        // The pacer is not the only bound: on a host busy with other tests a round can fall
        // short (13.3 of 20 in one CI run, 0.62 of it in another; 4.74 of 5 beside a perftest
        // pair). A limit that paces too slowly falls short every time; one of three rounds near
        // it shows it paces.
        const double near = gbps <= 5 ? 0.95 : 0.85;
        for (int again = 0; got > 0 && got < gbps * near && again < 2; ++again) {
            std::printf("rate limit %.0f Gb/s: %.3f Gb/s on the wire, measured again\n", gbps, got);
            got = std::max(got, measure(0.3));
        }
        std::printf("rate limit %.0f Gb/s: %.3f Gb/s on the wire\n", gbps, got);
        ASSERT_GT(got, 0) << "WRITEs failed";
        EXPECT_LE(got, gbps * 1.05) << "the QP ran faster than its limit";
        if (gbps <= 5) {
            EXPECT_GE(got, gbps * 0.95) << "the QP fell short of its limit";
        } else if (unpaced >= 1.25 * gbps) {
            EXPECT_GE(got, gbps * 0.85) << "the limit is not what paces it";
        }
    }
    ibv_qp_attr at{};
    at.rate_limit = 0; // no limit again
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), 0);
}

/**
 * IBV_QP_RATE_LIMIT outside the caps ibv_query_device_ex reports (packet_pacing_caps, kb/s) is
 * EINVAL, as mlx5 refuses it; 0 (no limit) and both ends of the range are taken. On RTS -> SQD it
 * is EINVAL and the QP stays in RTS (the kernel takes it on RTR -> RTS and RTS -> RTS only).
 */
TEST_F(Pair, RateLimitOutsideTheCapsOrTransitionsIsEinval) {
    ibv_device_attr_ex dx{};
    ASSERT_EQ(ibv_query_device_ex(a, nullptr, &dx), 0);
    const std::uint32_t lo = dx.packet_pacing_caps.qp_rate_limit_min;
    const std::uint32_t hi = dx.packet_pacing_caps.qp_rate_limit_max;
    ASSERT_GT(lo, 1u);
    ASSERT_LT(hi, 0xffffffffu);
    ibv_qp_attr at{};
    for (const std::uint32_t bad : {1u, lo - 1, hi + 1, 0xffffffffu}) {
        at.rate_limit = bad;
        EXPECT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), EINVAL) << bad << " kb/s";
    }
    for (const std::uint32_t ok : {lo, hi, 0u}) {
        at.rate_limit = ok;
        EXPECT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), 0) << ok << " kb/s";
    }
    at.qp_state = IBV_QPS_SQD;
    at.rate_limit = lo;
    EXPECT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_STATE | IBV_QP_RATE_LIMIT), EINVAL);
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(sa.qp, &at, IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(at.qp_state, IBV_QPS_RTS);
    const ibv_wc_status st = write_64(sa.mr->lkey, sb.mr->rkey); // still sending, unpaced
    EXPECT_EQ(st, IBV_WC_SUCCESS) << ibv_wc_status_str(st);
}

/** A pair whose QPs are paced at 1 Mb/s from RTR -> RTS on (rts_rate_limit_kbps). */
class PairRateLimitAtRts : public Pair {
  protected:
    void SetUp() override {
        rts_rate_limit_kbps = 1000;
        Pair::SetUp();
    }
};

/**
 * IBV_QP_RATE_LIMIT given with RTR -> RTS (where the kernel's ib_modify_qp_is_ok takes it for RC)
 * paces the QP from its first packet: a 16 KiB WRITE at 1 Mb/s needs 131 ms, and has not completed
 * 50 ms after it was posted (unpaced it completes within a millisecond); lifting the limit
 * (RTS -> RTS, 0) lets it finish. The refusal of a rate below the caps on that transition, with
 * the QP left in RTR, is checked while the fixture connects.
 */
TEST_F(PairRateLimitAtRts, RateLimitFromRtrToRtsPacesFromTheFirstPacket) {
    ASSERT_EQ(post_write(16384, sa.mr->lkey, sb.mr->rkey), 0);
    ibv_wc wc{};
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    int got = 0;
    while (got == 0 && std::chrono::steady_clock::now() < until)
        got = ibv_poll_cq(sa.cq, 1, &wc);
    EXPECT_EQ(got, 0) << "a 16 KiB WRITE at 1 Mb/s completed within 50 ms: not paced";
    ibv_qp_attr at{};
    at.rate_limit = 0;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), 0);
    if (got == 0) {
        ASSERT_TRUE(poll_one(sa.cq, &wc));
    }
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
}

/** Threads of this process named as droce's engine threads (EngineThread::kThreadName). */
int engine_threads() {
    int n = 0;
    DIR* d = opendir("/proc/self/task");
    if (!d) return -1;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
        std::FILE* f = std::fopen(path.c_str(), "r");
        if (!f) continue;
        char comm[32] = {};
        if (std::fgets(comm, sizeof comm, f) && std::strncmp(comm, "droce-engine", 12) == 0) ++n;
        std::fclose(f);
    }
    closedir(d);
    return n;
}

/**
 * Open devices with no QP that can receive cost their engine thread almost nothing: demo.ini's two
 * devices share one engine thread (Runtime's shared loop), which used to yield for ever (a whole
 * core, 503 CPU ticks in 5 s for an idle ibv_rc_pingpong server); it now naps, 1 ms at a time
 * while no QP is in RTR or later (7 ticks in 5 s).
 */
TEST_F(Verbs, IdleEngineThreadSleeps) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // past the spin and yield phases
    if (engine_threads() == 0) GTEST_SKIP() << "DROCE_PROGRESS=app: no engine thread";
    const double cpu0 = droce::test::thread_cpu_seconds("droce-engine");
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = droce::test::thread_cpu_seconds("droce-engine") - cpu0;
    std::printf("engine threads, idle: %.3f CPU s in %.3f s\n", cpu, wall);
    ASSERT_GE(cpu0, 0);
    EXPECT_LT(cpu, 0.25 * wall) << "idle engine threads kept the CPU busy";
}

TEST_F(Pair, CqPollLoopMovesDataInEveryProgressMode) {
    // DROCE_PROGRESS=app: no engine thread at all, the poll loop below is all that runs the
    // engines (both devices: demo.ini joins them in this process). Otherwise engine threads run.
    const char* mode = std::getenv("DROCE_PROGRESS");
    const bool app = mode && std::strcmp(mode, "app") == 0;
    if (app) {
        EXPECT_EQ(engine_threads(), 0);
    } else {
        EXPECT_GE(engine_threads(), 1);
    }
    for (int round = 0; round < 20; ++round) {
        for (std::size_t i = 0; i < 4096; ++i)
            sa.buf[i] = static_cast<std::uint8_t>(i * 3 + round);
        ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 4096, sa.mr->lkey};
        ibv_send_wr wr = write_wr(&sge, sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data()));
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
        ibv_wc wc{};
        ASSERT_TRUE(poll_one(sa.cq, &wc)) << "round " << round;
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        ASSERT_EQ(std::memcmp(sa.buf.data(), sb.buf.data(), 4096), 0) << "round " << round;
    }
}

/**
 * A completion event still unread when its CQ is destroyed is dropped, as the kernel drops it: it
 * never names the freed CQ, nor a new CQ made at the same address afterwards (the channel gives
 * nothing: EAGAIN on a non-blocking channel).
 */
TEST_F(Pair, UnreadEventsOfADestroyedCqAreDropped) {
    ASSERT_NO_FATAL_FAILURE(armed_send_to_b(0));
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(sa.cq, &wc)); // delivered: b's event is raised (or about to be)
    pollfd pfd{sb.ch->fd, POLLIN, 0};
    for (int i = 0; i < 500 && poll(&pfd, 1, 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(poll(&pfd, 1, 0), 1) << "no completion event came";
    ASSERT_EQ(ibv_destroy_qp(sb.qp), 0);
    sb.qp = nullptr;
    const void* dead = sb.cq;
    ASSERT_EQ(ibv_destroy_cq(sb.cq), 0); // its event unread
    sb.cq = nullptr;
    ibv_cq* again = ibv_create_cq(b, 64, nullptr, sb.ch, 0); // often where the old one was
    ASSERT_NE(again, nullptr);
    const int flags = fcntl(sb.ch->fd, F_GETFL);
    ASSERT_EQ(fcntl(sb.ch->fd, F_SETFL, flags | O_NONBLOCK), 0);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    errno = 0;
    EXPECT_EQ(ibv_get_cq_event(sb.ch, &ev_cq, &ev_ctx), -1)
        << "an event of the destroyed CQ " << dead << " came back as " << ev_cq
        << (ev_cq == again ? " (the new CQ at its address)" : "");
    EXPECT_EQ(errno, EAGAIN);
    EXPECT_EQ(ibv_destroy_cq(again), 0);
}

TEST_F(Pair, GetCqEventWaitsForACompletion) {
    // ibv_get_cq_event called at once, blocking, with nothing pending yet: the wait itself must
    // see the SEND through (with DROCE_PROGRESS=app it is the only thing driving the engines).
    for (int round = 0; round < 5; ++round) {
        const std::uint64_t recv_id = 100 + static_cast<std::uint64_t>(round);
        ASSERT_NO_FATAL_FAILURE(armed_send_to_b(recv_id));
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        ASSERT_EQ(ibv_get_cq_event(sb.ch, &ev_cq, &ev_ctx), 0);
        EXPECT_EQ(ev_cq, sb.cq);
        ibv_ack_cq_events(ev_cq, 1);
        ibv_wc wc{};
        ASSERT_TRUE(poll_one(sb.cq, &wc));
        EXPECT_EQ(wc.wr_id, recv_id);
        EXPECT_EQ(wc.byte_len, sizeof "event");
        ASSERT_TRUE(poll_one(sa.cq, &wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
}

TEST_F(Pair, ManyThreadsPostOnOneQp) {
    // verbs lets several threads post on one QP: the library serialises them.
    constexpr int kThreads = 4, kPer = 192; // 12 signaled per thread
    std::vector<std::thread> ts;
    std::atomic<int> posted{0};
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < kPer; ++i) {
                ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()) + t * 64, 64, sa.mr->lkey};
                ibv_send_wr wr = write_wr(&sge, sb.mr->rkey,
                                          reinterpret_cast<uintptr_t>(sb.buf.data()) + t * 64);
                wr.send_flags = (i % 16 == 15) ? IBV_SEND_SIGNALED : 0;
                ibv_send_wr* bad = nullptr;
                while (ibv_post_send(sa.qp, &wr, &bad) == ENOMEM)
                    std::this_thread::yield();
                posted.fetch_add(1);
            }
        });
    int signaled = 0;
    ibv_wc wc[16];
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (signaled < kThreads * kPer / 16 && std::chrono::steady_clock::now() < end) {
        int n = ibv_poll_cq(sa.cq, 16, wc);
        for (int i = 0; i < n; ++i)
            EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
        signaled += n;
    }
    for (auto& t : ts)
        t.join();
    EXPECT_EQ(posted.load(), kThreads * kPer);
    EXPECT_EQ(signaled, kThreads * kPer / 16);
}

} // namespace

// ---- Verbs edge cases real programs use (issue 16), each as rxe or a ConnectX behaves.

/** Reads one async event of @p c within @p ms milliseconds. @return false when none came. */
bool next_async_event(ibv_context* c, ibv_async_event* ev, int ms) {
    pollfd pfd{c->async_fd, POLLIN, 0};
    if (poll(&pfd, 1, ms) != 1) return false;
    return ibv_get_async_event(c, ev) == 0;
}

/** Reads async events of @p c for up to @p ms until one of @p type for @p element arrives (a QP or
 *  a CQ; others, such as those of earlier tests' QPs, are acknowledged and passed over). */
bool wait_async_event(ibv_context* c, ibv_event_type type, const void* element,
                      ibv_async_event* out, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
        ibv_async_event ev{};
        if (!next_async_event(c, &ev, 50)) continue;
        ibv_ack_async_event(&ev);
        const void* el = type == IBV_EVENT_CQ_ERR ? static_cast<const void*>(ev.element.cq)
                                                  : static_cast<const void*>(ev.element.qp);
        if (ev.event_type == type && el == element) {
            *out = ev;
            return true;
        }
    }
    return false;
}

/**
 * Create-time capabilities programs ask for: a QP with no receive queue (0 WRs, 0 SGEs: it only
 * sends) or no send queue, and max_inline_data 0. Each is created (droce gives a queue of one WR
 * where none was asked), the real capabilities are written back (at least what was asked), and
 * ibv_query_qp reports the same.
 */
TEST_F(Verbs, QpCapabilityCornersAreAccepted) {
    ibv_pd* pd = ibv_alloc_pd(a);
    ibv_cq* cq = ibv_create_cq(a, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    struct Case {
        const char* what;
        std::uint32_t send_wr, send_sge, recv_wr, recv_sge, inline_data;
    };
    for (const Case& k :
         {Case{"no receive queue", 8, 1, 0, 0, 0}, Case{"no send queue", 0, 0, 8, 1, 0},
          Case{"max_inline_data 0, odd sizes", 5, 1, 3, 1, 0}}) {
        SCOPED_TRACE(k.what);
        ibv_qp_init_attr ia{};
        ia.send_cq = cq;
        ia.recv_cq = cq;
        ia.cap.max_send_wr = k.send_wr;
        ia.cap.max_send_sge = k.send_sge;
        ia.cap.max_recv_wr = k.recv_wr;
        ia.cap.max_recv_sge = k.recv_sge;
        ia.cap.max_inline_data = k.inline_data;
        ia.qp_type = IBV_QPT_RC;
        ibv_qp* qp = ibv_create_qp(pd, &ia);
        ASSERT_NE(qp, nullptr) << std::strerror(errno);
        EXPECT_GE(ia.cap.max_send_wr, k.send_wr);
        EXPECT_GE(ia.cap.max_send_sge, k.send_sge);
        EXPECT_GE(ia.cap.max_recv_wr, k.recv_wr);
        EXPECT_GE(ia.cap.max_recv_sge, k.recv_sge);
        EXPECT_GE(ia.cap.max_inline_data, k.inline_data);
        ibv_qp_attr at{};
        ibv_qp_init_attr qa{};
        ASSERT_EQ(ibv_query_qp(qp, &at, IBV_QP_CAP, &qa), 0);
        EXPECT_EQ(qa.cap.max_send_wr, ia.cap.max_send_wr);
        EXPECT_EQ(qa.cap.max_recv_wr, ia.cap.max_recv_wr);
        EXPECT_EQ(qa.cap.max_send_sge, ia.cap.max_send_sge);
        EXPECT_EQ(qa.cap.max_recv_sge, ia.cap.max_recv_sge);
        EXPECT_EQ(qa.cap.max_inline_data, ia.cap.max_inline_data);
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

/** ibv_query_qp reports the live PSNs: after a 4-packet WRITE the requester's sq_psn and the
 *  responder's rq_psn have moved past it (rxe and ConnectX do; droce reported the initial ones). */
TEST_F(Pair, QueryQpReportsLivePsns) {
    ASSERT_EQ(post_write(4096, sa.mr->lkey, sb.mr->rkey), 0);
    ibv_wc wc{};
    ASSERT_TRUE(poll_one(sa.cq, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ibv_qp_attr at{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(sa.qp, &at, IBV_QP_SQ_PSN | IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(at.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(at.sq_psn, 104u) << "4 packets at path MTU 1024 from PSN 100";
    ASSERT_EQ(ibv_query_qp(sb.qp, &at, IBV_QP_RQ_PSN, &ia), 0);
    EXPECT_EQ(at.rq_psn, 104u);
}

/**
 * Posting beyond the send queue's depth returns ENOMEM with bad_wr on the first WR that did not
 * fit, and the queue is intact: the WRs that fit all complete, in order, with their data. The QP
 * is paced at 1 Mb/s while the queue is filled so that nothing completes meanwhile.
 */
TEST_F(Pair, PostingBeyondTheQueueDepthReturnsEnomem) {
    ibv_qp_attr at{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(sa.qp, &at, IBV_QP_CAP, &ia), 0);
    const std::uint32_t depth = ia.cap.max_send_wr;
    ASSERT_GT(depth, 1u);
    at = {};
    at.rate_limit = 1000; // kb/s: a 16 KiB WRITE takes 0.13 s
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), 0);
    for (std::size_t i = 0; i < sa.buf.size(); ++i)
        sa.buf[i] = static_cast<std::uint8_t>(i * 7 + 1);
    std::vector<ibv_sge> sges(depth + 4);
    std::vector<ibv_send_wr> wrs(depth + 4);
    std::uint32_t posted = 0;
    int rc = 0;
    ibv_send_wr* bad = nullptr;
    for (std::uint32_t i = 0; i < depth + 4; ++i) {
        // WR 0: 16 KiB; then 64 bytes each, WR i to offset 16384 + 64 (i - 1).
        const std::uint32_t off = i == 0 ? 0 : 16384 + 64 * (i - 1);
        const std::uint32_t len = i == 0 ? 16384 : 64;
        sges[i] = {reinterpret_cast<uintptr_t>(sa.buf.data() + off), len, sa.mr->lkey};
        wrs[i] = write_wr(&sges[i], sb.mr->rkey, reinterpret_cast<uintptr_t>(sb.buf.data() + off));
        wrs[i].wr_id = i;
        rc = ibv_post_send(sa.qp, &wrs[i], &bad);
        if (rc != 0) break;
        ++posted;
    }
    EXPECT_EQ(rc, ENOMEM);
    EXPECT_EQ(bad, &wrs[posted]);
    EXPECT_EQ(posted, depth) << "the first WR is still on the wire: the queue holds depth WRs";
    at = {};
    at.rate_limit = 0;
    ASSERT_EQ(ibv_modify_qp(sa.qp, &at, IBV_QP_RATE_LIMIT), 0);
    for (std::uint32_t i = 0; i < posted; ++i) {
        ibv_wc wc{};
        ASSERT_TRUE(poll_one(sa.cq, &wc)) << "completion " << i;
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, i) << "completions in order";
    }
    EXPECT_EQ(std::memcmp(sa.buf.data(), sb.buf.data(), 16384 + 64 * (posted - 1)), 0);
}

/**
 * A CQ overrun (more completions than its depth, none polled) raises IBV_EVENT_CQ_ERR on the
 * context's async fd, naming the CQ; a QP that fails by itself (the responder of a WRITE with a
 * bad rkey: IBTA class C, the QP goes to ERR) raises IBV_EVENT_QP_FATAL naming the QP.
 */
TEST_F(Pair, CqOverrunAndFatalQpRaiseAsyncEvents) {
    // A CQ of (at least) 1 entry for a third QP pair's sends, overrun.
    ibv_cq* small = ibv_create_cq(a, 1, nullptr, nullptr, 0);
    ASSERT_NE(small, nullptr);
    Side x, y;
    ASSERT_NO_FATAL_FAILURE(overrun_cq(small, x, y));
    // Poll the small CQ now and then (it drives the engine where no engine thread runs, and
    // reports the overrun at the latest) until the event comes.
    ibv_async_event ev{};
    bool cq_err = false;
    for (int i = 0; i < 100 && !cq_err; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ibv_wc wc[1];
        (void)ibv_poll_cq(small, 1, wc);
        cq_err = wait_async_event(a, IBV_EVENT_CQ_ERR, small, &ev, 1);
    }
    ASSERT_TRUE(cq_err) << "no IBV_EVENT_CQ_ERR for the small CQ";

    // A WRITE with a bad rkey from sa to sb: sb's responder NAKs it and goes to ERR by itself.
    ibv_sge sge2{reinterpret_cast<uintptr_t>(sa.buf.data()), 64, sa.mr->lkey};
    ibv_send_wr wr =
        write_wr(&sge2, sb.mr->rkey ^ 0x5a5a00u, reinterpret_cast<uintptr_t>(sb.buf.data()));
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    ibv_wc w{};
    ASSERT_TRUE(poll_one(sa.cq, &w));
    EXPECT_EQ(w.status, IBV_WC_REM_ACCESS_ERR);
    ASSERT_TRUE(wait_async_event(b, IBV_EVENT_QP_FATAL, sb.qp, &ev, 2000))
        << "no IBV_EVENT_QP_FATAL for the responder";
    // sa went to ERR by itself too (the NAK's completion reported it): its event on a.
    ASSERT_TRUE(wait_async_event(a, IBV_EVENT_QP_FATAL, sa.qp, &ev, 2000))
        << "no IBV_EVENT_QP_FATAL for the requester";

    EXPECT_EQ(ibv_destroy_qp(x.qp), 0);
    EXPECT_EQ(ibv_destroy_qp(y.qp), 0);
    EXPECT_EQ(ibv_destroy_cq(small), 0);
}

/** Reads every async event pending on @p c (the fd made non-blocking meanwhile) into @p out. */
void drain_async_events(ibv_context* c, std::vector<ibv_async_event>* out) {
    const int flags = fcntl(c->async_fd, F_GETFL);
    ASSERT_EQ(fcntl(c->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    for (ibv_async_event e{}; ibv_get_async_event(c, &e) == 0;) {
        ibv_ack_async_event(&e);
        out->push_back(e);
    }
    EXPECT_EQ(errno, EAGAIN);
    ASSERT_EQ(fcntl(c->async_fd, F_SETFL, flags), 0);
}

/**
 * An async event still queued when its object is destroyed never names the freed object: a CQ of
 * depth 1 overruns (CQ_ERR) and a QP pair fails by itself (a WRITE with a bad rkey: QP_FATAL on
 * both sides), nobody reads the events, the QPs and the CQ are destroyed; what the async fds give
 * afterwards names none of them.
 */
TEST_F(Pair, EventsOfDestroyedObjectsAreDropped) {
    std::vector<ibv_async_event> before;
    drain_async_events(a, &before); // what earlier tests left
    drain_async_events(b, &before);
    // A third QP pair whose requester's send CQ holds 1 completion; more than that, unpolled.
    ibv_cq* small = ibv_create_cq(a, 1, nullptr, nullptr, 0);
    ASSERT_NE(small, nullptr);
    Side x, y;
    ASSERT_NO_FATAL_FAILURE(overrun_cq(small, x, y));
    ibv_sge sge{reinterpret_cast<uintptr_t>(sa.buf.data()), 64, sa.mr->lkey};
    for (int i = 0; i < 20; ++i) { // the overrun happens and is reported (not read)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ibv_wc wc[1];
        (void)ibv_poll_cq(small, 1, wc);
    }
    // sa -> sb with a bad rkey: both fail by themselves.
    ibv_send_wr wr =
        write_wr(&sge, sb.mr->rkey ^ 0x5a5a00u, reinterpret_cast<uintptr_t>(sb.buf.data()));
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(sa.qp, &wr, &bad), 0);
    ibv_wc w{};
    ASSERT_TRUE(poll_one(sa.cq, &w)); // both QPs are in ERR now and their events are queued
    EXPECT_EQ(w.status, IBV_WC_REM_ACCESS_ERR);
    const std::vector<const void*> gone = {sa.qp, sb.qp, x.qp, y.qp, small};
    for (ibv_qp** q : {&sa.qp, &sb.qp, &x.qp, &y.qp}) {
        EXPECT_EQ(ibv_destroy_qp(*q), 0);
        *q = nullptr;
    }
    EXPECT_EQ(ibv_destroy_cq(small), 0);
    std::vector<ibv_async_event> after;
    drain_async_events(a, &after);
    drain_async_events(b, &after);
    for (const ibv_async_event& e : after) {
        const void* el = e.event_type == IBV_EVENT_CQ_ERR ? static_cast<const void*>(e.element.cq)
                                                          : static_cast<const void*>(e.element.qp);
        EXPECT_EQ(std::count(gone.begin(), gone.end(), el), 0)
            << "event " << e.event_type << " names a destroyed object";
        if (e.event_type == IBV_EVENT_QP_FATAL || e.event_type == IBV_EVENT_CQ_ERR) {
            EXPECT_NE(el, nullptr);
        }
    }
}
