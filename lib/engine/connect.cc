/* SPDX-License-Identifier: BSD-3-Clause */
#include "connect.h"

namespace droce {

int connect_rc(Device& dev, rc::Qp* qp, const RcConnectParams& p, rc::QpState* refused) noexcept {
    rc::QpAttr a;
    a.qp_state = rc::QpState::init;
    a.pkey_index = 0;
    a.port_num = p.port_num;
    a.qp_access_flags = p.qp_access_flags;
    int err =
        dev.modify_qp(qp, a, rc::kQpState | rc::kQpPkeyIndex | rc::kQpPort | rc::kQpAccessFlags);
    if (err == 0) {
        a.qp_state = rc::QpState::rtr;
        a.path_mtu = p.path_mtu;
        a.dest_qp_num = p.dest_qp_num;
        a.rq_psn = p.rq_psn;
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        a.min_rnr_timer = p.min_rnr_timer;
        a.ah_attr = p.ah_attr;
        err = dev.modify_qp(qp, a,
                            rc::kQpState | rc::kQpAv | rc::kQpPathMtu | rc::kQpDestQpn |
                                rc::kQpRqPsn | rc::kQpMaxDestRdAtomic | rc::kQpMinRnrTimer);
    }
    if (err == 0) {
        a.qp_state = rc::QpState::rts;
        a.sq_psn = p.sq_psn;
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = p.max_rd_atomic;
        err = dev.modify_qp(qp, a,
                            rc::kQpState | rc::kQpSqPsn | rc::kQpTimeout | rc::kQpRetryCnt |
                                rc::kQpRnrRetry | rc::kQpMaxQpRdAtomic);
    }
    if (err != 0 && refused) *refused = a.qp_state;
    return err;
}

} // namespace droce
