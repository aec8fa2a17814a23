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
#include <random>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include <sys/random.h>

#include "mem/access.h"

namespace droce::mem {

namespace {

constexpr unsigned kKeyBits = 8;
constexpr std::uint32_t kKeyMask = (1u << kKeyBits) - 1u;
/** The index must fit in the 24 key bits above the key byte. */
constexpr std::uint32_t kMaxIndex = std::numeric_limits<std::uint32_t>::max() >> kKeyBits;

constexpr std::uint32_t kRemoteNeedsLocalWrite = kAccessRemoteWrite | kAccessRemoteAtomic;
/** Access bits ibv_reg_mr defines below the optional range (IBV_ACCESS_LOCAL_WRITE .. HUGETLB). */
constexpr std::uint32_t kKnownAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                       kAccessRemoteAtomic | kAccessMwBind | kAccessZeroBased |
                                       kAccessOnDemand | kAccessHugetlb;
/** IBV_ACCESS_OPTIONAL_RANGE: bits 20..29, ignored when unsupported. */
constexpr std::uint32_t kOptionalAccessRange = 0x3ffu << 20;

constexpr std::uint32_t make_key(std::uint32_t index, std::uint8_t key_byte) noexcept {
    return (index << kKeyBits) | key_byte;
}

std::uint64_t random_seed() {
    std::uint64_t seed = 0;
    ssize_t n;
    do {
        n = getrandom(&seed, sizeof seed, 0);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof seed)) return seed;
    std::random_device rd; // a kernel without getrandom, or a seccomp filter refusing it
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
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
      slots_(std::make_unique<Slot[]>(static_cast<std::size_t>(capacity_) + 1)),
      key_state_(random_seed()) {}

std::uint8_t MrTable::next_key_byte(std::uint8_t previous) noexcept {
    // SplitMix64 (Steele, Lea, Flood 2014): every seed gives a full-period sequence and each output
    // is a strong mix of the state, so the bytes a peer sees tell it little about the next ones.
    // Not a cryptographic generator; the key byte only has 8 bits to guess anyway, as in rxe.
    std::uint8_t b;
    do {
        std::uint64_t z = (key_state_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        b = static_cast<std::uint8_t>((z ^ (z >> 31)) >> 56);
    } while (b == previous);
    return b;
}

int check_host_range(const void* addr, std::uint64_t length, bool writable) noexcept {
    if (length == 0) return 0;
    const auto start = reinterpret_cast<std::uintptr_t>(addr);
    if (length > std::numeric_limits<std::uintptr_t>::max() - start) return EFAULT;
    const std::uintptr_t end = start + length;
    std::FILE* maps = std::fopen("/proc/self/maps", "re");
    if (maps == nullptr) return 0;
    // The lines come in address order: walk them with the first address not yet covered.
    std::uintptr_t covered = start;
    char* line = nullptr;
    std::size_t cap = 0;
    int result = EFAULT;
    while (::getline(&line, &cap, maps) > 0) {
        std::uintptr_t lo = 0, hi = 0;
        char perms[5] = {};
        if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &lo, &hi, perms) != 3) break;
        if (hi <= covered) continue;
        if (lo > covered) break; // a hole
        if (perms[0] != 'r' || (writable && perms[1] != 'w')) break;
        covered = hi;
        if (covered >= end) {
            result = 0;
            break;
        }
    }
    std::free(line);
    std::fclose(maps);
    return result;
}

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

    // Find a free index, starting at the hint: a just-freed index is reused first, with a key byte
    // other than its last, so its old key is stale at once.
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
    // A never used slot has key 0 and no previous key byte to avoid, but 0 is as good as any to
    // skip.
    const std::uint32_t key =
        make_key(index, next_key_byte(static_cast<std::uint8_t>(slot.mr.lkey & kKeyMask)));
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
    const std::uint32_t index = mr->lkey >> kKeyBits;
    if (index == 0 || index > capacity_ || &slots_[index].mr != mr || !mr->valid) return EINVAL;
    const std::uint32_t old_key = mr->lkey;
    *mr = Mr{};
    mr->lkey = old_key; // kept for debugging; valid == false makes it unusable
    mr->rkey = old_key;
    next_free_hint_ = index;
    return 0;
}

Mr* MrTable::find(std::uint32_t key) noexcept {
    const std::uint32_t index = key >> kKeyBits;
    if (index == 0 || index > capacity_) return nullptr;
    Slot& slot = slots_[index];
    if (!slot.mr.valid || slot.mr.lkey != key) return nullptr;
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
