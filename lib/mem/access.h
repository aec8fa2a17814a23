/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Access flags of a memory region or a QP: the values of ibv_access_flags (rdma-core
 * infiniband/verbs.h; IBTA Vol 1 §10.6.3.1 memory access rights, §11.2.4.2 QP access flags).
 */
#pragma once

#include <cstdint>

namespace droce::mem {

/** Access flags of an MR or a QP (ibv_access_flags values). */
enum AccessFlags : std::uint32_t {
    kAccessLocalWrite = 1u << 0,
    kAccessRemoteWrite = 1u << 1,
    kAccessRemoteRead = 1u << 2,
    kAccessRemoteAtomic = 1u << 3,
    kAccessMwBind = 1u << 4,
    kAccessZeroBased = 1u << 5,
    kAccessOnDemand = 1u << 6,
    kAccessHugetlb = 1u << 7,
    kAccessRelaxedOrdering = 1u << 20,
};

} // namespace droce::mem
