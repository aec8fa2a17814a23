/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The droce-private entry points of libibverbs.so.1 (droce_private.h): the droce objects behind
 * verbs handles, and control sections for droce's libraries above the verbs layer (lib_mrc).
 * Exported under DROCE_PRIVATE_1, not part of the verbs ABI.
 */
#include "droce_private.h"

#include <cerrno>

#include "provider.h"

using namespace droce;
using namespace droce::verbs;

extern "C" Device* droce_verbs_device(ibv_context* context) {
    std::lock_guard<std::mutex> g(provider().mu);
    VContext* c = open_context(context);
    return c ? c->dev : nullptr;
}

extern "C" const DeviceConfig* droce_verbs_device_config(ibv_context* context) {
    std::lock_guard<std::mutex> g(provider().mu);
    VContext* c = open_context(context);
    return c ? &c->vdev->cfg : nullptr;
}

extern "C" mem::Pd* droce_verbs_pd(ibv_pd* pd) {
    if (!pd) return nullptr;
    std::lock_guard<std::mutex> g(provider().mu);
    if (!open_context(pd->context)) return nullptr;
    return from_ibv<VPd>(pd)->native;
}

extern "C" int droce_verbs_control_begin(ibv_context* context) {
    Provider& p = provider();
    p.mu.lock();
    VContext* c = open_context(context);
    if (!c) {
        p.mu.unlock();
        return EINVAL;
    }
    c->dev->begin_control();
    return 0;
}

extern "C" void droce_verbs_control_end(ibv_context* context) {
    // The caller holds the mutex since droce_verbs_control_begin: the context list is as it was.
    VContext* c = open_context(context);
    if (c) c->dev->end_control();
    provider().mu.unlock();
}

extern "C" int droce_verbs_context_depend(ibv_context* context, int delta) {
    // The caller holds provider().mu (its control section): the context list is stable.
    VContext* c = open_context(context);
    if (!c || (delta < 0 && c->dependents < static_cast<unsigned>(-delta))) return EINVAL;
    c->dependents = static_cast<unsigned>(static_cast<int>(c->dependents) + delta);
    return 0;
}
