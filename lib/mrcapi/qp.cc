/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc: QP hints and MRC queue pairs — create, modify, query, destroy, post (OCP MRC 1.0
 * application API).
 *
 * An MRC QP is a native rc::Qp run by droce's MRC transport (mrc::kMrcTransport): one QP sprayed
 * over every port (plane) of the device. mrc_modify_qp maps the API onto the native control calls:
 *  - the verbs attributes an MRC QP uses go to Device::modify_qp as they are (state, current state,
 *    P_Key index, access flags, AV, path MTU, destination QPN, PSNs); the attributes the RC rules
 *    require but MRC replaces (port at INIT; RDMA-read depth and RNR timer at RTR; timeout, retry
 *    and RNR retry counts, read depth at RTS) are filled in by lib_mrc, and the application's own
 *    values for them, if it passes them, are accepted and have no effect (the OCP header lists
 *    them as not supported; its own benchmark example passes IBV_QP_PORT, IBV_QP_TIMEOUT,
 *    IBV_QP_RETRY_CNT and IBV_QP_RNR_RETRY, so refusing them would refuse that example);
 *  - IBV_QP_ALT_PATH, IBV_QP_PATH_MIG_STATE and IBV_QP_RATE_LIMIT (and above) are EOPNOTSUPP;
 *  - the MRC attributes become mrc::MrcAttr: the responder's (max_wimm_dest, mpr_dest, the trim
 *    NACK capability) with mrc::set_attr while the QP is in RESET or INIT, the requester's
 *    (max_wimm, mpr, retry counts, timeout) with mrc::set_attr in RESET / INIT or
 *    mrc::set_requester_attr in RTR, so each may come with the transition the API lists it under
 *    or any earlier one;
 *  - the peer's address on every plane: the AV gives one GID; see peer_on_plane() for the rule
 *    that gives the peer's address behind each port, handed to Device::set_remote_planes.
 */
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "common/say_once.h"
#include "internal.h"
#include "rc/params.h"
#include "wire/ipv6.h"

using namespace droce;
using namespace droce::mrcapi;

