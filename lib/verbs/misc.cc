/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The rest of libibverbs' exported surface: the *_str helpers, rate conversions, fork and sysfs
 * entry points, the public verbs droce does not support (EOPNOTSUPP, never a crash), and the
 * IBVERBS_PRIVATE_34 interface that rdma-core's providers (libmlx5, libefa) and librdmacm link
 * against. Providers register at load time (verbs_register_driver_34); droce ignores them: its
 * devices come from the droce config, so those entry points are inert stubs.
 *
 * Every name here is written for droce; the strings describe the values in droce's own words.
 */
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/say_once.h"
#include "provider.h"

using namespace droce::verbs;

// ---------------------------------------------------------------- strings

/** A short English description of @p status ("unknown" for values outside the enum). */
extern "C" const char* ibv_wc_status_str(ibv_wc_status status) {
    switch (status) {
    case IBV_WC_SUCCESS:
        return "success";
    case IBV_WC_LOC_LEN_ERR:
        return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
        return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR:
        return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR:
        return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
        return "work request flushed";
    case IBV_WC_MW_BIND_ERR:
        return "memory window bind error";
    case IBV_WC_BAD_RESP_ERR:
        return "bad response";
    case IBV_WC_LOC_ACCESS_ERR:
        return "local access error";
    case IBV_WC_REM_INV_REQ_ERR:
        return "remote invalid request";
    case IBV_WC_REM_ACCESS_ERR:
        return "remote access error";
    case IBV_WC_REM_OP_ERR:
        return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
        return "transport retries exhausted";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "RNR retries exhausted";
    case IBV_WC_LOC_RDD_VIOL_ERR:
        return "local RDD violation";
    case IBV_WC_REM_INV_RD_REQ_ERR:
        return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR:
        return "remote aborted";
    case IBV_WC_INV_EECN_ERR:
        return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR:
        return "invalid EE context state";
    case IBV_WC_FATAL_ERR:
        return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR:
        return "response timeout";
    case IBV_WC_GENERAL_ERR:
        return "general error";
    case IBV_WC_TM_ERR:
        return "tag matching error";
    case IBV_WC_TM_RNDV_INCOMPLETE:
        return "tag matching rendezvous incomplete";
    }
    return "unknown";
}

extern "C" const char* ibv_node_type_str(ibv_node_type node_type) {
    switch (node_type) {
    case IBV_NODE_CA:
        return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
        return "InfiniBand switch";
    case IBV_NODE_ROUTER:
        return "InfiniBand router";
    case IBV_NODE_RNIC:
        return "iWARP NIC";
    case IBV_NODE_USNIC:
        return "usNIC";
    case IBV_NODE_USNIC_UDP:
        return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
        return "unspecified";
    case IBV_NODE_UNKNOWN:
        break;
    }
    return "unknown";
}

extern "C" const char* ibv_port_state_str(ibv_port_state port_state) {
    switch (port_state) {
    case IBV_PORT_NOP:
        return "PORT_NOP";
    case IBV_PORT_DOWN:
        return "PORT_DOWN";
    case IBV_PORT_INIT:
        return "PORT_INIT";
    case IBV_PORT_ARMED:
        return "PORT_ARMED";
    case IBV_PORT_ACTIVE:
        return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
        return "PORT_ACTIVE_DEFER";
    }
    return "unknown";
}

extern "C" const char* ibv_event_type_str(ibv_event_type event) {
    switch (event) {
    case IBV_EVENT_CQ_ERR:
        return "CQ error";
    case IBV_EVENT_QP_FATAL:
        return "QP fatal error";
    case IBV_EVENT_QP_REQ_ERR:
        return "QP invalid request error";
    case IBV_EVENT_QP_ACCESS_ERR:
        return "QP access violation";
    case IBV_EVENT_COMM_EST:
        return "communication established";
    case IBV_EVENT_SQ_DRAINED:
        return "send queue drained";
    case IBV_EVENT_PATH_MIG:
        return "path migrated";
    case IBV_EVENT_PATH_MIG_ERR:
        return "path migration failed";
    case IBV_EVENT_DEVICE_FATAL:
        return "device fatal error";
    case IBV_EVENT_PORT_ACTIVE:
        return "port active";
    case IBV_EVENT_PORT_ERR:
        return "port error";
    case IBV_EVENT_LID_CHANGE:
        return "LID changed";
    case IBV_EVENT_PKEY_CHANGE:
        return "P_Key table changed";
    case IBV_EVENT_SM_CHANGE:
        return "subnet manager changed";
    case IBV_EVENT_SRQ_ERR:
        return "SRQ error";
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return "SRQ limit reached";
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return "last WQE reached";
    case IBV_EVENT_CLIENT_REREGISTER:
        return "client reregistration requested";
    case IBV_EVENT_GID_CHANGE:
        return "GID table changed";
    case IBV_EVENT_WQ_FATAL:
        return "WQ fatal error";
    }
    return "unknown";
}

