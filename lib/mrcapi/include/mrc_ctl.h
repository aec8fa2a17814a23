/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * droce's declaration of the OCP MRC 1.0 controller API (the companion repository's mrc_ctl.h):
 * droce's own text with the same names, layouts, values and prototypes. The controller API is for
 * one privileged process per node (CAP_NET_ADMIN) that manages what outlives applications: port
 * administrative state, entropy value (EV) format and EV profiles (how packets are sprayed over
 * paths), congestion control (CC) profiles, EV state events and endpoint operations (probes, port
 * status). Applications name the profiles a controller set up when they modify their QPs
 * (mrc_qp_attr.profile).
 *
 * droce implements it in lib_mrc.so for the device of the calling process: droce has no firmware
 * shared between processes, each process that opens the device runs its own engine, so profiles,
 * EV event CQs and port states belong to the process that sets them (droce-mrcctl reaches a running
 * process through its control socket). What droce does not implement: SRv6 EV formats and the
 * NSCC CC algorithm (EOPNOTSUPP), PORT_STATUS_UPDATE endpoint operations (EOPNOTSUPP: droce's MRC
 * QPs send port status themselves), vendor configuration other than all zeros (EOPNOTSUPP). See
 * README.md, "MRC API".
 *
 * Profile states, for every kind of profile: INIT (created, not configured) -> OFFLINE (configured,
 * not in use, may be changed) -> ONLINE (in use; only some changes allowed) -> OFFLINE -> INIT.
 * Functions return 0, or -1 with errno (EINVAL, EBUSY, E2BIG, ENOENT, EIO, EPERM, ...), unless
 * said otherwise.
 */
#ifndef DROCE_MRC_CTL_H
#define DROCE_MRC_CTL_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include <mrc.h>
#include <mrc_ctl_api_ver.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the opaque vendor configuration blobs of the controller structures. */
#define MRC_CTL_MAX_VENDOR_CFG_SIZE 128

/* Largest EV value, in bytes. */
#define MRC_CTL_EV_MAX_BYTES 32

/* An EV entry that holds nothing (a C compound literal). */
#define MRC_CTL_EV_UNPOPULATED ((struct mrc_ctl_ev){.val = {0}, .port = 0})

/* Controller protocol versions, one bit each (0: the provider chooses). */
enum mrc_ctl_protocol_version {
    MRC_CTL_PROTOCOL_VERSION_0 = 0,
    MRC_CTL_PROTOCOL_VERSION_1 = 1 << 0,
};

/* The state of any controller profile (see the top of this file). */
enum mrc_ctl_profile_state {
    MRC_CTL_PROFILE_INIT,
    MRC_CTL_PROFILE_OFFLINE,
    MRC_CTL_PROFILE_ONLINE,
};

/* ------------------------------------------------------------------ device */

/* Optional controller features (mrc_ctl_device_attr.opt_attr). */
enum mrc_ctl_attr_opt {
    MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE = 1 << 0, /* EV profiles changeable while ONLINE */
    MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE = 1 << 1, /* CC profiles changeable while ONLINE */
    MRC_CTL_OPT_CAP_EV_EVENT = 1 << 2,                 /* EV state events are reported */
    /* Explicit EV arrays must be one contiguous range: base, base + 1, ..., base + count - 1. */
    MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE = 1 << 3,
    MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT = 1 << 4, /* exact counts of dropped EV events */
    MRC_CTL_OPT_CAP_EP_OP_EV_PROBE = 1 << 5,            /* the EV probe endpoint operation */
};

