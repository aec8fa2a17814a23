/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Work requests, completions and QP attributes of droce's native API. Numeric values of every enum
 * equal their libibverbs counterparts (ibv_wr_opcode, ibv_wc_status, ibv_wc_opcode, ibv_qp_state,
 * ibv_qp_attr_mask, ibv_access_flags, ibv_send_flags), so the verbs layer converts by cast.
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "mem/access.h"
#include "rc/params.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace droce::rc {

using wire::Psn;

// clang-format off
#define DROCE_WR_OPCODES(X) \
    X(rdma_write, 0) X(rdma_write_with_imm, 1) X(send, 2) X(send_with_imm, 3) X(rdma_read, 4) \
    X(atomic_cmp_and_swp, 5) X(atomic_fetch_and_add, 6) X(local_inv, 7) X(bind_mw, 8) X(send_with_inv, 9)

#define DROCE_WC_STATUSES(X) \
    X(success, 0) X(loc_len_err, 1) X(loc_qp_op_err, 2) X(loc_eec_op_err, 3) X(loc_prot_err, 4) \
    X(wr_flush_err, 5) X(mw_bind_err, 6) X(bad_resp_err, 7) X(loc_access_err, 8) X(rem_inv_req_err, 9) \
    X(rem_access_err, 10) X(rem_op_err, 11) X(retry_exc_err, 12) X(rnr_retry_exc_err, 13) \
    X(loc_rdd_viol_err, 14) X(rem_inv_rd_req_err, 15) X(rem_abort_err, 16) X(inv_eecn_err, 17) \
    X(inv_eec_state_err, 18) X(fatal_err, 19) X(resp_timeout_err, 20) X(general_err, 21)

#define DROCE_WC_OPCODES(X) \
    X(send, 0) X(rdma_write, 1) X(rdma_read, 2) X(comp_swap, 3) X(fetch_add, 4) X(bind_mw, 5) \
    X(local_inv, 6) X(recv, 128) X(recv_rdma_with_imm, 129)

#define DROCE_QP_STATES(X) X(reset, 0) X(init, 1) X(rtr, 2) X(rts, 3) X(sqd, 4) X(sqe, 5) X(err, 6)
// clang-format on

#define DROCE_ENUM_ENTRY(name, value) name = value,
enum class WrOpcode : std::uint8_t { DROCE_WR_OPCODES(DROCE_ENUM_ENTRY) };
enum class WcStatus : std::uint8_t { DROCE_WC_STATUSES(DROCE_ENUM_ENTRY) };
enum class WcOpcode : std::uint8_t { DROCE_WC_OPCODES(DROCE_ENUM_ENTRY) };
enum class QpState : std::uint8_t { DROCE_QP_STATES(DROCE_ENUM_ENTRY) };
#undef DROCE_ENUM_ENTRY

[[nodiscard]] std::string_view to_string(WrOpcode v) noexcept;
[[nodiscard]] std::string_view to_string(WcStatus v) noexcept;
[[nodiscard]] std::string_view to_string(WcOpcode v) noexcept;
[[nodiscard]] std::string_view to_string(QpState v) noexcept;

/** Send flags (ibv_send_flags values). */
enum SendFlags : std::uint32_t {
    kSendFence = 1u << 0,
    kSendSignaled = 1u << 1,
    kSendSolicited = 1u << 2,
    kSendInline = 1u << 3,
};

// Access flags (kAccessLocalWrite ...) are memory's: mem/access.h; the transport uses them as
// rc::kAccess* through this alias.
using mem::AccessFlags;
using mem::kAccessHugetlb;
using mem::kAccessLocalWrite;
using mem::kAccessMwBind;
using mem::kAccessOnDemand;
using mem::kAccessRelaxedOrdering;
using mem::kAccessRemoteAtomic;
using mem::kAccessRemoteRead;
using mem::kAccessRemoteWrite;
using mem::kAccessZeroBased;

/** wc_flags (ibv_wc_flags values). */
enum WcFlags : std::uint32_t { kWcGrh = 1u << 0, kWcWithImm = 1u << 1, kWcWithInv = 1u << 3 };

