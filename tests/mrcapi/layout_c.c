/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ABI rows of layout_checks.h evaluated by a C compiler (the MRC API is a C API): checked at
 * compile time (_Static_assert) and handed to layout_test.cc as a table. Also:
 *  - every function of mrc.h and mrc_ctl.h declared again here with the prototype the OCP headers
 *    give it (written out for this test); a conflicting declaration in droce's headers would not
 *    compile;
 *  - the address of every application function, so that this program does not link unless
 *    lib_mrc.so defines each of them (the controller functions are declared only).
 */
#include <mrc.h>
#include <mrc_ctl.h>
#include <stddef.h>
#include <stdint.h>

#include "layout_checks.h"

#define ALIGN(t) _Alignof(t)
#define U32(x) ((uint32_t)(x))
#define MSIZE(t, m) sizeof(((struct t*)0)->m)

#define MRCAPI_STATIC_CHECK(e, want) _Static_assert((long long)(e) == (want), #e);
MRCAPI_LAYOUT_CHECKS(MRCAPI_STATIC_CHECK)

struct mrcapi_layout_row {
    const char* expr;
    long long got;
    long long want;
};
#define MRCAPI_ROW(e, want) {#e, (long long)(e), (want)},
const struct mrcapi_layout_row mrcapi_layout_c[] = {MRCAPI_LAYOUT_CHECKS(MRCAPI_ROW)};
const size_t mrcapi_layout_c_count = sizeof mrcapi_layout_c / sizeof mrcapi_layout_c[0];

/* The application API, prototype by prototype. */
int mrc_query_device_ex(struct ibv_context* context, struct mrc_context* mcontext,
                        struct mrc_device_attr* attr, int* supported);
int mrc_query_device(struct ibv_context* context, struct mrc_device_attr* attr, int* supported);
void mrc_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                       uint32_t* vendor_version, uint32_t* last_supported_vendor_version);
struct mrc_context* mrc_create_context(struct ibv_context* vcontext,
                                       struct mrc_context_attr* context_attr);
int mrc_destroy_context(struct mrc_context* mrc_ctx);
int mrc_create_comp_channel(struct mrc_context* mrc_ctx, struct mrc_comp_channel** channel);
int mrc_get_comp_channel_fd(struct mrc_comp_channel* channel, int* fd);
int mrc_destroy_comp_channel(struct mrc_comp_channel* channel);
struct mrc_cq* mrc_create_cq(struct mrc_context* mrc_ctx, int cqe, void* cq_context,
                             struct mrc_comp_channel* channel, int comp_vector);
int mrc_poll_cq(struct mrc_cq* cq, int num_entries, struct ibv_wc* wc);
int mrc_destroy_cq(struct mrc_cq* cq);
struct mrc_qp_hint* mrc_create_qp_hint(struct mrc_context* mrc_ctx,
                                       struct mrc_qp_hint_init_attr* init_attr);
int mrc_destroy_qp_hint(struct mrc_qp_hint* qp_hint);
int mrc_query_qp_hint(struct mrc_qp_hint* qp_hint, struct mrc_qp_hint_attr* qp_hint_attr,
                      int qp_hint_attr_mask);
int mrc_modify_qp_hint(struct mrc_qp_hint* qp_hint, struct mrc_qp_hint_attr* qp_hint_attr,
                       int qp_hint_attr_mask);
struct mrc_qp* mrc_create_qp(struct mrc_context* mrc_ctx, struct mrc_qp_init_attr* mrc_qp_attr);
int mrc_destroy_qp(struct mrc_qp* qp);
int mrc_query_qp(struct mrc_qp* qp, struct ibv_qp_attr* vattr, int vattr_mask,
                 struct mrc_qp_attr* mrc_attr, int mrc_attr_mask,
                 struct mrc_qp_init_attr* init_attr);
int mrc_modify_qp(struct mrc_qp* qp, struct ibv_qp_attr* vattr, int vattr_mask,
                  struct mrc_qp_attr* mrc_attr, int mrc_attr_mask);
int mrc_get_qpn(struct mrc_qp* qp, uint32_t* qpn);
int mrc_post_recv(struct mrc_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);
int mrc_post_send(struct mrc_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);
int mrc_get_async_event(struct mrc_context* mrc_ctx, struct mrc_async_event* event);
void mrc_ack_async_event(struct mrc_async_event* event);
int mrc_req_notify_cq(struct mrc_cq* cq, int solicited_only);
int mrc_get_cq_event(struct mrc_comp_channel* channel, struct mrc_cq** cq, void** cq_context);
void mrc_ack_cq_events(struct mrc_cq* cq, unsigned int nevents);

/* The controller API (declared, not implemented by droce). */
int mrc_ctl_query_device_ex(struct ibv_context* context, struct mrc_context* mcontext,
                            struct mrc_ctl_device_attr* ctl_attr, int* supported);
int mrc_ctl_query_device(struct ibv_context* context, struct mrc_ctl_device_attr* ctl_attr);
void mrc_ctl_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                           uint32_t* vendor_version, uint32_t* last_supported_vendor_version);
int mrc_ctl_query_port(struct mrc_context* context, uint8_t port_num,
                       struct mrc_ctl_port_attr* attr, int attr_mask);
int mrc_ctl_modify_port(struct mrc_context* context, uint8_t port_num,
                        struct mrc_ctl_port_attr* attr, int attr_mask);