/* What the device offers a controller. */
struct mrc_ctl_device_attr {
    /* Controller protocol versions, a mask of enum mrc_ctl_protocol_version bits. */
    uint32_t mrc_ctl_protocol_version;
    struct {
        uint32_t ev_max_fmt_profiles;  /* EV format profiles */
        uint32_t ev_max_profiles;      /* EV profiles */
        uint32_t ev_max_count;         /* EVs over all profiles */
        uint32_t ev_free_count;        /* EVs still free over all profiles */
        uint32_t ev_max_count_profile; /* EVs in one profile (and in one explicit array) */
        uint32_t ev_count_align;       /* explicit EV arrays are a multiple of this long */
        uint32_t ev_max_width;         /* significant bits of an EV value */
        uint32_t ev_fmt_mode_mask;     /* enum mrc_ctl_ev_fmt_mode bits supported */
        uint32_t ev_mode_mask;         /* enum mrc_ctl_ev_mode bits supported */
        uint32_t ev_op_max_entries;    /* entries in one EV operation batch (0: no limit) */
    } ev;
    struct {
        uint32_t cc_max_profiles;
        /* Names of the CC algorithms, NULL-terminated, owned by the library ("uet-1.0-nscc"). */
        const char** algorithms;
    } cc;
    /* Physical ports of this function: bit N is port N (1-based, as ibv_query_port). */
    uint32_t phy_port_mask;
    /* enum mrc_ctl_attr_opt bits. */
    uint32_t opt_attr;
};

/* Controller view of the device; the _ex form (API 1.0.1 on) takes the MRC context too. */
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
int mrc_ctl_query_device_ex(struct ibv_context* context, struct mrc_context* mcontext,
                            struct mrc_ctl_device_attr* ctl_attr, int* supported);
#endif
int mrc_ctl_query_device(struct ibv_context* context, struct mrc_ctl_device_attr* ctl_attr);

/* Controller API versions implemented (current, oldest), and of its vendor part. */
void mrc_ctl_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                           uint32_t* vendor_version, uint32_t* last_supported_vendor_version);

/* ------------------------------------------------------------------ ports */

/* Administrative state of a port. */
enum mrc_ctl_port_admin_state {
    MRC_CTL_PORT_ADMIN_DISABLED = 0, /* reported as IBV_PORT_DOWN */
    MRC_CTL_PORT_ADMIN_ENABLED = 1,
};

/* Which port attributes a query or modify concerns. */
enum mrc_ctl_port_attr_mask {
    MRC_CTL_PORT_ADMIN_STATE = 1 << 0,
};

struct mrc_ctl_port_attr {
    enum mrc_ctl_port_admin_state port_admin_state;
};

/* Reads / sets the administrative state of port @port_num (1-based). */
int mrc_ctl_query_port(struct mrc_context* context, uint8_t port_num,
                       struct mrc_ctl_port_attr* attr, int attr_mask);
int mrc_ctl_modify_port(struct mrc_context* context, uint8_t port_num,
                        struct mrc_ctl_port_attr* attr, int attr_mask);

/* ------------------------------------------------------------------ EV format profiles */

/* Where EV bits go in a packet. */
enum mrc_ctl_ev_fmt_mode {
    MRC_CTL_EV_FMT_MODE_STEV = 1 << 0, /* structured: IPv6 flow label and UDP source port */
    MRC_CTL_EV_FMT_MODE_SRV6 = 1 << 1, /* SRv6 (with an optional SRH) micro-SID encapsulation */
    MRC_CTL_EV_FMT_MODE_UDP = 1 << 2,  /* the UDP source port only */
};

/* What to do with the format fields of an EV format profile. */
enum mrc_ctl_ev_fmt_op {
    MRC_CTL_EV_FMT_OP_MODIFY_FIELDS,
    MRC_CTL_EV_FMT_OP_QUERY_FIELDS,
};

/* Which fields of mrc_ctl_ev_fmt_profile_attr a call concerns. */
enum mrc_ctl_ev_fmt_profile_attr_mask {
    MRC_CTL_EV_FMT_PROFILE_STATE = 1 << 0,
    MRC_CTL_EV_FMT_PROFILE_CUR_STATE = 1 << 1,
    MRC_CTL_EV_FMT_PROFILE_MODE = 1 << 2,
    MRC_CTL_EV_FMT_PROFILE_OP = 1 << 3,
    MRC_CTL_EV_FMT_VENDOR_CFG = -2147483647 - 1, /* bit 31 */
};