/** One scatter/gather element: @p length bytes at virtual address @p addr of the MR named by @p
 * lkey. */
struct Sge {
    std::uint64_t addr = 0;
    std::uint32_t length = 0;
    std::uint32_t lkey = 0;
};

/**
 * Engine-private progress of a send WQE: posted -> sending -> sent -> acked -> completed; on a
 * failure, error_due -> completed (after local_error when a local check failed).
 */
enum class WqeState : std::uint8_t {
    posted,  ///< on the SQ, not started by the requester
    sending, ///< packets going out (again, after go-back-N)
    sent,    ///< every packet sent, acknowledgement outstanding
    /** every packet acknowledged (or every response in); completes, in SQ order, once the payload
     *  it lent to a driver by reference is released (TxRef) */
    acked,
    completed,   ///< its completion (if any) pushed and its slot released, until posted again
    local_error, ///< failed a local check in the requester; completes when the completer reaches it
    error_due,   ///< its error completion (status) is due; qp_enter_error() pushes it in order
};

/**
 * A send work request as posted (ibv_send_wr): what Device::post_send() takes and copies into an
 * SQ slot (SqWqe). Inline data is in @p inline_data, @p length bytes of it.
 */
struct SendWqe {
    std::uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::send;
    std::uint32_t send_flags = 0; ///< SendFlags
    std::uint32_t imm_data =
        0; ///< host order value of the ImmDt (verbs: __be32, converted by the verbs layer)
    std::uint32_t invalidate_rkey = 0; ///< SEND with invalidate
    std::uint64_t remote_addr = 0;     ///< RDMA / atomic target VA
    std::uint32_t rkey = 0;
    std::uint64_t compare_add = 0; ///< atomic compare (CAS) or addend (FETCH_ADD)
    std::uint64_t swap = 0;        ///< atomic swap value (CAS)
    std::uint32_t num_sge = 0;
    std::uint32_t length = 0; ///< total bytes of the message (sum of SGE lengths, or inline length)
    Sge sg_list[kMaxSge];
    std::uint8_t inline_data[kMaxInlineData];
};

/**
 * What one SQ slot keeps beyond its line (SqWqe): the SGE list of a WQE with more than one, inline
 * data, an atomic's operands, and the status of a WQE that failed. One per slot, made with the SQ
 * (make_sq()); found by the slot's index (Qp::sq_ext_of()). Ownership as the slot's.
 */
struct SqWqeExt {
    // The rarely used scalars first, in a line of their own (the SGE list starts the next): an
    // atomic or a failure touches that line only.
    std::uint64_t compare_add = 0; ///< atomic compare (CAS) or addend (FETCH_ADD)
    std::uint64_t swap = 0;        ///< atomic swap value (CAS)
    /** Why the WQE failed: valid only in WqeState::local_error and error_due, which are entered
     *  with it set (a success needs no store here). */
    WcStatus status = WcStatus::success;
    alignas(64) Sge sg_list[kMaxSge];
    std::uint8_t inline_data[kMaxInlineData];
};

/**
 * One SQ slot: a posted send WQE (copied from a SendWqe) plus the requester's and completer's
 * private state, in one cache line. With thousands of busy QPs a poster finds the send queue out of
 * every cache, and each line it writes waits for a miss: a one-SGE WRITE, SEND or READ (the common
 * case) is written and read in this line only. What does not fit (more SGEs, inline data, atomic
 * operands, a failure's status) is in the slot's SqWqeExt (Qp::sq_ext_of()).
 * Ownership: written by the application thread (Device::post_send) until published on the SQ
 * ring; from then on owned by the engine until the completer releases the slot. Inline data is
 * copied in at post time, so the application's buffer is free as soon as post returns.
 */