// ---------------------------------------------------------------- rates
namespace {
struct RateRow {
    ibv_rate rate;
    int mult; ///< multiple of 2.5 Gb/s (0 where the rate is not one)
    int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, 5, 14062},
    {IBV_RATE_56_GBPS, 22, 56250},      {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},    {IBV_RATE_25_GBPS, 10, 25781},
    {IBV_RATE_100_GBPS, 40, 103125},    {IBV_RATE_200_GBPS, 80, 206250},
    {IBV_RATE_300_GBPS, 120, 309375},   {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};
} // namespace

/** @return @p rate as a multiple of 2.5 Gb/s, or -1 (IBV_RATE_MAX and unknown values). */
extern "C" int ibv_rate_to_mult(ibv_rate rate) {
    for (const auto& r : kRates)
        if (r.rate == rate) return r.mult;
    return -1;
}
/** @return the rate whose multiple of 2.5 Gb/s is @p mult, or IBV_RATE_MAX. */
extern "C" ibv_rate mult_to_ibv_rate(int mult) {
    // The first six multiples name the classic IB rates; search those before the derived ones.
    for (const auto& r : kRates)
        if (r.mult == mult) return r.rate;
    return IBV_RATE_MAX;
}
/** @return the signalling rate in Mb/s (lane rate × width), or -1. */
extern "C" int ibv_rate_to_mbps(ibv_rate rate) {
    for (const auto& r : kRates)
        if (r.rate == rate) return r.mbps;
    return -1;
}
/** @return the rate of exactly @p mbps, or IBV_RATE_MAX. */
extern "C" ibv_rate mbps_to_ibv_rate(int mbps) {
    for (const auto& r : kRates)
        if (r.mbps == mbps) return r.rate;
    return IBV_RATE_MAX;
}

// ---------------------------------------------------------------- fork, sysfs

/** droce pins nothing in a kernel: fork needs no preparation. @return 0. */
extern "C" int ibv_fork_init(void) {
    return 0;
}
extern "C" ibv_fork_status ibv_is_fork_initialized(void) {
    return IBV_FORK_UNNEEDED;
}
extern "C" int ibv_dontfork_range(void* base, size_t size) {
    (void)base;
    (void)size;
    return 0;
}
extern "C" int ibv_dofork_range(void* base, size_t size) {
    (void)base;
    (void)size;
    return 0;
}
/** No sysfs behind droce devices: @return -1 with errno ENOSYS. */
extern "C" int ibv_get_sysfs_path(void) {
    errno = ENOSYS;
    return -1;
}
/** No sysfs behind droce devices: @return -1 with errno ENOENT (callers then omit the field). */
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
    (void)dir;
    (void)file;
    if (buf && size) buf[0] = '\0';
    errno = ENOENT;
    return -1;
}

// ---------------------------------------------------------------- unsupported public verbs
// Listed in the README. Creators return NULL with errno EOPNOTSUPP, the others EOPNOTSUPP; each
// says so once on stderr (say_unsupported).

void droce::verbs::say_unsupported(std::atomic<bool>& said, const char* what) noexcept {
    (void)say_once(said, "%s is not supported (README: Unsupported)", what);
}