namespace droce::mrcapi {

namespace {

// ---------------------------------------------------------------- planes

/**
 * The peer's address behind local port @p port, given @p dgid, the one GID the application passed
 * in the AV. droce's rule: every plane is its own subnet, and a node has the same host part on
 * every plane (what droce's configs do: 10.0.0.1/24 and 10.0.1.1/24 on one side, 10.0.0.2 and
 * 10.0.1.2 on the other). So:
 *  - when @p dgid lies in the subnet of @p port (or the port's prefix is 0 or the full length, or
 *    the families differ), the peer is @p dgid on that plane (one subnet for all planes: the same
 *    GID everywhere);
 *  - otherwise it is the port's network part with @p dgid's host part.
 * The MAC is left to the neighbour table (static entries of the config, else ARP / ND).
 */
wire::Ipv6Addr peer_on_plane(const PortConfig& port, const wire::Ipv6Addr& dgid) noexcept {
    const bool v4 = wire::is_ipv4_mapped(dgid);
    if (v4 != port.ip.ipv4) return dgid;
    const unsigned first = v4 ? 12 : 0;   // first byte of the address proper
    const unsigned width = v4 ? 32 : 128; // its bits
    const unsigned prefix = port.prefix_len;
    if (prefix == 0 || prefix >= width) return dgid;
    const auto bit = [first](const wire::Ipv6Addr& a, unsigned i) {
        return (a[first + i / 8] >> (7 - i % 8)) & 1u;
    };
    bool same = true;
    for (unsigned i = 0; i < prefix && same; ++i)
        same = bit(dgid, i) == bit(port.ip.addr, i);
    if (same) return dgid;
    wire::Ipv6Addr out = dgid;
    for (unsigned i = 0; i < prefix; ++i) {
        const auto m = static_cast<std::uint8_t>(0x80u >> (i % 8));
        std::uint8_t& b = out[first + i / 8];
        b = static_cast<std::uint8_t>(bit(port.ip.addr, i) ? (b | m) : (b & ~m));
    }
    return out;
}

// ---------------------------------------------------------------- verbs conversions

/** Fills @p w from @p wr (RDMA WRITE and WRITE with immediate only). @return 0 or EINVAL. */
int to_send_wqe(const ibv_send_wr& wr, rc::SendWqe& w) noexcept {
    if (wr.opcode != IBV_WR_RDMA_WRITE && wr.opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return EINVAL;
    if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > rc::kMaxSge) return EINVAL;
    if (wr.num_sge > 0 && !wr.sg_list) return EINVAL;
    w.wr_id = wr.wr_id;
    w.opcode = wr.opcode == IBV_WR_RDMA_WRITE ? rc::WrOpcode::rdma_write
                                              : rc::WrOpcode::rdma_write_with_imm;
    w.send_flags =
        wr.send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
    w.imm_data = wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? be32toh(wr.imm_data) : 0;
    w.invalidate_rkey = 0;
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
    w.compare_add = 0;
    w.swap = 0;
    if (wr.send_flags & IBV_SEND_INLINE) {
        std::uint32_t len = 0;
        for (int i = 0; i < wr.num_sge; ++i) {
            const ibv_sge& s = wr.sg_list[i];
            if (s.length > rc::kMaxInlineData - len) return EINVAL;
            std::memcpy(w.inline_data + len, reinterpret_cast<const void*>(s.addr), s.length);
            len += s.length;
        }
        w.num_sge = 0;
        w.length = len;
        return 0;
    }
    w.num_sge = static_cast<std::uint32_t>(wr.num_sge);
    std::uint32_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        w.sg_list[i] = rc::Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
        len += wr.sg_list[i].length;
    }
    w.length = len;
    return 0;
}

rc::QpAttr to_native(const ibv_qp_attr& a) noexcept {
    rc::QpAttr q;
    q.qp_state = static_cast<rc::QpState>(a.qp_state);
    q.cur_qp_state = static_cast<rc::QpState>(a.cur_qp_state);
    q.path_mtu = static_cast<rc::Mtu>(a.path_mtu);
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = static_cast<std::uint32_t>(a.qp_access_flags);
    q.pkey_index = a.pkey_index;
    std::memcpy(q.ah_attr.dgid.data(), a.ah_attr.grh.dgid.raw, 16);
    q.ah_attr.sgid_index = a.ah_attr.grh.sgid_index;
    q.ah_attr.port_num = a.ah_attr.port_num;
    q.ah_attr.traffic_class = a.ah_attr.grh.traffic_class;
    q.ah_attr.hop_limit = a.ah_attr.grh.hop_limit;
    q.ah_attr.flow_label = a.ah_attr.grh.flow_label;
    q.ah_attr.sl = a.ah_attr.sl;
    return q;
}

// ibv_qp_attr_mask bits, by what lib_mrc does with them.
constexpr std::uint32_t kPassed = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                                  IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_QKEY |
                                  IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
                                  IBV_QP_DEST_QPN | IBV_QP_CAP;
/** Not MRC attributes (the MRC ones replace them): accepted, no effect. */
constexpr std::uint32_t kIgnored = IBV_QP_PORT | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER |
                                   IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC;
/** Not supported on MRC QPs: EOPNOTSUPP. Every bit from IBV_QP_RATE_LIMIT up as well. */
constexpr std::uint32_t kRefused = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;

// MRC mask bits by when they may be given (the QP's state before the modify).
constexpr std::uint32_t kMrcResponder = MRC_QP_MAX_WIMM_DEST | MRC_QP_MPR_DEST | MRC_QP_CAP;
constexpr std::uint32_t kMrcRequester =
    MRC_QP_MAX_WIMM | MRC_QP_MPR | MRC_QP_TIMEOUT | MRC_QP_RETRY_CNT;
constexpr std::uint32_t kMrcProfiles = MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID;
constexpr std::uint32_t kMrcKnown = kMrcResponder | kMrcRequester | kMrcProfiles | MRC_QP_HINT |
                                    static_cast<std::uint32_t>(MRC_QP_VENDOR_CFG);
constexpr std::uint32_t kCapKnown = MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED | MRC_QP_CAP_DYNAMIC_MPR |
                                    MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED;
constexpr std::uint32_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
constexpr std::uint32_t kHintKnown = MRC_QP_HINT_NUM_QPS_PER_PEER | MRC_QP_HINT_NUM_SEND_PEERS |
                                     MRC_QP_HINT_NUM_REMOTE_RECV_PEERS |
                                     static_cast<std::uint32_t>(MRC_QP_HINT_VENDOR_CFG);

bool all_zero(const std::uint8_t* p, std::size_t n) noexcept {
    return std::all_of(p, p + n, [](std::uint8_t b) { return b == 0; });
}

void release_hint(mrc_qp_hint* h) noexcept {
    if (h) h->refs.fetch_sub(1, std::memory_order_acq_rel);
}

/** The modify itself, inside the control section. @return 0 or an errno number. */
int modify_locked(mrc_qp* qp, const ibv_qp_attr* vattr, std::uint32_t vmask,
                  const mrc_qp_attr* mattr, std::uint32_t mmask) noexcept {
    rc::Qp& q = *qp->native;
    Device& dev = *qp->ctx->dev;
    const rc::QpState cur = q.state;
    const bool before_rtr = cur == rc::QpState::reset || cur == rc::QpState::init;
    const bool before_rts = before_rtr || cur == rc::QpState::rtr;
    // ---- check everything before anything changes
    if ((vmask & kRefused) || (vmask & ~((1u << 21) - 1u))) return EOPNOTSUPP;
    if ((vmask & IBV_QP_PORT) && (vattr->port_num < 1 || vattr->port_num > dev.num_ports()))
        return EINVAL;
    if (vmask & IBV_QP_AV) {
        // RoCE addresses by GID (a GRH); each port has one GID, index 0.
        if (!vattr->ah_attr.is_global || vattr->ah_attr.grh.sgid_index != 0) return EINVAL;
    }
    if (mmask & ~kMrcKnown) return EINVAL;
    if ((mmask & kMrcResponder) && !before_rtr) return EINVAL;
    if ((mmask & kMrcProfiles) && !before_rtr) return EINVAL;
    if ((mmask & kMrcRequester) && !before_rts) return EINVAL;
    if (mmask & MRC_QP_CAP) {
        if (mattr->cap & ~kCapKnown) return EINVAL;
        if (mattr->cap & MRC_QP_CAP_DYNAMIC_MPR) return EOPNOTSUPP; // no dynamic MPR on droce
    }
    if ((mmask & MRC_QP_VENDOR_CFG) && !all_zero(mattr->vendor_cfg, sizeof mattr->vendor_cfg))
        return EOPNOTSUPP; // droce has no vendor configuration
    if ((mmask & MRC_QP_HINT) && mattr->qp_hint &&
        (!handle_is_live(mattr->qp_hint) || mattr->qp_hint->ctx != qp->ctx))
        return EINVAL;

    const mrc::MrcAttr* cur_attr = mrc::get_attr(q);
    if (!cur_attr) return EINVAL;
    const mrc::MrcAttr old_attr = *cur_attr;
    mrc::MrcAttr a = old_attr;
    if (mmask & MRC_QP_MAX_WIMM) a.max_wimm = mattr->wimm.max_wimm;
    if (mmask & MRC_QP_MAX_WIMM_DEST) a.max_wimm_dest = mattr->wimm.max_wimm_dest;
    if (mmask & MRC_QP_MPR) a.mpr = mattr->mpr.mpr;
    if (mmask & MRC_QP_MPR_DEST) a.mpr_dest = mattr->mpr.mpr_dest;
    if (mmask & MRC_QP_TIMEOUT) a.timeout = mattr->timeout;
    if (mmask & MRC_QP_RETRY_CNT) {
        a.linear_cnt = mattr->retry.linear_cnt;
        a.exp_cnt = mattr->retry.exp_cnt;
    }
    if (mmask & MRC_QP_CAP) a.trim_nack = !(mattr->cap & MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED);

    // ---- the MRC attributes (checked by lib/mrc: EINVAL out of range)
    const bool attr_changed = (mmask & (kMrcResponder | kMrcRequester)) != 0;
    if (attr_changed) {
        const int e = before_rtr ? mrc::set_attr(q, a) : mrc::set_requester_attr(q, a);
        if (e != 0) return e;
    }
    const auto restore_attr = [&] {
        if (attr_changed)
            (void)(before_rtr ? mrc::set_attr(q, old_attr) : mrc::set_requester_attr(q, old_attr));
    };

    // ---- profiles a controller set up (mrc_ctl; 0: droce's own paths, the device's CC). set_attr
    // above rebuilt the paths from num_evs: a QP on an EV profile gets the profile's again.
    const std::uint64_t old_ev_profile = qp->ev_profile_id;
    const std::uint64_t ev_profile =
        (mmask & MRC_QP_EV_PROFILE_ID) ? mattr->profile.ev_profile_id : qp->ev_profile_id;
    if ((mmask & MRC_QP_EV_PROFILE_ID) || (attr_changed && before_rtr && ev_profile != 0)) {
        if (const int e = apply_ev_profile(qp, ev_profile); e != 0) {
            restore_attr();
            return e;
        }
        qp->ev_profile_id = ev_profile;
    }
    if (mmask & MRC_QP_CC_PROFILE_ID) {
        if (const int e = apply_cc_profile(qp, mattr->profile.cc_profile_id); e != 0) {
            if (ev_profile != old_ev_profile) {
                (void)apply_ev_profile(qp, old_ev_profile);
                qp->ev_profile_id = old_ev_profile;
            }
            restore_attr();
            return e;
        }
    }

    // What a failure below undoes: the attributes, then the EV profile's paths on top of them.
    const auto restore_attr_and_profile = [&] {
        restore_attr();
        if (qp->ev_profile_id != old_ev_profile || (attr_changed && before_rtr)) {
            (void)apply_ev_profile(qp, old_ev_profile);
            qp->ev_profile_id = old_ev_profile;
        }
    };

    // ---- the peer's address on every plane, from the AV's GID
    const auto old_planes = q.remote_planes;
    const std::uint8_t old_num_planes = q.num_remote_planes;
    if (vmask & IBV_QP_AV) {
        wire::Ipv6Addr dgid;
        std::memcpy(dgid.data(), vattr->ah_attr.grh.dgid.raw, 16);
        std::vector<rc::RemotePlane> planes(dev.num_ports());
        for (unsigned p = 0; p < planes.size(); ++p)
            planes[p].gid =
                p < qp->ctx->cfg->ports.size() ? peer_on_plane(qp->ctx->cfg->ports[p], dgid) : dgid;
        if (const int e = dev.set_remote_planes(&q, planes); e != 0) {
            restore_attr_and_profile();
            return e;
        }
    }

    // ---- the verbs attributes, with what the RC rules require and MRC does not use
    std::uint32_t mask = vmask & kPassed;
    rc::QpAttr n = vattr ? to_native(*vattr) : rc::QpAttr{};
    const rc::QpState next = (vmask & IBV_QP_STATE) ? n.qp_state : cur;
    if (cur == rc::QpState::reset && next == rc::QpState::init) {
        mask |= rc::kQpPort;
        n.port_num = 1;
    } else if (cur == rc::QpState::init && next == rc::QpState::rtr) {
        mask |= rc::kQpMaxDestRdAtomic | rc::kQpMinRnrTimer;
        n.max_dest_rd_atomic = 0;
        n.min_rnr_timer = 0;
    } else if (cur == rc::QpState::rtr && next == rc::QpState::rts) {
        mask |= rc::kQpTimeout | rc::kQpRetryCnt | rc::kQpRnrRetry | rc::kQpMaxQpRdAtomic;
        n.timeout = 0; // the MRC transport keeps its own timer (mrc_qp_attr.timeout)
        n.retry_cnt = 7;
        n.rnr_retry = 7;
        n.max_rd_atomic = 0;
    }
    if (mask != 0) {
        if (const int e = dev.modify_qp(&q, n, mask); e != 0) {
            // Back as it was: planes (stored only before RTR; rebuilt paths otherwise) and
            // attributes.
            if (vmask & IBV_QP_AV)
                (void)dev.set_remote_planes(
                    &q, std::span<const rc::RemotePlane>(old_planes.data(), old_num_planes));
            restore_attr_and_profile();
            return e;
        }
    }

    // ---- what droce keeps beside the transport
    if (mmask & MRC_QP_HINT) {
        if (mattr->qp_hint) mattr->qp_hint->refs.fetch_add(1, std::memory_order_acq_rel);
        release_hint(qp->hint);
        qp->hint = mattr->qp_hint;
    }
    if (mmask & MRC_QP_CC_PROFILE_ID) qp->cc_profile_id = mattr->profile.cc_profile_id;
    if (mmask & MRC_QP_CAP) qp->cap = mattr->cap;
    if (mmask & MRC_QP_VENDOR_CFG)
        std::memcpy(qp->vendor_cfg, mattr->vendor_cfg, sizeof qp->vendor_cfg);
    // A QP that went back to RESET loses its completions still in its CQs (as with a hardware
    // provider).
    if (q.state == rc::QpState::reset && cur != rc::QpState::reset) {
        purge_cq(qp->init.send_cq, qp->qpn);
        if (qp->init.recv_cq != qp->init.send_cq) purge_cq(qp->init.recv_cq, qp->qpn);
    }
    return 0;
}

/**
 * The MRC attributes lib_mrc's QPs start from: the transport's defaults (mrc::MrcAttr), with loss
 * detection sized for real time on ordinary hosts, where two processes' engine threads may wait
 * milliseconds for a core, rather than for the sim fabric's microsecond round trips the native
 * defaults suit:
 *  - reorder_window_ns 1 ms (native 20 us): the time-based loss rule (a later packet arrived and
 *    srtt + 4 rttvar + the window passed) otherwise declares packets lost that are only late
 *    (seen on a loaded 2-core host: 256 "lost" packets that all arrived, as duplicates);
 *  - probe_interval_ns 10 ms (native 250 us): a probe reply counts only if it comes back before
 *    the path's next probe, so an interval shorter than the round trip keeps an ASSUMED_BAD path
 *    bad for ever (seen on the same host: two of four planes never came back).
 * The OCP API has no attribute for either.
 */
mrc::MrcAttr real_time_attr(const rc::Qp& q) noexcept {
    mrc::MrcAttr a = *mrc::get_attr(q);
    a.reorder_window_ns = 1'000'000;
    a.probe_interval_ns = 10'000'000;
    return a;
}

void fill_mrc_attr(const mrc_qp* qp, mrc_qp_attr* m) noexcept {
    const mrc::MrcAttr& a = *mrc::get_attr(*qp->native);
    std::memset(m, 0, sizeof *m);
    m->mpr.mpr = a.mpr;
    m->mpr.mpr_dest = a.mpr_dest;
    m->wimm.max_wimm = a.max_wimm;
    m->wimm.max_wimm_dest = a.max_wimm_dest;
    m->timeout = a.timeout;
    m->profile.ev_profile_id = qp->ev_profile_id;
    m->profile.cc_profile_id = qp->cc_profile_id;
    m->retry.linear_cnt = a.linear_cnt;
    m->retry.exp_cnt = a.exp_cnt;
    m->qp_hint = qp->hint;
    m->cap = (qp->cap & ~static_cast<std::uint32_t>(MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED)) |
             (a.trim_nack ? 0u : static_cast<std::uint32_t>(MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED));
    std::memcpy(m->vendor_cfg, qp->vendor_cfg, sizeof m->vendor_cfg);
}

void fill_verbs_attr(const mrc_qp* qp, ibv_qp_attr* v) noexcept {
    const rc::Qp& q = *qp->native;
    const rc::QpAttr& a = q.attr;
    std::memset(v, 0, sizeof *v);
    v->qp_state = static_cast<ibv_qp_state>(q.state);
    v->cur_qp_state = v->qp_state;
    v->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
    v->path_mig_state = IBV_MIG_MIGRATED;
    v->rq_psn = a.rq_psn;
    v->sq_psn = a.sq_psn;
    v->dest_qp_num = a.dest_qp_num;
    v->qp_access_flags = static_cast<unsigned>(a.qp_access_flags);
    v->cap = qp->init.cap;
    std::memcpy(v->ah_attr.grh.dgid.raw, a.ah_attr.dgid.data(), 16);
    v->ah_attr.grh.sgid_index = a.ah_attr.sgid_index;
    v->ah_attr.grh.traffic_class = a.ah_attr.traffic_class;
    v->ah_attr.grh.hop_limit = a.ah_attr.hop_limit;
    v->ah_attr.grh.flow_label = a.ah_attr.flow_label;
    v->ah_attr.is_global = 1;
    v->ah_attr.sl = a.ah_attr.sl;
    v->ah_attr.port_num = a.ah_attr.port_num;
    v->pkey_index = a.pkey_index;
    v->sq_draining = q.state == rc::QpState::sqd ? a.sq_draining : 0;
    v->port_num = 1;
    // Not MRC attributes (timeout, retry and RNR counts, RDMA-read depths): left 0; the MRC ones
    // are in mrc_qp_attr.
}

/**
 * DROCE_MRC_STATS=1 (in the environment): mrc_destroy_qp prints what the QP did to stderr, one line
 * per plane (data packets and payload bytes sent, retransmissions, data packets and bytes
 * received), one line of its non-zero MRC counters and one of the device's own non-zero counters
 * (drops before any QP, link changes). The OCP API has no per-plane statistics; this lets a test
 * or an operator see that every plane carried its share.
 */
void print_stats(const mrc_qp* qp) noexcept {
    const char* env = std::getenv("DROCE_MRC_STATS");
    if (!env || !*env || std::strcmp(env, "0") == 0) return;
    const rc::Qp& q = *qp->native;
    for (unsigned p = 0; p < qp->ctx->dev->num_ports(); ++p) {
        const mrc::PlaneStats* ps = mrc::plane_stats(q, p);
        if (!ps) return;
        std::fprintf(
            stderr,
            "lib_mrc: %s QP 0x%06x plane %u: tx %llu pkts %llu bytes %llu retransmits, "
            "rx %llu pkts %llu bytes\n",
            qp->ctx->dev->name().c_str(), qp->qpn, p,
            static_cast<unsigned long long>(ps->tx_pkts.load(std::memory_order_relaxed)),
            static_cast<unsigned long long>(ps->tx_bytes.load(std::memory_order_relaxed)),
            static_cast<unsigned long long>(ps->retransmits.load(std::memory_order_relaxed)),
            static_cast<unsigned long long>(ps->rx_pkts.load(std::memory_order_relaxed)),
            static_cast<unsigned long long>(ps->rx_bytes.load(std::memory_order_relaxed)));
    }
    if (const mrc::MrcCounters* c = mrc::counters(q)) {
        std::string line;
        for (std::size_t i = 0; i < mrc::kNumMrcCounters; ++i) {
            const std::uint64_t v = (*c)[static_cast<mrc::MrcCounter>(i)];
            if (v == 0) continue;
            line += " " + std::string(mrc::kMrcCounterNames[i]) + "=" + std::to_string(v);
        }
        std::fprintf(stderr, "lib_mrc: %s QP 0x%06x counters:%s\n", qp->ctx->dev->name().c_str(),
                     qp->qpn, line.c_str());
    }
    // The device's own counters (drops before any QP, link changes), for the same reader.
    std::string dev_line;
    qp->ctx->dev->counter_registry().for_each([&](std::string_view scope, std::string_view name,
                                                  std::uint64_t v) {
        if (v == 0 || scope.substr(0, 3) == "qp/") return;
        dev_line += " " + std::string(scope) + "/" + std::string(name) + "=" + std::to_string(v);
    });
    std::fprintf(stderr, "lib_mrc: %s device counters:%s\n", qp->ctx->dev->name().c_str(),
                 dev_line.c_str());
}

} // namespace