/* One field of an EV format: its width in bits. */
struct mrc_ctl_ev_fmt_field {
    uint8_t width;
};

/* An EV format profile: the fields whose concatenation is an EV as it appears in a packet. */
struct mrc_ctl_ev_fmt_profile_attr {
    enum mrc_ctl_profile_state profile_state;     /* the state to move to */
    enum mrc_ctl_profile_state cur_profile_state; /* the state it is in */
    enum mrc_ctl_ev_fmt_mode ev_fmt_mode;
    struct {
        enum mrc_ctl_ev_fmt_op op;
        struct mrc_ctl_ev_fmt_field* fmt_fields;
        int fmt_field_count; /* in: entries of fmt_fields; out: entries needed */
    } ev_fmt_op;
    uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

int mrc_ctl_modify_ev_fmt_profile(struct mrc_context* mrc_ctx, uint64_t ev_fmt_profile_id,
                                  struct mrc_ctl_ev_fmt_profile_attr* attr, int attr_mask);
int mrc_ctl_query_ev_fmt_profile(struct mrc_context* mrc_ctx, uint64_t ev_fmt_profile_id,
                                 struct mrc_ctl_ev_fmt_profile_attr* attr, int attr_mask);

/* ------------------------------------------------------------------ EVs */

/* An EV value: STEV uses the first 4 bytes; SRv6 the SRv6 address then the one-segment SRH one. */
typedef uint8_t mrc_ctl_ev_t[MRC_CTL_EV_MAX_BYTES];

/* An EV and the port (1-based) it leaves on. */
struct mrc_ctl_ev {
    mrc_ctl_ev_t val;
    uint8_t port;
};

/* States of an EV (one bit each, so that they combine into event masks). */
enum mrc_ctl_ev_state {
    MRC_CTL_EV_GOOD = 1 << 0,
    MRC_CTL_EV_ASSUMED_BAD = 1 << 1,
    MRC_CTL_EV_DENIED = 1 << 2,
    MRC_CTL_EV_UNKNOWN = -2147483647 - 1, /* bit 31 */
};

/* ------------------------------------------------------------------ EV profiles */

/* Where a profile's EVs come from. */
enum mrc_ctl_ev_mode {
    MRC_CTL_EV_MODE_AUTO = 1 << 0, /* the provider's own (ECMP and the like) */
    MRC_CTL_EV_MODE_EXP = 1 << 1,  /* an explicit array from the controller */
    MRC_CTL_EV_MODE_GEN = 1 << 2,  /* generated by the device within the fields' limits */
};

/* Operations on the EVs of a profile. */
enum mrc_ctl_ev_op {
    MRC_CTL_EV_OP_REPLACE_EV,
    MRC_CTL_EV_OP_MODIFY_EV_STATE,
    MRC_CTL_EV_OP_QUERY_EV_STATE,
    MRC_CTL_EV_OP_QUERY_EV_ARRAY,
};

/* Operations on the EV fields of a profile. */
enum mrc_ctl_ev_fields_op {
    MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS,
    MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS,
};

/* Which fields of mrc_ctl_ev_profile_attr a call concerns (EV_OP and EV_FIELDS_OP exclude each
 * other). */
enum mrc_ctl_ev_profile_attr_mask {
    MRC_CTL_EV_PROFILE_STATE = 1 << 0,
    MRC_CTL_EV_PROFILE_CUR_STATE = 1 << 1,
    MRC_CTL_EV_PROFILE_MODE = 1 << 2,
    MRC_CTL_EV_PROFILE_FMT_ID = 1 << 3,
    MRC_CTL_EV_PROFILE_COUNT = 1 << 4,
    MRC_CTL_EV_PROFILE_MIN_ACTIVE = 1 << 5,
    MRC_CTL_EV_PROFILE_EVENT_MASK = 1 << 6,
    MRC_CTL_EV_PROFILE_EV_OP = 1 << 7,
    MRC_CTL_EV_PROFILE_EV_FIELDS_OP = 1 << 8,
    MRC_CTL_EV_PROFILE_VENDOR_CFG = -2147483647 - 1, /* bit 31 */
};

/*
 * One field of an EV profile. The field starts as init_val; each set bit of mask, from the most
 * significant, takes the next bit of the EV; the expanded fields are concatenated. Generated EVs
 * keep each field between min_val and max_val.
 */
struct mrc_ctl_ev_field {
    uint32_t width;
    uint32_t init_val;
    uint32_t min_val;
    uint32_t max_val;
    uint32_t mask;
};

/* Flags of an EV operation entry. */
enum mrc_ctl_ev_op_flags {
    MRC_CTL_EV_OP_F_ALL_COPIES = 1 << 0, /* REPLACE_EV: every occurrence, not one */
};

/* One entry of an EV operation (which fields matter depends on the operation). */
struct mrc_ctl_ev_op_entry {
    struct mrc_ctl_ev ev;     /* the EV concerned (QUERY_EV_ARRAY: filled in) */
    struct mrc_ctl_ev ev_new; /* REPLACE_EV: its replacement */
    enum mrc_ctl_ev_state state;
    uint32_t flags; /* enum mrc_ctl_ev_op_flags bits */
};

/* An EV profile: how a set of QPs spreads its packets over paths. */
struct mrc_ctl_ev_profile_attr {
    enum mrc_ctl_profile_state profile_state;     /* the state to move to */
    enum mrc_ctl_profile_state cur_profile_state; /* the state it is in */
    enum mrc_ctl_ev_mode ev_mode;
    uint64_t ev_fmt_profile_id; /* the EV format profile its EVs follow */
    uint32_t ev_count;          /* EVs in the profile (rounded by the provider) */
    uint32_t ev_min_active;     /* EVs that stay usable however many look bad (<= ev_count) */
    int ev_event_mask;          /* enum mrc_ctl_ev_state bits that raise EV events */
    struct {
        enum mrc_ctl_ev_op op;
        struct mrc_ctl_ev_op_entry* entries;
        int entry_count; /* in: entries; out: entries needed */
    } ev_op;
    struct {
        enum mrc_ctl_ev_fields_op op;
        struct mrc_ctl_ev_field* fields;
        int field_count; /* in: fields; out: fields needed */
    } ev_fields_op;
    uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

int mrc_ctl_modify_ev_profile(struct mrc_context* mrc_ctx, uint64_t ev_profile_id,
                              struct mrc_ctl_ev_profile_attr* attr, int attr_mask);
int mrc_ctl_query_ev_profile(struct mrc_context* mrc_ctx, uint64_t ev_profile_id,
                             struct mrc_ctl_ev_profile_attr* attr, int attr_mask);

/* ------------------------------------------------------------------ CC profiles */

/* Which fields of mrc_ctl_cc_profile_attr a call concerns. */
enum mrc_ctl_cc_profile_attr_mask {
    MRC_CTL_CC_PROFILE_STATE = 1 << 0,
    MRC_CTL_CC_PROFILE_CUR_STATE = 1 << 1,
    MRC_CTL_CC_PROFILE_ALGORITHM = 1 << 2,
    MRC_CTL_CC_PROFILE_CONFIG = 1 << 3,
    MRC_CTL_CC_PROFILE_VENDOR_CFG = -2147483647 - 1, /* bit 31 */
};

/* A congestion control profile. */
struct mrc_ctl_cc_profile_attr {
    enum mrc_ctl_profile_state profile_state;
    enum mrc_ctl_profile_state cur_profile_state;
    const char* algorithm; /* one of mrc_ctl_device_attr.cc.algorithms; NULL: no CC */
    const void* cc_config; /* the algorithm's settings (struct mrc_ctl_cc_nscc_cfg for NSCC) */
    uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

/* Settings of NSCC (UET 1.0 network-signalled congestion control). */
struct mrc_ctl_cc_nscc_cfg {
    uint8_t disable_qa;               /* non-zero: quick adapt off */
    uint32_t adjust_bytes_threshold;  /* bytes */
    uint32_t adjust_period_threshold; /* ns */
    uint32_t base_rtt;                /* ns */
    float eta;
    float fi;
    float fi_scale;
    float gamma;
    float max_md_jump;
    uint32_t max_cwnd; /* bytes */
    uint8_t qa_gate;
    uint32_t qa_threshold; /* ns */
    uint32_t target_delay; /* ns */
};

int mrc_ctl_modify_cc_profile(struct mrc_context* mrc_ctx, uint64_t cc_profile_id,
                              struct mrc_ctl_cc_profile_attr* attr, int attr_mask);
int mrc_ctl_query_cc_profile(struct mrc_context* mrc_ctx, uint64_t cc_profile_id,
                             struct mrc_ctl_cc_profile_attr* attr, int attr_mask);

/* ------------------------------------------------------------------ EV events */

/* An EV changed state (one the profile's event mask watches). */
struct mrc_ctl_ev_event {
    uint64_t profile_id;
    struct mrc_ctl_ev ev;
    /* Events lost since the previous one: a count with EV_EVENT_PRECISE_DROP_CNT, else 0 or 1. */
    uint32_t drop_count;
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
    enum mrc_ctl_ev_state state; /* the new state (controller API 1.0.1 on) */
#endif
};

/* A CQ that receives EV events (it never overruns). NULL with errno on failure. */
struct mrc_cq* mrc_ctl_create_ev_event_cq(struct mrc_context* mrc_ctx, int cqe, void* cq_context,
                                          struct mrc_comp_channel* channel, int comp_vector);

/* Takes up to @num_entries EV events: how many, or a negative errno number. */
int mrc_ctl_poll_ev_event(struct mrc_cq* ev_cq, int num_entries, struct mrc_ctl_ev_event* ev_event);

/* ------------------------------------------------------------------ endpoint operations */

enum mrc_ctl_ep_op_type {
    MRC_CTL_EP_OP_EV_PROBE,           /* probe a path */
    MRC_CTL_EP_OP_PORT_STATUS_UPDATE, /* tell a peer which ports are up */
};

/* One endpoint operation request. */
struct mrc_ctl_ep_req {
    uint16_t req_id;    /* the caller's id, unique among requests in flight */
    union ibv_gid sgid; /* RoCE v2 GIDs only */
    union ibv_gid dgid;
    enum mrc_ctl_ev_fmt_mode ev_fmt_mode;
    struct mrc_ctl_ev req_ev; /* the path (EV and port) to use */
    union {
        struct {
            uint32_t port_status; /* mask of ports that are up, bit N = port N (1-based) */
        } port_status_update;
    } op;
};

/* One endpoint operation response. */
struct mrc_ctl_ep_rsp {
    uint16_t req_id;
    uint8_t port;         /* where it arrived (1-based) */
    unsigned int rtt;     /* ns */
    uint8_t adj_svc_time; /* non-zero: rtt has the responder's service time taken out */
};

/*
 * Sends @num_req requests of one kind with traffic class @req_tc and waits up to @rsp_timeout ns
 * for the responses, returned in arrival order in @rsp (*num_rsp of them).
 */
int mrc_ctl_ep_batch_send_wait(struct mrc_context* mrc_ctx, uint8_t req_tc,
                               enum mrc_ctl_ep_op_type op_type, struct mrc_ctl_ep_req* req,
                               int num_req, uint32_t rsp_timeout, struct mrc_ctl_ep_rsp* rsp,
                               int* num_rsp);

#ifdef __cplusplus
}
#endif

#endif /* DROCE_MRC_CTL_H */