extern "C" ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    DROCE_UNSUPPORTED("ibv_create_srq");
    (void)pd;
    (void)attr;
    return fail<ibv_srq>(EOPNOTSUPP);
}
extern "C" int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
    DROCE_UNSUPPORTED("ibv_modify_srq");
    (void)srq;
    (void)attr;
    (void)mask;
    return EOPNOTSUPP;
}
extern "C" int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    DROCE_UNSUPPORTED("ibv_query_srq");
    (void)srq;
    (void)attr;
    return EOPNOTSUPP;
}
extern "C" int ibv_destroy_srq(ibv_srq* srq) {
    DROCE_UNSUPPORTED("ibv_destroy_srq");
    (void)srq;
    return EOPNOTSUPP;
}
extern "C" int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
    DROCE_UNSUPPORTED("ibv_attach_mcast");
    (void)qp;
    (void)gid;
    (void)lid;
    return EOPNOTSUPP;
}
extern "C" int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
    DROCE_UNSUPPORTED("ibv_detach_mcast");
    (void)qp;
    (void)gid;
    (void)lid;
    return EOPNOTSUPP;
}
extern "C" ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                     int fd, int access) {
    DROCE_UNSUPPORTED("ibv_reg_dmabuf_mr");
    (void)pd;
    (void)offset;
    (void)length;
    (void)iova;
    (void)fd;
    (void)access;
    return fail<ibv_mr>(EOPNOTSUPP);
}
/** UD only (address handles from a received GRH): not supported. @return EOPNOTSUPP. */
extern "C" int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                   ibv_ah_attr* ah_attr) {
    DROCE_UNSUPPORTED("ibv_init_ah_from_wc");
    (void)context;
    (void)port_num;
    (void)wc;
    (void)grh;
    (void)ah_attr;
    return EOPNOTSUPP;
}
extern "C" ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
    DROCE_UNSUPPORTED("ibv_create_ah_from_wc");
    (void)pd;
    (void)wc;
    (void)grh;
    (void)port_num;
    return fail<ibv_ah>(EOPNOTSUPP);
}
extern "C" int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr,
                                           uint8_t eth_mac[6], uint16_t* vid) {
    DROCE_UNSUPPORTED("ibv_resolve_eth_l2_from_gid");
    (void)context;
    (void)attr;
    (void)eth_mac;
    (void)vid;
    return EOPNOTSUPP;
}
/** droce does not promise that a message's data lands in order before its completion. @return 0. */
extern "C" int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
    (void)qp;
    (void)op;
    (void)flags;
    return 0;
}
extern "C" int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
    DROCE_UNSUPPORTED("ibv_set_ece");
    (void)qp;
    (void)ece;
    return EOPNOTSUPP;
}
extern "C" int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
    DROCE_UNSUPPORTED("ibv_query_ece");
    (void)qp;
    (void)ece;
    return EOPNOTSUPP;
}
// Sharing objects between processes through the kernel's uverbs fd: no kernel, not supported.
extern "C" ibv_context* ibv_import_device(int cmd_fd) {
    DROCE_UNSUPPORTED("ibv_import_device");
    (void)cmd_fd;
    return fail<ibv_context>(EOPNOTSUPP);
}
extern "C" ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
    DROCE_UNSUPPORTED("ibv_import_pd");
    (void)context;
    (void)pd_handle;
    return fail<ibv_pd>(EOPNOTSUPP);
}
extern "C" void ibv_unimport_pd(ibv_pd* pd) {
    (void)pd;
}
extern "C" ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
    DROCE_UNSUPPORTED("ibv_import_mr");
    (void)pd;
    (void)mr_handle;
    return fail<ibv_mr>(EOPNOTSUPP);
}
extern "C" void ibv_unimport_mr(ibv_mr* mr) {
    (void)mr;
}
extern "C" ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
    DROCE_UNSUPPORTED("ibv_import_dm");
    (void)context;
    (void)dm_handle;
    return fail<ibv_dm>(EOPNOTSUPP);
}
extern "C" void ibv_unimport_dm(ibv_dm* dm) {
    (void)dm;
}

// ---------------------------------------------------------------- kernel ABI copies
// (IBVERBS_1.0/1.1) Conversions from the kernel's uverbs structures, used by providers and
// librdmacm on kernel devices; droce has no kernel side. Present so that bind-now loaders resolve
// them; they do nothing.
extern "C" void ibv_copy_qp_attr_from_kern(void* dst, const void* src) {
    (void)dst;
    (void)src;
}
extern "C" void ibv_copy_ah_attr_from_kern(void* dst, const void* src) {
    (void)dst;
    (void)src;
}
extern "C" void ibv_copy_path_rec_from_kern(void* dst, const void* src) {
    (void)dst;
    (void)src;
}
extern "C" void ibv_copy_path_rec_to_kern(void* dst, const void* src) {
    (void)dst;
    (void)src;
}

// ---------------------------------------------------------------- IBVERBS_PRIVATE_34
// The provider-facing interface. Nothing in droce calls a provider, so these run only if a
// provider's own code reaches them (it cannot: no droce device is theirs). Integer entry points
// return EOPNOTSUPP, pointer ones NULL with errno EOPNOTSUPP, void ones nothing.

/** rdma-core's "allow destroy after disassociate" switch; read by providers, meaningless here. */
extern "C" {
bool verbs_allow_disassociate_destroy = false;
}

extern "C" void verbs_register_driver_34(const void* ops) {
    (void)ops;
}
extern "C" void __verbs_log(const void* ctx, int level, const char* fmt, ...) {
    (void)ctx;
    (void)level;
    (void)fmt;
}
extern "C" void* _verbs_init_and_alloc_context(void) {
    errno = EOPNOTSUPP;
    return nullptr;
}
extern "C" void* verbs_open_device(void) {
    errno = EOPNOTSUPP;
    return nullptr;
}
extern "C" int verbs_init_cq(void) {
    return EOPNOTSUPP;
}
extern "C" void verbs_set_ops(void) {}
extern "C" void verbs_uninit_context(void) {}
extern "C" int execute_ioctl(void) {
    return EOPNOTSUPP;
}
extern "C" int __ioctl_final_num_attrs(void) {
    return EOPNOTSUPP;
}
extern "C" int ibv_read_ibdev_sysfs_file(void) {
    errno = ENOENT;
    return -1;
}