/** Destroys every object @p ctx still holds: QPs, CQs, hints, channels (mrc_destroy_context). */
void destroy_context_objects(mrc_context* ctx) noexcept {
    std::vector<mrc_qp*> qps;
    std::vector<mrc_cq*> cqs;
    std::vector<mrc_qp_hint*> hints;
    std::vector<mrc_comp_channel*> channels;
    {
        std::lock_guard<std::mutex> g(ctx->mu);
        qps = ctx->qps;
        cqs = ctx->cqs;
        hints = ctx->hints;
        channels = ctx->channels;
    }
    for (mrc_qp* q : qps)
        mrc_destroy_qp(q);
    for (mrc_cq* c : cqs) {
        // Events handed out and never acknowledged would make mrc_destroy_cq wait for ever.
        {
            std::lock_guard<std::mutex> g(c->ev_mu);
            c->events_acked = c->events_got;
        }
        mrc_destroy_cq(c);
    }
    for (mrc_qp_hint* h : hints)
        mrc_destroy_qp_hint(h);
    for (mrc_comp_channel* ch : channels)
        mrc_destroy_comp_channel(ch);
}

} // namespace droce::mrcapi

// ------------------------------------------------------------------ QP hints

extern "C" mrc_qp_hint* mrc_create_qp_hint(mrc_context* mrc_ctx, mrc_qp_hint_init_attr* init_attr) {
    if (!mrc_ctx || !init_attr || !context_is_live(mrc_ctx)) return fail<mrc_qp_hint>(EINVAL);
    const mrc_qp_hint_attr& a = init_attr->attr;
    if (a.num_qps_per_peer < 0 || a.num_send_peers < 0 || a.num_remote_recv_peers < 0)
        return fail<mrc_qp_hint>(EINVAL);
    std::lock_guard<std::mutex> g(mrc_ctx->mu);
    if (mrc_ctx->hints.size() >= rc::kMaxQp) return fail<mrc_qp_hint>(ENOMEM);
    auto* h = new (std::nothrow) mrc_qp_hint;
    if (!h) return fail<mrc_qp_hint>(ENOMEM);
    if (!handle_add(h)) {
        delete h;
        return fail<mrc_qp_hint>(ENOMEM);
    }
    h->ctx = mrc_ctx;
    h->attr = a;
    mrc_ctx->hints.push_back(h);
    return h;
}

