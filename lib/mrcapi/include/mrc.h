/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * droce's declaration of the OCP MRC 1.0 application API (the companion repository of the OCP
 * Multipath Reliable Connection specification calls its header mrc.h). This file is droce's own
 * text: the names, struct layouts, enum values and prototypes are those of that API, so that a
 * program written against the OCP headers builds against this one, and a program built against
 * either runs on droce's lib_mrc.so (tests/mrcapi/layout_test checks every size, offset and value).
 *
 * The API follows libibverbs: devices, contexts, protection domains and memory regions come from
 * libibverbs (ibv_open_device, ibv_alloc_pd, ibv_reg_mr); MRC adds its own context, completion
 * queues and channels, queue pairs and QP hints. An MRC QP carries RDMA WRITE and RDMA WRITE with
 * immediate only, sprayed over every port (plane) of the device; receives for immediates are
 * posted in advance (there is no RNR).
 *
 * Return values, as the API specifies them: functions documented "-1 on failure" return -1 and
 * set errno; those documented as "like ibv_X()" return what ibv_X returns (an errno number for
 * modify, query, destroy, post_send, req_notify; NULL with errno for creators). droce's lib_mrc
 * also sets errno whenever it returns an errno number. See README.md, "MRC API", for what droce
 * supports.
 */
#ifndef DROCE_MRC_H
#define DROCE_MRC_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include <mrc_api_ver.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the opaque vendor configuration blobs in QP hints and QP attributes. */
#define MRC_MAX_VENDOR_CFG_SIZE 128

/*
 * MRC wire protocol versions, one bit each. A device lists the ones it speaks as a bit mask in
 * mrc_device_attr.mrc_protocol_version; a QP asks for one (or 0: the provider's choice) in
 * mrc_qp_init_attr.protocol_version.
 */
enum mrc_protocol_version {
    MRC_PROTOCOL_VERSION_0 = 0, /* not specified: the provider's default */
    MRC_PROTOCOL_VERSION_1 = 1 << 0,
};

/* Opaque objects of the library. */
struct mrc_context;
struct mrc_qp_hint;
struct mrc_qp;
struct mrc_cq;
struct mrc_comp_channel;

/* Optional device features (mrc_device_attr.cap). */
enum mrc_device_cap {
    MRC_DEVICE_CAP_TRIM_NACK = 1 << 0,   /* answers a trimmed packet with a NACK */
    MRC_DEVICE_CAP_DYNAMIC_MPR = 1 << 1, /* can change MPR at run time */
    MRC_DEVICE_CAP_SVC_TIME = 1 << 2,    /* reports the responder's service time */
};

/* What an MRC device can do (mrc_query_device). */
struct mrc_device_attr {
    /* Wire versions spoken, a mask of enum mrc_protocol_version bits (0: the provider chooses). */
    uint32_t mrc_protocol_version;
    struct {
        uint16_t max_wimm;      /* largest max_wimm a QP may ask for (requester side) */
        uint16_t max_wimm_dest; /* largest max_wimm_dest (responder side) */
    } wimm_attr;
    struct {
        uint8_t max_mpr;        /* largest MPR, in units of 128 PSNs (either side) */
        uint8_t mpr_resolution; /* MPR granularity, in units of 128 PSNs */
    } mpr_attr;
    struct {
        uint32_t max_qp_hint; /* QP hints the device can hold */
    } qp_attr;
    uint32_t cap; /* enum mrc_device_cap bits */
};

/*
 * Whether @context's device does MRC (*supported non-zero) and what it can do. The _ex form takes
 * the MRC context as well (NULL allowed) and exists from API 1.0.1 on; the plain form answers with
 * 1.0.0 semantics. Both: 0, or -1 with errno.
 */
#if MRC_API_VER_USED >= MRC_API_VER(1, 0, 1)
int mrc_query_device_ex(struct ibv_context* context, struct mrc_context* mcontext,
                        struct mrc_device_attr* attr, int* supported);