struct alignas(64) SqWqe {
    // ---- as posted ----
    std::uint64_t wr_id = 0;
    std::uint64_t remote_addr = 0; ///< RDMA / atomic target VA
    Sge sge0;                      ///< the SGE of a WQE with one (num_sge <= 1)
    std::uint32_t rkey = 0;
    std::uint32_t length = 0; ///< total bytes of the message (sum of SGE lengths, or inline length)
    /** A message carries an ImmDt or an IETH, never both: the slot keeps whichever its opcode has
     *  (ibv_send_wr has them in one union as well). */
    union {
        std::uint32_t imm_data = 0;    ///< host order value of the ImmDt
        std::uint32_t invalidate_rkey; ///< SEND with invalidate
    };
    WrOpcode opcode = WrOpcode::send;
    std::uint8_t send_flags = 0; ///< SendFlags (ibv_send_flags fit in a byte)
    std::uint8_t num_sge = 0;    ///< at most kMaxSge
    // ---- engine-private ----
    WqeState state = WqeState::posted;
    Psn first_psn;                ///< PSN of the first packet of this message
    std::uint32_t npkts = 0;      ///< packets of this message (READ: response packets expected)
    std::uint32_t sent_bytes = 0; ///< requester: bytes sent so far (resumes segmentation)
    std::uint32_t recv_bytes = 0; ///< completer, READ: bytes of response data placed so far

    /** PSN of the last packet (READ: the last expected response PSN); npkts must be set. */
    [[nodiscard]] Psn last_psn() const noexcept { return first_psn + (npkts - 1); }
    /** The WQE's num_sge SGEs: in the slot for one, else in @p ext (this slot's SqWqeExt). */
    [[nodiscard]] const Sge* sg_list(const SqWqeExt& ext) const noexcept {
        return num_sge <= 1 ? &sge0 : ext.sg_list;
    }
    /**
     * Copies the posted fields of @p w, its SGEs (the first @p w.num_sge, at most kMaxSge) or, with
     * kSendInline, @p w.length bytes of its inline data (at most kMaxInlineData), and starts the
     * private state. What the slot does not hold goes to @p ext, this slot's SqWqeExt (written
     * only for a WQE that has such parts). @return the message length (the sum of the SGE lengths,
     * or the inline length; 64 bits: the caller refuses one above kMaxMsgSize).
     */
    std::uint64_t fill(const SendWqe& w, SqWqeExt& ext) noexcept;
};
static_assert(sizeof(SqWqe) == 64, "an SQ slot is one cache line");
static_assert(kMaxSge <= 0xff, "SqWqe::num_sge is a byte");
static_assert(kSendInline <= 0xff, "SqWqe::send_flags is a byte: every SendFlags bit fits");

inline std::uint64_t SqWqe::fill(const SendWqe& w, SqWqeExt& ext) noexcept {
    wr_id = w.wr_id;
    remote_addr = w.remote_addr;
    rkey = w.rkey;
    opcode = w.opcode;
    send_flags = static_cast<std::uint8_t>(w.send_flags);
    if (w.opcode == WrOpcode::send_with_inv)
        invalidate_rkey = w.invalidate_rkey;
    else
        imm_data = w.imm_data;
    if (w.opcode == WrOpcode::atomic_cmp_and_swp || w.opcode == WrOpcode::atomic_fetch_and_add) {
        ext.compare_add = w.compare_add;
        ext.swap = w.swap;
    }
    std::uint64_t total = 0;
    if (w.send_flags & kSendInline) {
        num_sge = 0;
        total = w.length < kMaxInlineData ? w.length : kMaxInlineData;
        std::memcpy(ext.inline_data, w.inline_data, total);
    } else {
        const std::uint32_t n = w.num_sge < kMaxSge ? w.num_sge : kMaxSge;
        num_sge = static_cast<std::uint8_t>(n);
        Sge* to = n <= 1 ? &sge0 : ext.sg_list;
        for (std::uint32_t s = 0; s < n; ++s) {
            to[s] = w.sg_list[s];
            total += w.sg_list[s].length;
        }
    }
    length = static_cast<std::uint32_t>(total);
    state = WqeState::posted;
    npkts = 0;
    sent_bytes = 0;
    recv_bytes = 0;
    return total;
}