extern "C" int mrc_destroy_qp_hint(mrc_qp_hint* qp_hint) {
    if (!qp_hint || !handle_is_live(qp_hint)) return fail_neg(EINVAL);
    std::lock_guard<std::mutex> g(qp_hint->ctx->mu);
    if (qp_hint->refs.load(std::memory_order_acquire) > 0) return fail_neg(EBUSY);
    std::erase(qp_hint->ctx->hints, qp_hint);
    handle_drop(qp_hint);
    delete qp_hint;
    return 0;
}

extern "C" int mrc_query_qp_hint(mrc_qp_hint* qp_hint, mrc_qp_hint_attr* qp_hint_attr,
                                 int qp_hint_attr_mask) {
    const auto mask = static_cast<std::uint32_t>(qp_hint_attr_mask);
    if (!qp_hint || !qp_hint_attr || (mask & ~kHintKnown) || !handle_is_live(qp_hint))
        return fail_neg(EINVAL);
    std::lock_guard<std::mutex> g(qp_hint->ctx->mu);
    const mrc_qp_hint_attr& a = qp_hint->attr;
    if (mask & MRC_QP_HINT_NUM_QPS_PER_PEER) qp_hint_attr->num_qps_per_peer = a.num_qps_per_peer;
    if (mask & MRC_QP_HINT_NUM_SEND_PEERS) qp_hint_attr->num_send_peers = a.num_send_peers;
    if (mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS)
        qp_hint_attr->num_remote_recv_peers = a.num_remote_recv_peers;
    if (mask & static_cast<std::uint32_t>(MRC_QP_HINT_VENDOR_CFG))
        std::memcpy(qp_hint_attr->vendor_cfg, a.vendor_cfg, sizeof a.vendor_cfg);
    return 0;
}

