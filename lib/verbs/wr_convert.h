/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Conversions between libibverbs' work requests and completions and droce's native ones, and the
 * empty-poll back-off, shared by the verbs library (lib/verbs) and lib_mrc (lib/mrcapi), which
 * both hand ibv_recv_wr / ibv_wc to the application. Header only: lib_mrc links no verbs code.
 * Thread rules: pure functions (the back-off keeps one counter per thread).
 */
#pragma once

#include <infiniband/verbs.h>

#include <endian.h>
#include <sched.h>

#include <cstdint>

#include "rc/types.h"

namespace droce::verbs {

/**
 * @p wr as a native receive WQE (its SGE list copied, length summed).
 * @return 0, or EINVAL when num_sge is negative, above rc::kMaxSge, or sg_list is null with SGEs.
 */
[[nodiscard]] inline int recv_wqe_from(const ibv_recv_wr& wr, rc::RecvWqe& r) noexcept {
    if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > rc::kMaxSge ||
        (wr.num_sge > 0 && !wr.sg_list))
        return EINVAL;
    r.wr_id = wr.wr_id;
    r.num_sge = static_cast<std::uint32_t>(wr.num_sge);
    std::uint32_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        r.sg_list[i] = rc::Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
        len += wr.sg_list[i].length;
    }
    r.length = len;
    return 0;
}

/** Fills every field of @p wc from @p e (immediate in network order, or the invalidated rkey). */
inline void wc_from_cqe(const rc::Cqe& e, ibv_wc* wc) noexcept {
    wc->wr_id = e.wr_id;
    wc->status = static_cast<ibv_wc_status>(e.status);
    wc->opcode = static_cast<ibv_wc_opcode>(e.opcode);
    wc->vendor_err = e.vendor_err;
    wc->byte_len = e.byte_len;
    if (e.wc_flags & rc::kWcWithInv)
        wc->invalidated_rkey = e.imm_data;
    else
        wc->imm_data = htobe32(e.imm_data);
    wc->qp_num = e.qp_num;
    wc->src_qp = e.src_qp;
    wc->wc_flags = e.wc_flags;
    wc->pkey_index = e.pkey_index;
    wc->slid = e.slid;
    wc->sl = e.sl;
    wc->dlid_path_bits = e.dlid_path_bits;
}

/**
 * Back-off of an application that polls an empty CQ: after kYieldAfter empty polls in a row on one
 * thread, give the core away once (sched_yield). On a host with fewer cores than busy threads (two
 * processes, each with an engine thread and a busy-polling application, on 2 cores) the engine
 * thread that would produce the completion otherwise waits for the poller's whole time slice
 * (milliseconds per message: ibv_rc_pingpong measured 27 ms per iteration without it). On an idle
 * core sched_yield returns at once. @p got: completions the poll returned.
 */
inline void note_poll(std::uint32_t got) noexcept {
    constexpr std::uint32_t kYieldAfter = 256;
    static thread_local std::uint32_t empty_polls = 0;
    if (got) {
        empty_polls = 0;
    } else if (++empty_polls >= kYieldAfter) {
        empty_polls = 0;
        sched_yield();
    }
}

} // namespace droce::verbs