#endif
int mrc_query_device(struct ibv_context* context, struct mrc_device_attr* attr, int* supported);

/*
 * The API versions the library implements (current and oldest accepted) and the same for its
 * vendor part, encoded with MRC_API_VER. Any pointer may be NULL. May be called before anything
 * else.
 */
void mrc_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                       uint32_t* vendor_version, uint32_t* last_supported_vendor_version);

/* What the application says about itself when it creates a context; 0 means "not stated". */
struct mrc_context_attr {
    uint32_t mrc_api_version_used;        /* MRC_API_VER_USED of the application */
    uint32_t mrc_vendor_api_version_used; /* MRC_VENDOR_API_VER_USED of the application */
};

/*
 * An MRC context on an open verbs context: the parent of every other MRC object, which it keeps
 * track of. @context_attr may be NULL. Returns NULL with errno on failure.
 */
struct mrc_context* mrc_create_context(struct ibv_context* vcontext,
                                       struct mrc_context_attr* context_attr);

/* Destroys a context (and whatever the application left in it). 0, or -1 with errno. */
int mrc_destroy_context(struct mrc_context* mrc_ctx);

/* A completion channel. 0 with *channel set, or an error as ibv_create_comp_channel gives. */
int mrc_create_comp_channel(struct mrc_context* mrc_ctx, struct mrc_comp_channel** channel);

/* The file descriptor that becomes readable when the channel has an event. 0, or -1 with errno. */
int mrc_get_comp_channel_fd(struct mrc_comp_channel* channel, int* fd);

/* Destroys a channel no CQ uses any more. 0, or an error as ibv_destroy_comp_channel gives. */
int mrc_destroy_comp_channel(struct mrc_comp_channel* channel);

/*
 * A completion queue of at least @cqe entries, optionally tied to @channel. NULL with errno as
 * ibv_create_cq on failure.
 */
struct mrc_cq* mrc_create_cq(struct mrc_context* mrc_ctx, int cqe, void* cq_context,
                             struct mrc_comp_channel* channel, int comp_vector);

/*
 * Takes up to @num_entries completions, as ibv_poll_cq. Returns how many (fewer than asked: the CQ
 * is now empty), or -1 on error.
 */
int mrc_poll_cq(struct mrc_cq* cq, int num_entries, struct ibv_wc* wc);

/* Destroys a CQ (waits until its completion events are acknowledged). As ibv_destroy_cq. */
int mrc_destroy_cq(struct mrc_cq* cq);

/* What the application expects of the QPs that share a hint (advice to the provider). */
struct mrc_qp_hint_attr {
    /* QPs of this hint sending to one peer (one destination IP) at the same time. */
    int num_qps_per_peer;
    /* Distinct peers (destination IPs) the QPs of this hint send to at the same time. */
    int num_send_peers;
    /* Remote QPs sending toward the same peer as this QP: the incast its target sees. */
    int num_remote_recv_peers;
    /* Provider-specific hint bytes. */
    uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE];
};

/* Which fields of mrc_qp_hint_attr a query or modify of a hint concerns. */
enum mrc_qp_hint_attr_mask {
    MRC_QP_HINT_NUM_QPS_PER_PEER = 1 << 0,
    MRC_QP_HINT_NUM_SEND_PEERS = 1 << 1,
    MRC_QP_HINT_NUM_REMOTE_RECV_PEERS = 1 << 2,
    MRC_QP_HINT_VENDOR_CFG = -2147483647 - 1, /* bit 31 */
};

/* The attributes a hint is created with. */
struct mrc_qp_hint_init_attr {
    struct mrc_qp_hint_attr attr;
};

/* A QP hint. Returns NULL with errno on failure. */
struct mrc_qp_hint* mrc_create_qp_hint(struct mrc_context* mrc_ctx,
                                       struct mrc_qp_hint_init_attr* init_attr);