extern "C" int mrc_modify_qp_hint(mrc_qp_hint* qp_hint, mrc_qp_hint_attr* qp_hint_attr,
                                  int qp_hint_attr_mask) {
    const auto mask = static_cast<std::uint32_t>(qp_hint_attr_mask);
    if (!qp_hint || !qp_hint_attr || (mask & ~kHintKnown) || !handle_is_live(qp_hint))
        return fail_neg(EINVAL);
    const mrc_qp_hint_attr& in = *qp_hint_attr;
    if (((mask & MRC_QP_HINT_NUM_QPS_PER_PEER) && in.num_qps_per_peer < 0) ||
        ((mask & MRC_QP_HINT_NUM_SEND_PEERS) && in.num_send_peers < 0) ||
        ((mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS) && in.num_remote_recv_peers < 0))
        return fail_neg(EINVAL);
    std::lock_guard<std::mutex> g(qp_hint->ctx->mu);
    mrc_qp_hint_attr& a = qp_hint->attr;
    if (mask & MRC_QP_HINT_NUM_QPS_PER_PEER) a.num_qps_per_peer = in.num_qps_per_peer;
    if (mask & MRC_QP_HINT_NUM_SEND_PEERS) a.num_send_peers = in.num_send_peers;
    if (mask & MRC_QP_HINT_NUM_REMOTE_RECV_PEERS)
        a.num_remote_recv_peers = in.num_remote_recv_peers;
    if (mask & static_cast<std::uint32_t>(MRC_QP_HINT_VENDOR_CFG))
        std::memcpy(a.vendor_cfg, in.vendor_cfg, sizeof a.vendor_cfg);
    return 0;
}