#define DROCE_CMD_STUB(name)                                                                       \
    extern "C" int name(void) {                                                                    \
        return EOPNOTSUPP;                                                                         \
    }
DROCE_CMD_STUB(ibv_cmd_advise_mr)
DROCE_CMD_STUB(ibv_cmd_alloc_dm)
DROCE_CMD_STUB(ibv_cmd_alloc_mw)
DROCE_CMD_STUB(ibv_cmd_alloc_pd)
DROCE_CMD_STUB(ibv_cmd_attach_mcast)
DROCE_CMD_STUB(ibv_cmd_close_xrcd)
DROCE_CMD_STUB(ibv_cmd_create_ah)
DROCE_CMD_STUB(ibv_cmd_create_counters)
DROCE_CMD_STUB(ibv_cmd_create_cq)
DROCE_CMD_STUB(ibv_cmd_create_cq_ex)
DROCE_CMD_STUB(ibv_cmd_create_flow)
DROCE_CMD_STUB(ibv_cmd_create_flow_action_esp)
DROCE_CMD_STUB(ibv_cmd_create_qp)
DROCE_CMD_STUB(ibv_cmd_create_qp_ex)
DROCE_CMD_STUB(ibv_cmd_create_qp_ex2)
DROCE_CMD_STUB(ibv_cmd_create_rwq_ind_table)
DROCE_CMD_STUB(ibv_cmd_create_srq)
DROCE_CMD_STUB(ibv_cmd_create_srq_ex)
DROCE_CMD_STUB(ibv_cmd_create_wq)
DROCE_CMD_STUB(ibv_cmd_dealloc_mw)
DROCE_CMD_STUB(ibv_cmd_dealloc_pd)
DROCE_CMD_STUB(ibv_cmd_dereg_mr)
DROCE_CMD_STUB(ibv_cmd_destroy_ah)
DROCE_CMD_STUB(ibv_cmd_destroy_counters)
DROCE_CMD_STUB(ibv_cmd_destroy_cq)
DROCE_CMD_STUB(ibv_cmd_destroy_flow)
DROCE_CMD_STUB(ibv_cmd_destroy_flow_action)
DROCE_CMD_STUB(ibv_cmd_destroy_qp)
DROCE_CMD_STUB(ibv_cmd_destroy_rwq_ind_table)
DROCE_CMD_STUB(ibv_cmd_destroy_srq)
DROCE_CMD_STUB(ibv_cmd_destroy_wq)
DROCE_CMD_STUB(ibv_cmd_detach_mcast)
DROCE_CMD_STUB(ibv_cmd_free_dm)
DROCE_CMD_STUB(ibv_cmd_get_context)
DROCE_CMD_STUB(ibv_cmd_modify_cq)
DROCE_CMD_STUB(ibv_cmd_modify_flow_action_esp)
DROCE_CMD_STUB(ibv_cmd_modify_qp)
DROCE_CMD_STUB(ibv_cmd_modify_qp_ex)
DROCE_CMD_STUB(ibv_cmd_modify_srq)
DROCE_CMD_STUB(ibv_cmd_modify_wq)
DROCE_CMD_STUB(ibv_cmd_open_qp)
DROCE_CMD_STUB(ibv_cmd_open_xrcd)
DROCE_CMD_STUB(ibv_cmd_poll_cq)
DROCE_CMD_STUB(ibv_cmd_post_recv)
DROCE_CMD_STUB(ibv_cmd_post_send)
DROCE_CMD_STUB(ibv_cmd_post_srq_recv)
DROCE_CMD_STUB(ibv_cmd_query_context)
DROCE_CMD_STUB(ibv_cmd_query_device_any)
DROCE_CMD_STUB(ibv_cmd_query_mr)
DROCE_CMD_STUB(ibv_cmd_query_port)
DROCE_CMD_STUB(ibv_cmd_query_qp)
DROCE_CMD_STUB(ibv_cmd_query_srq)
DROCE_CMD_STUB(ibv_cmd_read_counters)
DROCE_CMD_STUB(ibv_cmd_reg_dm_mr)
DROCE_CMD_STUB(ibv_cmd_reg_dmabuf_mr)
DROCE_CMD_STUB(ibv_cmd_reg_mr)
DROCE_CMD_STUB(ibv_cmd_req_notify_cq)
DROCE_CMD_STUB(ibv_cmd_rereg_mr)
DROCE_CMD_STUB(ibv_cmd_resize_cq)
#undef DROCE_CMD_STUB
