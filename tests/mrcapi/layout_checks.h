/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ABI of the OCP MRC 1.0 API as droce declares it (lib/mrcapi/include): every struct's size,
 * alignment and member offsets, every enum's size and values, every numeric macro, as X(expression,
 * expected value). The expected values are what the OCP companion repository's headers give (read
 * from them and measured with a throwaway program built outside this tree, x86-64 Linux, GCC);
 * nothing here reads those headers. A program built against either header set therefore hands
 * lib_mrc.so the same bytes.
 *
 * Used by layout_c.c (compiled as C) and layout_test.cc (C++): both evaluate every row.
 * OFF(type, member) is offsetof, ALIGN(type) the alignment, U32(x) a conversion to uint32_t,
 * MSIZE(tag, member) the size of a member of struct tag; the including file defines them.
 */
#ifndef DROCE_TESTS_MRCAPI_LAYOUT_CHECKS_H
#define DROCE_TESTS_MRCAPI_LAYOUT_CHECKS_H

#define OFF(t, m) offsetof(t, m)

// clang-format off
#define MRCAPI_LAYOUT_CHECKS(X) \
    X(MRC_MAX_VENDOR_CFG_SIZE, 128) \
    X(MRC_API_VER_MAJOR_OFFSET, 24) \
    X(MRC_API_VER_MINOR_OFFSET, 16) \
    X(MRC_API_VER_SUBMINOR_OFFSET, 0) \
    X(MRC_API_VER(1, 2, 3), 16908291) \
    X(U32(MRC_API_VER_LATEST), 4294967295) \
    X(MRC_API_CURRENT_VERSION, 16777217) \
    X(MRC_API_LAST_SUPPORTED_VERSION, 0) \
    X(MRC_API_VER_USED, 16777217) \
    X(MRC_VENDOR_API_CURRENT_VERSION, 16777216) \
    X(MRC_VENDOR_API_LAST_SUPPORTED_VERSION, 0) \
    X(MRC_VENDOR_API_VER_USED, 16777216) \
    X(MRC_CTL_API_VER_MAJOR_OFFSET, 24) \
    X(MRC_CTL_API_VER_MINOR_OFFSET, 16) \
    X(MRC_CTL_API_VER_SUBMINOR_OFFSET, 0) \
    X(MRC_CTL_API_VER(1, 2, 3), 16908291) \
    X(U32(MRC_CTL_API_VER_LATEST), 4294967295) \
    X(MRC_CTL_API_CURRENT_VERSION, 16777217) \
    X(MRC_CTL_API_LAST_SUPPORTED_VERSION, 0) \
    X(MRC_CTL_API_VER_USED, 16777217) \
    X(MRC_CTL_VENDOR_API_CURRENT_VERSION, 16777216) \
    X(MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION, 0) \
    X(MRC_CTL_VENDOR_API_VER_USED, 16777216) \
    X(sizeof(enum mrc_protocol_version), 4) \
    X(MRC_PROTOCOL_VERSION_0, 0) \
    X(MRC_PROTOCOL_VERSION_1, 1) \
    X(sizeof(enum mrc_device_cap), 4) \
    X(MRC_DEVICE_CAP_TRIM_NACK, 1) \
    X(MRC_DEVICE_CAP_DYNAMIC_MPR, 2) \
    X(MRC_DEVICE_CAP_SVC_TIME, 4) \
    X(sizeof(struct mrc_device_attr), 20) \
    X(ALIGN(struct mrc_device_attr), 4) \
    X(OFF(struct mrc_device_attr, mrc_protocol_version), 0) \
    X(OFF(struct mrc_device_attr, wimm_attr), 4) \
    X(OFF(struct mrc_device_attr, wimm_attr.max_wimm), 4) \
    X(OFF(struct mrc_device_attr, wimm_attr.max_wimm_dest), 6) \
    X(OFF(struct mrc_device_attr, mpr_attr), 8) \
    X(OFF(struct mrc_device_attr, mpr_attr.max_mpr), 8) \
    X(OFF(struct mrc_device_attr, mpr_attr.mpr_resolution), 9) \
    X(OFF(struct mrc_device_attr, qp_attr), 12) \
    X(OFF(struct mrc_device_attr, qp_attr.max_qp_hint), 12) \
    X(OFF(struct mrc_device_attr, cap), 16) \
    X(sizeof(struct mrc_context_attr), 8) \
    X(ALIGN(struct mrc_context_attr), 4) \
    X(OFF(struct mrc_context_attr, mrc_api_version_used), 0) \
    X(OFF(struct mrc_context_attr, mrc_vendor_api_version_used), 4) \
    X(sizeof(struct mrc_qp_hint_attr), 140) \
    X(ALIGN(struct mrc_qp_hint_attr), 4) \
    X(OFF(struct mrc_qp_hint_attr, num_qps_per_peer), 0) \
    X(OFF(struct mrc_qp_hint_attr, num_send_peers), 4) \
    X(OFF(struct mrc_qp_hint_attr, num_remote_recv_peers), 8) \
    X(OFF(struct mrc_qp_hint_attr, vendor_cfg), 12) \
    X(MSIZE(mrc_qp_hint_attr, vendor_cfg), 128) \
    X(sizeof(enum mrc_qp_hint_attr_mask), 4) \
    X(MRC_QP_HINT_NUM_QPS_PER_PEER, 1) \
    X(MRC_QP_HINT_NUM_SEND_PEERS, 2) \
    X(MRC_QP_HINT_NUM_REMOTE_RECV_PEERS, 4) \
    X(MRC_QP_HINT_VENDOR_CFG, -2147483648) \
    X(sizeof(struct mrc_qp_hint_init_attr), 140) \
    X(ALIGN(struct mrc_qp_hint_init_attr), 4) \
    X(OFF(struct mrc_qp_hint_init_attr, attr), 0) \
    X(sizeof(struct mrc_qp_init_attr), 72) \
    X(ALIGN(struct mrc_qp_init_attr), 8) \
    X(OFF(struct mrc_qp_init_attr, qp_context), 0) \
    X(OFF(struct mrc_qp_init_attr, send_cq), 8) \
    X(OFF(struct mrc_qp_init_attr, recv_cq), 16) \
    X(OFF(struct mrc_qp_init_attr, cap), 24) \
    X(OFF(struct mrc_qp_init_attr, sq_sig_all), 44) \
    X(OFF(struct mrc_qp_init_attr, pd), 48) \
    X(OFF(struct mrc_qp_init_attr, send_ops_flags), 56) \
    X(OFF(struct mrc_qp_init_attr, protocol_version), 64) \
    X(sizeof(enum mrc_qp_attr_mask), 4) \
    X(MRC_QP_MAX_WIMM, 1) \
    X(MRC_QP_MAX_WIMM_DEST, 2) \
    X(MRC_QP_MPR, 4) \
    X(MRC_QP_MPR_DEST, 8) \
    X(MRC_QP_TIMEOUT, 16) \
    X(MRC_QP_EV_PROFILE_ID, 32) \
    X(MRC_QP_CC_PROFILE_ID, 64) \
    X(MRC_QP_HINT, 128) \
    X(MRC_QP_RETRY_CNT, 256) \
    X(MRC_QP_CAP, 512) \
    X(MRC_QP_VENDOR_CFG, -2147483648) \
    X(sizeof(enum mrc_qp_cap), 4) \
    X(MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED, 1) \
    X(MRC_QP_CAP_DYNAMIC_MPR, 2) \
    X(MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED, 4) \
    X(sizeof(struct mrc_qp_attr), 176) \
    X(ALIGN(struct mrc_qp_attr), 8) \
    X(OFF(struct mrc_qp_attr, mpr), 0) \
    X(OFF(struct mrc_qp_attr, mpr.mpr), 0) \
    X(OFF(struct mrc_qp_attr, mpr.mpr_dest), 1) \
    X(OFF(struct mrc_qp_attr, wimm), 2) \
    X(OFF(struct mrc_qp_attr, wimm.max_wimm), 2) \
    X(OFF(struct mrc_qp_attr, wimm.max_wimm_dest), 4) \
    X(OFF(struct mrc_qp_attr, timeout), 6) \
    X(OFF(struct mrc_qp_attr, profile), 8) \
    X(OFF(struct mrc_qp_attr, profile.ev_profile_id), 8) \
    X(OFF(struct mrc_qp_attr, profile.cc_profile_id), 16) \
    X(OFF(struct mrc_qp_attr, retry), 24) \
    X(OFF(struct mrc_qp_attr, retry.linear_cnt), 24) \
    X(OFF(struct mrc_qp_attr, retry.exp_cnt), 25) \
    X(OFF(struct mrc_qp_attr, qp_hint), 32) \
    X(OFF(struct mrc_qp_attr, cap), 40) \
    X(OFF(struct mrc_qp_attr, vendor_cfg), 44) \
    X(sizeof(struct mrc_async_event), 16) \
    X(ALIGN(struct mrc_async_event), 8) \
    X(OFF(struct mrc_async_event, element), 0) \
    X(OFF(struct mrc_async_event, element.cq), 0) \
    X(OFF(struct mrc_async_event, element.qp), 0) \
    X(OFF(struct mrc_async_event, element.port_num), 0) \
    X(OFF(struct mrc_async_event, event_type), 8) \
    X(MSIZE(mrc_async_event, element), 8) \
    X(MRC_CTL_MAX_VENDOR_CFG_SIZE, 128) \
    X(MRC_CTL_EV_MAX_BYTES, 32) \
    X(sizeof(mrc_ctl_ev_t), 32) \
    X(sizeof(enum mrc_ctl_protocol_version), 4) \
    X(MRC_CTL_PROTOCOL_VERSION_0, 0) \
    X(MRC_CTL_PROTOCOL_VERSION_1, 1) \
    X(sizeof(enum mrc_ctl_profile_state), 4) \
    X(MRC_CTL_PROFILE_INIT, 0) \
    X(MRC_CTL_PROFILE_OFFLINE, 1) \
    X(MRC_CTL_PROFILE_ONLINE, 2) \
    X(sizeof(enum mrc_ctl_attr_opt), 4) \
    X(MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE, 1) \
    X(MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE, 2) \
    X(MRC_CTL_OPT_CAP_EV_EVENT, 4) \
    X(MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE, 8) \
    X(MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT, 16) \
    X(MRC_CTL_OPT_CAP_EP_OP_EV_PROBE, 32) \
    X(sizeof(struct mrc_ctl_device_attr), 72) \
    X(ALIGN(struct mrc_ctl_device_attr), 8) \
    X(OFF(struct mrc_ctl_device_attr, mrc_ctl_protocol_version), 0) \
    X(OFF(struct mrc_ctl_device_attr, ev), 4) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_max_fmt_profiles), 4) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_max_profiles), 8) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_max_count), 12) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_free_count), 16) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_max_count_profile), 20) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_count_align), 24) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_max_width), 28) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_fmt_mode_mask), 32) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_mode_mask), 36) \
    X(OFF(struct mrc_ctl_device_attr, ev.ev_op_max_entries), 40) \
    X(OFF(struct mrc_ctl_device_attr, cc), 48) \
    X(OFF(struct mrc_ctl_device_attr, cc.cc_max_profiles), 48) \
    X(OFF(struct mrc_ctl_device_attr, cc.algorithms), 56) \
    X(OFF(struct mrc_ctl_device_attr, phy_port_mask), 64) \
    X(OFF(struct mrc_ctl_device_attr, opt_attr), 68) \
    X(sizeof(enum mrc_ctl_port_admin_state), 4) \
    X(MRC_CTL_PORT_ADMIN_DISABLED, 0) \
    X(MRC_CTL_PORT_ADMIN_ENABLED, 1) \
    X(sizeof(enum mrc_ctl_port_attr_mask), 4) \
    X(MRC_CTL_PORT_ADMIN_STATE, 1) \
    X(sizeof(struct mrc_ctl_port_attr), 4) \
    X(ALIGN(struct mrc_ctl_port_attr), 4) \
    X(OFF(struct mrc_ctl_port_attr, port_admin_state), 0) \
    X(sizeof(enum mrc_ctl_ev_fmt_mode), 4) \
    X(MRC_CTL_EV_FMT_MODE_STEV, 1) \
    X(MRC_CTL_EV_FMT_MODE_SRV6, 2) \
    X(MRC_CTL_EV_FMT_MODE_UDP, 4) \
    X(sizeof(enum mrc_ctl_ev_fmt_op), 4) \
    X(MRC_CTL_EV_FMT_OP_MODIFY_FIELDS, 0) \
    X(MRC_CTL_EV_FMT_OP_QUERY_FIELDS, 1) \
    X(sizeof(enum mrc_ctl_ev_fmt_profile_attr_mask), 4) \
    X(MRC_CTL_EV_FMT_PROFILE_STATE, 1) \
    X(MRC_CTL_EV_FMT_PROFILE_CUR_STATE, 2) \
    X(MRC_CTL_EV_FMT_PROFILE_MODE, 4) \
    X(MRC_CTL_EV_FMT_PROFILE_OP, 8) \
    X(MRC_CTL_EV_FMT_VENDOR_CFG, -2147483648) \
    X(sizeof(struct mrc_ctl_ev_fmt_field), 1) \
    X(ALIGN(struct mrc_ctl_ev_fmt_field), 1) \
    X(OFF(struct mrc_ctl_ev_fmt_field, width), 0) \
    X(sizeof(struct mrc_ctl_ev_fmt_profile_attr), 168) \
    X(ALIGN(struct mrc_ctl_ev_fmt_profile_attr), 8) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, profile_state), 0) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, cur_profile_state), 4) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, ev_fmt_mode), 8) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, ev_fmt_op), 16) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, ev_fmt_op.op), 16) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, ev_fmt_op.fmt_fields), 24) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, ev_fmt_op.fmt_field_count), 32) \
    X(OFF(struct mrc_ctl_ev_fmt_profile_attr, vendor_cfg), 40) \
    X(sizeof(struct mrc_ctl_ev), 33) \
    X(ALIGN(struct mrc_ctl_ev), 1) \
    X(OFF(struct mrc_ctl_ev, val), 0) \
    X(OFF(struct mrc_ctl_ev, port), 32) \
    X(sizeof(enum mrc_ctl_ev_state), 4) \
    X(MRC_CTL_EV_GOOD, 1) \
    X(MRC_CTL_EV_ASSUMED_BAD, 2) \
    X(MRC_CTL_EV_DENIED, 4) \
    X(MRC_CTL_EV_UNKNOWN, -2147483648) \
    X(sizeof(enum mrc_ctl_ev_mode), 4) \
    X(MRC_CTL_EV_MODE_AUTO, 1) \
    X(MRC_CTL_EV_MODE_EXP, 2) \
    X(MRC_CTL_EV_MODE_GEN, 4) \
    X(sizeof(enum mrc_ctl_ev_op), 4) \
    X(MRC_CTL_EV_OP_REPLACE_EV, 0) \
    X(MRC_CTL_EV_OP_MODIFY_EV_STATE, 1) \
    X(MRC_CTL_EV_OP_QUERY_EV_STATE, 2) \
    X(MRC_CTL_EV_OP_QUERY_EV_ARRAY, 3) \
    X(sizeof(enum mrc_ctl_ev_fields_op), 4) \
    X(MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS, 0) \
    X(MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS, 1) \
    X(sizeof(enum mrc_ctl_ev_profile_attr_mask), 4) \
    X(MRC_CTL_EV_PROFILE_STATE, 1) \
    X(MRC_CTL_EV_PROFILE_CUR_STATE, 2) \
    X(MRC_CTL_EV_PROFILE_MODE, 4) \
    X(MRC_CTL_EV_PROFILE_FMT_ID, 8) \
    X(MRC_CTL_EV_PROFILE_COUNT, 16) \
    X(MRC_CTL_EV_PROFILE_MIN_ACTIVE, 32) \
    X(MRC_CTL_EV_PROFILE_EVENT_MASK, 64) \
    X(MRC_CTL_EV_PROFILE_EV_OP, 128) \
    X(MRC_CTL_EV_PROFILE_EV_FIELDS_OP, 256) \
    X(MRC_CTL_EV_PROFILE_VENDOR_CFG, -2147483648) \
    X(sizeof(struct mrc_ctl_ev_field), 20) \
    X(ALIGN(struct mrc_ctl_ev_field), 4) \
    X(OFF(struct mrc_ctl_ev_field, width), 0) \
    X(OFF(struct mrc_ctl_ev_field, init_val), 4) \
    X(OFF(struct mrc_ctl_ev_field, min_val), 8) \
    X(OFF(struct mrc_ctl_ev_field, max_val), 12) \
    X(OFF(struct mrc_ctl_ev_field, mask), 16) \
    X(sizeof(enum mrc_ctl_ev_op_flags), 4) \
    X(MRC_CTL_EV_OP_F_ALL_COPIES, 1) \
    X(sizeof(struct mrc_ctl_ev_op_entry), 76) \
    X(ALIGN(struct mrc_ctl_ev_op_entry), 4) \
    X(OFF(struct mrc_ctl_ev_op_entry, ev), 0) \
    X(OFF(struct mrc_ctl_ev_op_entry, ev_new), 33) \
    X(OFF(struct mrc_ctl_ev_op_entry, state), 68) \
    X(OFF(struct mrc_ctl_ev_op_entry, flags), 72) \
    X(sizeof(struct mrc_ctl_ev_profile_attr), 216) \
    X(ALIGN(struct mrc_ctl_ev_profile_attr), 8) \
    X(OFF(struct mrc_ctl_ev_profile_attr, profile_state), 0) \
    X(OFF(struct mrc_ctl_ev_profile_attr, cur_profile_state), 4) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_mode), 8) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_fmt_profile_id), 16) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_count), 24) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_min_active), 28) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_event_mask), 32) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_op), 40) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_op.op), 40) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_op.entries), 48) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_op.entry_count), 56) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_fields_op), 64) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_fields_op.op), 64) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_fields_op.fields), 72) \
    X(OFF(struct mrc_ctl_ev_profile_attr, ev_fields_op.field_count), 80) \
    X(OFF(struct mrc_ctl_ev_profile_attr, vendor_cfg), 88) \
    X(sizeof(enum mrc_ctl_cc_profile_attr_mask), 4) \
    X(MRC_CTL_CC_PROFILE_STATE, 1) \
    X(MRC_CTL_CC_PROFILE_CUR_STATE, 2) \
    X(MRC_CTL_CC_PROFILE_ALGORITHM, 4) \
    X(MRC_CTL_CC_PROFILE_CONFIG, 8) \
    X(MRC_CTL_CC_PROFILE_VENDOR_CFG, -2147483648) \
    X(sizeof(struct mrc_ctl_cc_profile_attr), 152) \
    X(ALIGN(struct mrc_ctl_cc_profile_attr), 8) \
    X(OFF(struct mrc_ctl_cc_profile_attr, profile_state), 0) \
    X(OFF(struct mrc_ctl_cc_profile_attr, cur_profile_state), 4) \
    X(OFF(struct mrc_ctl_cc_profile_attr, algorithm), 8) \
    X(OFF(struct mrc_ctl_cc_profile_attr, cc_config), 16) \
    X(OFF(struct mrc_ctl_cc_profile_attr, vendor_cfg), 24) \
    X(sizeof(struct mrc_ctl_cc_nscc_cfg), 52) \
    X(ALIGN(struct mrc_ctl_cc_nscc_cfg), 4) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, disable_qa), 0) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, adjust_bytes_threshold), 4) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, adjust_period_threshold), 8) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, base_rtt), 12) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, eta), 16) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, fi), 20) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, fi_scale), 24) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, gamma), 28) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, max_md_jump), 32) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, max_cwnd), 36) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, qa_gate), 40) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, qa_threshold), 44) \
    X(OFF(struct mrc_ctl_cc_nscc_cfg, target_delay), 48) \
    X(sizeof(struct mrc_ctl_ev_event), 56) \
    X(ALIGN(struct mrc_ctl_ev_event), 8) \
    X(OFF(struct mrc_ctl_ev_event, profile_id), 0) \
    X(OFF(struct mrc_ctl_ev_event, ev), 8) \
    X(OFF(struct mrc_ctl_ev_event, drop_count), 44) \
    X(OFF(struct mrc_ctl_ev_event, state), 48) \
    X(sizeof(enum mrc_ctl_ep_op_type), 4) \
    X(MRC_CTL_EP_OP_EV_PROBE, 0) \
    X(MRC_CTL_EP_OP_PORT_STATUS_UPDATE, 1) \
    X(sizeof(struct mrc_ctl_ep_req), 88) \
    X(ALIGN(struct mrc_ctl_ep_req), 8) \
    X(OFF(struct mrc_ctl_ep_req, req_id), 0) \
    X(OFF(struct mrc_ctl_ep_req, sgid), 8) \
    X(OFF(struct mrc_ctl_ep_req, dgid), 24) \
    X(OFF(struct mrc_ctl_ep_req, ev_fmt_mode), 40) \
    X(OFF(struct mrc_ctl_ep_req, req_ev), 44) \
    X(OFF(struct mrc_ctl_ep_req, op), 80) \
    X(OFF(struct mrc_ctl_ep_req, op.port_status_update.port_status), 80) \
    X(sizeof(struct mrc_ctl_ep_rsp), 12) \
    X(ALIGN(struct mrc_ctl_ep_rsp), 4) \
    X(OFF(struct mrc_ctl_ep_rsp, req_id), 0) \
    X(OFF(struct mrc_ctl_ep_rsp, port), 2) \
    X(OFF(struct mrc_ctl_ep_rsp, rtt), 4) \
    X(OFF(struct mrc_ctl_ep_rsp, adj_svc_time), 8)
// clang-format on

#endif /* DROCE_TESTS_MRCAPI_LAYOUT_CHECKS_H */