// ------------------------------------------------------------------ QPs

extern "C" mrc_qp* mrc_create_qp(mrc_context* mrc_ctx, mrc_qp_init_attr* a) {
    if (!mrc_ctx || !a || !a->pd || !a->send_cq || !a->recv_cq) return fail<mrc_qp>(EINVAL);
    if (!context_is_live(mrc_ctx) || !handle_is_live(a->send_cq) || !handle_is_live(a->recv_cq))
        return fail<mrc_qp>(EINVAL);
    if (a->pd->context != mrc_ctx->ibv || a->send_cq->ctx != mrc_ctx || a->recv_cq->ctx != mrc_ctx)
        return fail<mrc_qp>(EINVAL);
    if (a->send_ops_flags & ~static_cast<std::uint64_t>(kSendOps))
        return fail<mrc_qp>(EOPNOTSUPP); // READ, SEND, atomics: not MRC operations
    const auto ver = static_cast<std::uint32_t>(a->protocol_version);
    if (ver & (ver - 1)) return fail<mrc_qp>(EINVAL); // more than one version asked
    if (ver != 0 && ver != MRC_PROTOCOL_VERSION_1) return fail<mrc_qp>(EOPNOTSUPP);
    // Before the control section (it takes the verbs layer's mutex).
    mem::Pd* pd = verbs_private().ok() ? verbs_private().pd(a->pd) : nullptr;
    if (!pd) return fail<mrc_qp>(EINVAL);
    auto* qp = new (std::nothrow) mrc_qp;
    if (!qp) return fail<mrc_qp>(ENOMEM);
    qp->scratch.reset(new (std::nothrow) rc::SendWqe[mrc_qp::kScratch]);
    if (!qp->scratch || !handle_add(qp)) {
        delete qp;
        return fail<mrc_qp>(ENOMEM);
    }
    rc::QpCap cap;
    cap.max_send_wr = a->cap.max_send_wr;
    cap.max_recv_wr = a->cap.max_recv_wr;
    cap.max_send_sge = a->cap.max_send_sge;
    cap.max_recv_sge = a->cap.max_recv_sge;
    cap.max_inline_data = a->cap.max_inline_data;
    int err = 0;
    qp->ctx = mrc_ctx; // before the EV hook can run
    {
        Control ctl(mrc_ctx->ibv);
        if (ctl.ok())
            qp->native = mrc_ctx->dev->create_qp(pd, a->send_cq->native, a->recv_cq->native, cap,
                                                 a->sq_sig_all != 0, &err, mrc::kMrcTransport);
        else
            err = EINVAL;
        if (qp->native) {
            (void)mrc::set_attr(*qp->native, real_time_attr(*qp->native));
            install_ev_hook(qp);
        }
    }
    if (!qp->native) {
        handle_drop(qp);
        delete qp;
        return fail<mrc_qp>(err);
    }
    a->cap.max_send_wr = qp->native->cap.max_send_wr;
    a->cap.max_recv_wr = qp->native->cap.max_recv_wr;
    a->cap.max_send_sge = qp->native->cap.max_send_sge;
    a->cap.max_recv_sge = qp->native->cap.max_recv_sge;
    a->cap.max_inline_data = qp->native->cap.max_inline_data;
    qp->qpn = qp->native->qpn;
    qp->init = *a;
    qp->init.protocol_version = MRC_PROTOCOL_VERSION_1;
    a->send_cq->qp_refs.fetch_add(1, std::memory_order_acq_rel);
    a->recv_cq->qp_refs.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard<std::mutex> g(mrc_ctx->mu);
    mrc_ctx->qps.push_back(qp);
    return qp;
}