/* Destroys a hint. 0, or -1 with errno (EINVAL; EBUSY while a QP refers to it). */
int mrc_destroy_qp_hint(struct mrc_qp_hint* qp_hint);

/* Reads the fields of a hint named by @qp_hint_attr_mask. 0, or -1 with errno EINVAL. */
int mrc_query_qp_hint(struct mrc_qp_hint* qp_hint, struct mrc_qp_hint_attr* qp_hint_attr,
                      int qp_hint_attr_mask);

/* Changes the fields of a hint named by @qp_hint_attr_mask. 0, or -1 with errno EINVAL. */
int mrc_modify_qp_hint(struct mrc_qp_hint* qp_hint, struct mrc_qp_hint_attr* qp_hint_attr,
                       int qp_hint_attr_mask);

/* What an MRC QP is created with. */
struct mrc_qp_init_attr {
    void* qp_context;
    struct mrc_cq* send_cq;
    struct mrc_cq* recv_cq;
    struct ibv_qp_cap cap; /* updated with what was granted */
    int sq_sig_all;
    struct ibv_pd* pd;
    uint64_t send_ops_flags; /* enum ibv_qp_create_send_ops_flags bits */
    /* The wire version to speak: one enum mrc_protocol_version bit, or 0 for the default. */
    enum mrc_protocol_version protocol_version;
};

/* A QP in RESET. NULL with errno as ibv_create_qp on failure. */
struct mrc_qp* mrc_create_qp(struct mrc_context* mrc_ctx, struct mrc_qp_init_attr* mrc_qp_attr);

/* Destroys a QP. As ibv_destroy_qp. */
int mrc_destroy_qp(struct mrc_qp* qp);

/*
 * Which fields of mrc_qp_attr a modify or query concerns. Before INIT: the hint and the EV and CC
 * profiles; before RTR: the responder's max_wimm_dest, mpr_dest and the capability bits; before
 * RTS: the requester's max_wimm, mpr, retry counts and ACK timeout.
 */
enum mrc_qp_attr_mask {
    MRC_QP_MAX_WIMM = 1 << 0,            /* wimm.max_wimm */
    MRC_QP_MAX_WIMM_DEST = 1 << 1,       /* wimm.max_wimm_dest */
    MRC_QP_MPR = 1 << 2,                 /* mpr.mpr */
    MRC_QP_MPR_DEST = 1 << 3,            /* mpr.mpr_dest */
    MRC_QP_TIMEOUT = 1 << 4,             /* timeout */
    MRC_QP_EV_PROFILE_ID = 1 << 5,       /* profile.ev_profile_id */
    MRC_QP_CC_PROFILE_ID = 1 << 6,       /* profile.cc_profile_id */
    MRC_QP_HINT = 1 << 7,                /* qp_hint */
    MRC_QP_RETRY_CNT = 1 << 8,           /* retry.linear_cnt and retry.exp_cnt */
    MRC_QP_CAP = 1 << 9,                 /* cap */
    MRC_QP_VENDOR_CFG = -2147483647 - 1, /* bit 31: vendor_cfg */
};

/* Per-QP feature switches (mrc_qp_attr.cap). */
enum mrc_qp_cap {
    /* The peer cannot take trim NACKs: this QP's responder does not send them. */
    MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED = 1 << 0,
    /* Dynamic MPR on this QP, both roles (in effect only when both ends ask). */
    MRC_QP_CAP_DYNAMIC_MPR = 1 << 1,
    /* The peer's responder does not report its service time. */
    MRC_QP_CAP_SVC_TIME_DEST_UNSUPPORTED = 1 << 2,
};

