/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-private entry points of droce's libibverbs.so.1, for droce's own libraries that build on
 * the verbs objects (lib_mrc: lib/mrcapi). NOT part of the verbs ABI: exported under the version
 * node DROCE_PRIVATE_1 of lib/verbs/libibverbs.map, C linkage so that the names stay short, and
 * may change with any droce release; no application should call them.
 *
 * They map a verbs handle of an open droce context to the droce object behind it, and let a
 * library above the verbs layer make control calls on a device the way the verbs layer does
 * (one control thread at a time per process, the device's engine between passes).
 */
#pragma once

#include <infiniband/verbs.h>

namespace droce {
class Device;
struct DeviceConfig;
namespace mem {
struct Pd;
} // namespace mem
} // namespace droce

extern "C" {

/** The device behind @p context, or nullptr when @p context is not an open droce context. */
droce::Device* droce_verbs_device(ibv_context* context);

/** The config section of @p context's device (its ports' addresses and prefixes), or nullptr. */
const droce::DeviceConfig* droce_verbs_device_config(ibv_context* context);

/** The droce PD behind @p pd (allocated by ibv_alloc_pd on a droce context), or nullptr. */
droce::mem::Pd* droce_verbs_pd(ibv_pd* pd);

/**
 * Starts a control section on @p context's device: takes the verbs layer's control mutex (every
 * control verb takes it) and holds the device's Device::ControlSection, as the verbs layer's own
 * control verbs do. End it with droce_verbs_control_end on the same thread. No ibv_* call may be
 * made in between (the mutex is not recursive). @return 0, or EINVAL (not an open droce context).
 */
int droce_verbs_control_begin(ibv_context* context);

/** Ends what droce_verbs_control_begin(@p context) started. */
void droce_verbs_control_end(ibv_context* context);

/**
 * Counts an object that depends on @p context (@p delta +1 when it is made, -1 when it is gone):
 * while any is counted, ibv_close_device(@p context) fails with EBUSY instead of freeing what the
 * object refers to (as ibv_dealloc_pd refuses while QPs use the PD). The caller holds a control
 * section on @p context (droce_verbs_control_begin). @return 0, or EINVAL when @p context is not
 * open or the count would go below 0.
 */
int droce_verbs_context_depend(ibv_context* context, int delta);

} // extern "C"