extern "C" int mrc_destroy_qp(mrc_qp* qp) {
    if (!qp || !handle_is_live(qp)) return fail_errno(EINVAL);
    mrc_context* ctx = qp->ctx;
    {
        Control ctl(ctx->ibv);
        if (!ctl.ok()) return fail_errno(EINVAL);
        print_stats(qp);
        if (const int e = ctx->dev->destroy_qp(qp->native); e != 0) return fail_errno(e);
        // Its completions still in the CQs go with it (as with a hardware provider).
        purge_cq(qp->init.send_cq, qp->qpn);
        if (qp->init.recv_cq != qp->init.send_cq) purge_cq(qp->init.recv_cq, qp->qpn);
        release_hint(qp->hint);
    }
    qp->init.send_cq->qp_refs.fetch_sub(1, std::memory_order_acq_rel);
    qp->init.recv_cq->qp_refs.fetch_sub(1, std::memory_order_acq_rel);
    {
        std::lock_guard<std::mutex> g(ctx->mu);
        std::erase(ctx->qps, qp);
    }
    handle_drop(qp);
    delete qp;
    return 0;
}

extern "C" int mrc_get_qpn(mrc_qp* qp, uint32_t* qpn) {
    if (!qp || !qpn) return fail_neg(EINVAL);
    *qpn = qp->qpn;
    return 0;
}