/* The MRC attributes of a QP (mrc_modify_qp, mrc_query_qp). */
struct mrc_qp_attr {
    struct {
        uint8_t mpr;      /* requester's MPR, units of 128 PSNs */
        uint8_t mpr_dest; /* responder's MPR, units of 128 PSNs */
    } mpr;
    struct {
        uint16_t max_wimm;      /* WRITEs with immediate in flight as requester */
        uint16_t max_wimm_dest; /* WRITEs with immediate held as responder */
    } wimm;
    /* ACK timeout: 1.024 us x 2^timeout, at most 24 (about 17 s). */
    uint8_t timeout;
    /* Profiles a controller programmed (learned out of band), by id. */
    struct {
        uint64_t ev_profile_id;
        uint64_t cc_profile_id;
    } profile;
    struct {
        uint8_t linear_cnt; /* retries at the base timeout, at most 7 */
        uint8_t exp_cnt;    /* then retries with the timeout doubling, at most 25 (25: no limit) */
    } retry;
    /* The QP's hint, or NULL for none. */
    struct mrc_qp_hint* qp_hint;
    /* enum mrc_qp_cap bits. */
    uint32_t cap;
    /* Provider-specific configuration bytes. */
    uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE];
};

/*
 * Reads a QP: verbs attributes into @vattr, the MRC ones named by @mrc_attr_mask into @mrc_attr,
 * and what it was created with into @init_attr. As ibv_query_qp.
 */
int mrc_query_qp(struct mrc_qp* qp, struct ibv_qp_attr* vattr, int vattr_mask,
                 struct mrc_qp_attr* mrc_attr, int mrc_attr_mask,
                 struct mrc_qp_init_attr* init_attr);

/*
 * Changes a QP's state and attributes: verbs ones (@vattr, @vattr_mask: the state, its assertion,
 * P_Key index, access flags, the peer's address (the source GID is the context's GID of the
 * given index), path MTU, destination QPN, PSNs) and MRC ones (@mrc_attr, @mrc_attr_mask). The
 * verbs port, timeout, retry and RNR counts, RDMA-read depths, alternate path and migration state
 * are not MRC attributes (the MRC ones replace them). As ibv_modify_qp.
 */
int mrc_modify_qp(struct mrc_qp* qp, struct ibv_qp_attr* vattr, int vattr_mask,
                  struct mrc_qp_attr* mrc_attr, int mrc_attr_mask);

/* The QP number. 0, or -1 with errno. */
int mrc_get_qpn(struct mrc_qp* qp, uint32_t* qpn);

/*
 * Posts receives, which WRITEs with immediate consume (their data goes where the WRITE says, not
 * into the receive buffers). 0, or -1 with errno and *bad_wr at the first one not posted.
 */
int mrc_post_recv(struct mrc_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);

/* Posts RDMA WRITEs and RDMA WRITEs with immediate. As ibv_post_send. */
int mrc_post_send(struct mrc_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);

/* An asynchronous event: what it is about, and which kind. */
struct mrc_async_event {
    union {
        struct mrc_cq* cq;
        struct mrc_qp* qp;
        int port_num;
    } element;
    enum ibv_event_type event_type;
};

/* Waits for the next asynchronous event of the context. As ibv_get_async_event. */
int mrc_get_async_event(struct mrc_context* mrc_ctx, struct mrc_async_event* event);

/* Acknowledges an event mrc_get_async_event returned. */
void mrc_ack_async_event(struct mrc_async_event* event);

/* Asks for one completion event on the CQ's channel. As ibv_req_notify_cq. */
int mrc_req_notify_cq(struct mrc_cq* cq, int solicited_only);

/* Waits for the next completion event on @channel. 0, or -1 with errno. */
int mrc_get_cq_event(struct mrc_comp_channel* channel, struct mrc_cq** cq, void** cq_context);

/* Acknowledges @nevents completion events of @cq. */
void mrc_ack_cq_events(struct mrc_cq* cq, unsigned int nevents);

#ifdef __cplusplus
}
#endif

#endif /* DROCE_MRC_H */