/**
 * A receive work request: where an incoming SEND (or the immediate of WRITE with immediate) lands.
 * Ownership as SendWqe, on the RQ ring.
 */
struct RecvWqe {
    std::uint64_t wr_id = 0;
    std::uint32_t num_sge = 0;
    Sge sg_list[kMaxSge];
    std::uint32_t length = 0; ///< total capacity in bytes
};

/** A completion, with what ibv_wc carries. */
struct Cqe {
    std::uint64_t wr_id = 0;
    WcStatus status = WcStatus::success;
    WcOpcode opcode = WcOpcode::send;
    std::uint32_t vendor_err = 0;
    std::uint32_t byte_len = 0;
    std::uint32_t imm_data = 0; ///< host order; valid when wc_flags has kWcWithImm (or the
                                ///< invalidated rkey with kWcWithInv)
    std::uint32_t qp_num = 0;
    std::uint32_t src_qp = 0;
    std::uint32_t wc_flags = 0;
    std::uint16_t pkey_index = 0;
    std::uint16_t slid = 0;
    std::uint8_t sl = 0;
    std::uint8_t dlid_path_bits = 0;
};

/** ibv_qp_attr_mask bits. */
enum QpAttrMask : std::uint32_t {
    kQpState = 1u << 0,
    kQpCurState = 1u << 1,
    kQpEnSqdAsyncNotify = 1u << 2,
    kQpAccessFlags = 1u << 3,
    kQpPkeyIndex = 1u << 4,
    kQpPort = 1u << 5,
    kQpQkey = 1u << 6,
    kQpAv = 1u << 7,
    kQpPathMtu = 1u << 8,
    kQpTimeout = 1u << 9,
    kQpRetryCnt = 1u << 10,
    kQpRnrRetry = 1u << 11,
    kQpRqPsn = 1u << 12,
    kQpMaxQpRdAtomic = 1u << 13,
    kQpAltPath = 1u << 14,
    kQpMinRnrTimer = 1u << 15,
    kQpSqPsn = 1u << 16,
    kQpMaxDestRdAtomic = 1u << 17,
    kQpPathMigState = 1u << 18,
    kQpCap = 1u << 19,
    kQpDestQpn = 1u << 20,
};

/** Where the peer is: the address vector of ibv_ah_attr reduced to what RoCEv2 needs. */
struct AddressVector {
    wire::Ipv6Addr dgid{}; ///< peer GID: IPv4-mapped (::ffff:a.b.c.d) or IPv6
    wire::MacAddr dmac{};  ///< peer MAC (resolved by ARP/ND in the engine, or given)
    std::uint8_t sgid_index = 0;
    std::uint8_t port_num = 1; ///< 1-based port (plane)
    std::uint8_t traffic_class = 0;
    std::uint8_t hop_limit = 64;
    std::uint32_t flow_label = 0;
    std::uint8_t sl = 0;
};

/** QP attributes (ibv_qp_attr's fields that an RC QP on RoCEv2 uses). */
struct QpAttr {
    QpState qp_state = QpState::reset;
    QpState cur_qp_state = QpState::reset;
    Mtu path_mtu = Mtu::mtu1024;
    std::uint32_t qkey = 0;
    std::uint32_t rq_psn = 0;
    std::uint32_t sq_psn = 0;
    std::uint32_t dest_qp_num = 0;
    std::uint32_t qp_access_flags = 0;
    std::uint16_t pkey_index = 0;
    std::uint8_t max_rd_atomic = 1;
    std::uint8_t max_dest_rd_atomic = 1;
    std::uint8_t min_rnr_timer = 0;
    std::uint8_t port_num = 1;
    std::uint8_t timeout = 14;
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;
    bool sq_draining = false;
    AddressVector ah_attr;
};

/** QP creation capabilities (ibv_qp_cap). */
struct QpCap {
    std::uint32_t max_send_wr = 128;
    std::uint32_t max_recv_wr = 128;
    std::uint32_t max_send_sge = 1;
    std::uint32_t max_recv_sge = 1;
    std::uint32_t max_inline_data = 0;
};

} // namespace droce::rc