extern "C" int mrc_modify_qp(mrc_qp* qp, ibv_qp_attr* vattr, int vattr_mask, mrc_qp_attr* mrc_attr,
                             int mrc_attr_mask) {
    const auto vmask = static_cast<std::uint32_t>(vattr_mask);
    const auto mmask = static_cast<std::uint32_t>(mrc_attr_mask);
    if (!qp || (vmask && !vattr) || (mmask && !mrc_attr) || !handle_is_live(qp))
        return fail_errno(EINVAL);
    Control ctl(qp->ctx->ibv);
    if (!ctl.ok()) return fail_errno(EINVAL);
    const int err = modify_locked(qp, vattr, vmask, mrc_attr, mmask);
    // A path MTU over what the planes carry: the program says only that the modify failed.
    static std::atomic<bool> told_mtu{false};
    if (err == EINVAL && (vmask & IBV_QP_PATH_MTU) && vattr->path_mtu >= IBV_MTU_256 &&
        vattr->path_mtu <= IBV_MTU_4096 && !told_mtu.load(std::memory_order_relaxed)) {
        const std::string why =
            qp->ctx->dev->path_mtu_refusal(1, rc::mtu_bytes(static_cast<rc::Mtu>(vattr->path_mtu)));
        if (!why.empty()) (void)say_once(told_mtu, "mrc_modify_qp: %s", why.c_str());
    }
    return fail_errno(err);
}

extern "C" int mrc_query_qp(mrc_qp* qp, ibv_qp_attr* vattr, int vattr_mask, mrc_qp_attr* mrc_attr,
                            int mrc_attr_mask, mrc_qp_init_attr* init_attr) {
    const auto mmask = static_cast<std::uint32_t>(mrc_attr_mask);
    if (!qp || (vattr_mask && !vattr) || (mmask && !mrc_attr) || (mmask & ~kMrcKnown) ||
        !handle_is_live(qp))
        return fail_errno(EINVAL);
    Control ctl(qp->ctx->ibv);
    if (!ctl.ok()) return fail_errno(EINVAL);
    // Every field is filled, whatever the masks ask (as ibv_query_qp does).
    if (vattr) fill_verbs_attr(qp, vattr);
    if (mrc_attr) fill_mrc_attr(qp, mrc_attr);
    if (init_attr) *init_attr = qp->init;
    return 0;
}

extern "C" int mrc_post_send(mrc_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    if (!qp || !wr) {
        if (bad_wr) *bad_wr = wr;
        return fail_errno(EINVAL);
    }
    rc::SendWqe* buf = qp->scratch.get();
    int rc = 0;
    qp->sq_lock.lock();
    ibv_send_wr* head = wr;
    while (head && rc == 0) {
        std::uint32_t n = 0;
        ibv_send_wr* w = head;
        for (; w && n < mrc_qp::kScratch; w = w->next, ++n)
            if ((rc = to_send_wqe(*w, buf[n])) != 0) break;
        std::uint32_t bad = n;
        if (n > 0) {
            const int prc = qp->ctx->dev->post_send(qp->native, buf, n, &bad);
            if (prc != 0) rc = prc;
        }
        if (rc != 0) {
            ibv_send_wr* b = head; // the first WR not posted
            for (std::uint32_t i = 0; i < bad && b; ++i)
                b = b->next;
            if (bad_wr) *bad_wr = b;
            break;
        }
        head = w;
    }
    qp->sq_lock.unlock();
    return fail_errno(rc);
}

extern "C" int mrc_post_recv(mrc_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    if (!qp || !wr) {
        if (bad_wr) *bad_wr = wr;
        return fail_neg(EINVAL);
    }
    int rc = 0;
    rc::RecvWqe r;
    qp->rq_lock.lock();
    for (; wr; wr = wr->next) {
        if ((rc = verbs::recv_wqe_from(*wr, r)) != 0) break;
        std::uint32_t bad = 0;
        if ((rc = qp->ctx->dev->post_recv(qp->native, &r, 1, &bad)) != 0) break;
    }
    if (rc != 0 && bad_wr) *bad_wr = wr;
    qp->rq_lock.unlock();
    return rc == 0 ? 0 : fail_neg(rc);
}