int mrc_ctl_modify_ev_fmt_profile(struct mrc_context* mrc_ctx, uint64_t ev_fmt_profile_id,
                                  struct mrc_ctl_ev_fmt_profile_attr* attr, int attr_mask);
int mrc_ctl_query_ev_fmt_profile(struct mrc_context* mrc_ctx, uint64_t ev_fmt_profile_id,
                                 struct mrc_ctl_ev_fmt_profile_attr* attr, int attr_mask);
int mrc_ctl_modify_ev_profile(struct mrc_context* mrc_ctx, uint64_t ev_profile_id,
                              struct mrc_ctl_ev_profile_attr* attr, int attr_mask);
int mrc_ctl_query_ev_profile(struct mrc_context* mrc_ctx, uint64_t ev_profile_id,
                             struct mrc_ctl_ev_profile_attr* attr, int attr_mask);
int mrc_ctl_modify_cc_profile(struct mrc_context* mrc_ctx, uint64_t cc_profile_id,
                              struct mrc_ctl_cc_profile_attr* attr, int attr_mask);
int mrc_ctl_query_cc_profile(struct mrc_context* mrc_ctx, uint64_t cc_profile_id,
                             struct mrc_ctl_cc_profile_attr* attr, int attr_mask);
struct mrc_cq* mrc_ctl_create_ev_event_cq(struct mrc_context* mrc_ctx, int cqe, void* cq_context,
                                          struct mrc_comp_channel* channel, int comp_vector);
int mrc_ctl_poll_ev_event(struct mrc_cq* ev_cq, int num_entries, struct mrc_ctl_ev_event* ev_event);
int mrc_ctl_ep_batch_send_wait(struct mrc_context* mrc_ctx, uint8_t req_tc,
                               enum mrc_ctl_ep_op_type op_type, struct mrc_ctl_ep_req* req,
                               int num_req, uint32_t rsp_timeout, struct mrc_ctl_ep_rsp* rsp,
                               int* num_rsp);

/* Every application function, by address: lib_mrc.so must define them all. */
typedef void (*mrcapi_fn)(void);
const mrcapi_fn mrcapi_app_functions[] = {
    (mrcapi_fn)mrc_query_device_ex,     (mrcapi_fn)mrc_query_device,
    (mrcapi_fn)mrc_query_version,       (mrcapi_fn)mrc_create_context,
    (mrcapi_fn)mrc_destroy_context,     (mrcapi_fn)mrc_create_comp_channel,
    (mrcapi_fn)mrc_get_comp_channel_fd, (mrcapi_fn)mrc_destroy_comp_channel,
    (mrcapi_fn)mrc_create_cq,           (mrcapi_fn)mrc_poll_cq,
    (mrcapi_fn)mrc_destroy_cq,          (mrcapi_fn)mrc_create_qp_hint,
    (mrcapi_fn)mrc_destroy_qp_hint,     (mrcapi_fn)mrc_query_qp_hint,
    (mrcapi_fn)mrc_modify_qp_hint,      (mrcapi_fn)mrc_create_qp,
    (mrcapi_fn)mrc_destroy_qp,          (mrcapi_fn)mrc_query_qp,
    (mrcapi_fn)mrc_modify_qp,           (mrcapi_fn)mrc_get_qpn,
    (mrcapi_fn)mrc_post_recv,           (mrcapi_fn)mrc_post_send,
    (mrcapi_fn)mrc_get_async_event,     (mrcapi_fn)mrc_ack_async_event,
    (mrcapi_fn)mrc_req_notify_cq,       (mrcapi_fn)mrc_get_cq_event,
    (mrcapi_fn)mrc_ack_cq_events,
};
const size_t mrcapi_app_function_count =
    sizeof mrcapi_app_functions / sizeof mrcapi_app_functions[0];

/* Every controller function, by address: lib_mrc.so must define them all too. */
const mrcapi_fn mrcapi_ctl_functions[] = {
    (mrcapi_fn)mrc_ctl_query_device_ex,       (mrcapi_fn)mrc_ctl_query_device,
    (mrcapi_fn)mrc_ctl_query_version,         (mrcapi_fn)mrc_ctl_query_port,
    (mrcapi_fn)mrc_ctl_modify_port,           (mrcapi_fn)mrc_ctl_modify_ev_fmt_profile,
    (mrcapi_fn)mrc_ctl_query_ev_fmt_profile,  (mrcapi_fn)mrc_ctl_modify_ev_profile,
    (mrcapi_fn)mrc_ctl_query_ev_profile,      (mrcapi_fn)mrc_ctl_modify_cc_profile,
    (mrcapi_fn)mrc_ctl_query_cc_profile,      (mrcapi_fn)mrc_ctl_create_ev_event_cq,
    (mrcapi_fn)mrc_ctl_poll_ev_event,         (mrcapi_fn)mrc_ctl_ep_batch_send_wait,
};
const size_t mrcapi_ctl_function_count =
    sizeof mrcapi_ctl_functions / sizeof mrcapi_ctl_functions[0];

/* The "no EV" entry is a usable C initialiser. */
int mrcapi_ev_unpopulated_ok(void) {
    struct mrc_ctl_ev e = MRC_CTL_EV_UNPOPULATED;
    for (size_t i = 0; i < sizeof e.val; ++i)
        if (e.val[i] != 0) return 0;
    return e.port == 0;
}
