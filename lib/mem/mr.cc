/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The lkey/rkey table. Control path (register/deregister) scans for a free slot; the datapath
 * (find/check) is a shift, a bounds test and a compare: no allocation, no locks, no exceptions.
 */
#include "mr.h"

#include <cerrno>
#include <cstdint>
#include <limits>
#include <memory>

#include "mem/access.h"

namespace droce::mem {

namespace {

constexpr unsigned kTagBits = 8;
constexpr std::uint32_t kTagMask = (1u << kTagBits) - 1u;
/** The index must fit in the 24 key bits above the tag. */
constexpr std::uint32_t kMaxIndex = std::numeric_limits<std::uint32_t>::max() >> kTagBits;

constexpr std::uint32_t kRemoteNeedsLocalWrite = kAccessRemoteWrite | kAccessRemoteAtomic;
/** Access bits ibv_reg_mr defines below the optional range (IBV_ACCESS_LOCAL_WRITE .. HUGETLB). */
constexpr std::uint32_t kKnownAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                       kAccessRemoteAtomic | kAccessMwBind | kAccessZeroBased |
                                       kAccessOnDemand | kAccessHugetlb;
/** IBV_ACCESS_OPTIONAL_RANGE: bits 20..29, ignored when unsupported. */
constexpr std::uint32_t kOptionalAccessRange = 0x3ffu << 20;

constexpr std::uint32_t make_key(std::uint32_t index, std::uint8_t tag) noexcept {
    return (index << kTagBits) | tag;
}

void set_err(int* err, int value) noexcept {
    if (err != nullptr) *err = value;
}

} // namespace

std::string_view to_string(MemCheck c) noexcept {
    switch (c) {
#define DROCE_MEM_NAME(name)                                                                       \
    case MemCheck::name:                                                                           \
        return #name;
        DROCE_MEM_CHECKS(DROCE_MEM_NAME)
#undef DROCE_MEM_NAME
    }
    return "unknown";
}

MrTable::MrTable(std::uint32_t capacity)
    : capacity_(capacity < kMaxIndex ? capacity : kMaxIndex),
      // Slot 0 exists but is never handed out, so key 0 (index 0) can never be valid.
      slots_(std::make_unique<Slot[]>(static_cast<std::size_t>(capacity_) + 1)) {}

Mr* MrTable::register_mr(const Pd* pd, void* addr, std::uint64_t length, std::uint64_t iova,
                         std::uint32_t access, int* err) noexcept {
    if (pd == nullptr || (addr == nullptr && length != 0) ||
        length > std::numeric_limits<std::uint64_t>::max() - iova) {
        set_err(err, EINVAL);
        return nullptr;
    }
    // ibv_reg_mr: unknown access bits are EINVAL, except the optional range (bits 20..29,
    // IBV_ACCESS_OPTIONAL_RANGE), which a provider may ignore.
    if ((access & ~(kKnownAccess | kOptionalAccessRange)) != 0) {
        set_err(err, EINVAL);
        return nullptr;
    }
    // IBTA C10-18.x / ibv_reg_mr: remote write or remote atomic access requires local write.
    if ((access & kRemoteNeedsLocalWrite) != 0 && (access & kAccessLocalWrite) == 0) {
        set_err(err, EINVAL);
        return nullptr;
    }

    // Find a free index, starting at the hint so that a just-freed index is reused first and the
    // tag makes its old key stale.
    std::uint32_t index = 0;
    for (std::uint32_t n = 0, i = next_free_hint_; n < capacity_; ++n) {
        if (i == 0 || i > capacity_) i = 1;
        if (!slots_[i].mr.valid) {
            index = i;
            break;
        }
        ++i;
    }
    if (index == 0) {
        set_err(err, ENOMEM);
        return nullptr;
    }

    Slot& slot = slots_[index];
    ++slot.tag; // every reuse of the index gets a fresh key (wraps after 256 registrations)
    const std::uint32_t key = make_key(index, slot.tag);
    slot.mr = Mr{
        .lkey = key,
        .rkey = key,
        .pd = pd,
        .iova = iova,
        .length = length,
        .host = static_cast<std::uint8_t*>(addr),
        .access = access,
        .valid = true,
    };
    next_free_hint_ = index + 1;
    set_err(err, 0);
    return &slot.mr;
}

int MrTable::deregister(Mr* mr) noexcept {
    if (mr == nullptr) return 0;
    // Identify the slot from the key rather than by comparing unrelated pointers, then make sure
    // the caller handed us that very slot.
    const std::uint32_t index = mr->lkey >> kTagBits;
    if (index == 0 || index > capacity_ || &slots_[index].mr != mr || !mr->valid) return EINVAL;
    const std::uint32_t old_key = mr->lkey;
    *mr = Mr{};
    mr->lkey = old_key; // kept for debugging; valid == false makes it unusable
    mr->rkey = old_key;
    next_free_hint_ = index;
    return 0;
}

Mr* MrTable::find(std::uint32_t key) noexcept {
    const std::uint32_t index = key >> kTagBits;
    if (index == 0 || index > capacity_) return nullptr;
    Slot& slot = slots_[index];
    if (!slot.mr.valid || slot.tag != (key & kTagMask)) return nullptr;
    return &slot.mr;
}

bool MrTable::uses_pd(const Pd* pd) const noexcept {
    for (std::uint32_t i = 1; i <= capacity_; ++i)
        if (slots_[i].mr.valid && slots_[i].mr.pd == pd) return true;
    return false;
}

MemCheck MrTable::check(std::uint32_t key, const Pd* pd, std::uint64_t va, std::uint64_t len,
                        std::uint32_t access_needed, std::uint8_t** host) noexcept {
    const Mr* mr = find(key);
    if (mr == nullptr) return MemCheck::invalid_key;
    if (pd != mr->pd) return MemCheck::pd_mismatch;
    // [va, va+len) inside [iova, iova+length), written so that nothing can overflow:
    // va >= iova, len <= length, and the offset leaves room for len.
    if (va < mr->iova || len > mr->length || va - mr->iova > mr->length - len)
        return MemCheck::out_of_range;
    if ((access_needed & ~mr->access) != 0) return MemCheck::access_denied;
    if (host != nullptr) *host = mr->host + (va - mr->iova);
    return MemCheck::ok;
}

} // namespace droce::mem
