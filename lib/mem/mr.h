/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Protection domains and memory regions: the lkey/rkey table and the one access check every byte
 * movement goes through (IBTA Vol 1 §10.6, §9.7.4.1.x for remote access; C9-88 for zero length).
 *
 * A key is (index << 8) | key byte, as in rxe: the index names the table slot, the key byte is
 * drawn per registration from a generator seeded unpredictably (getrandom) when the table is made,
 * so that keys differ from process to process and a peer cannot forge a frame with a key it was not
 * given except by guessing (one chance in 256 per index). A slot reused gets a key byte different
 * from its previous one, so the key of a deregistered region never names the region registered
 * after it. lkey == rkey for every MR, as in rxe.
 *
 * Thread rules: register/deregister are control-path calls made while the engine does not run
 * concurrently (the caller holds the device's ControlSection); check() and find() are datapath
 * calls, lock free and allocation free.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

namespace droce::mem {

/** A protection domain. Objects carry a pointer to theirs; an MR is usable only through a QP of the
 * same PD. */
struct Pd {
    std::uint32_t handle = 0;
};

/** A registered memory region. Owned by its MrTable; the memory itself stays the application's. */
struct Mr {
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
    const Pd* pd = nullptr;
    std::uint64_t iova = 0;       ///< first virtual address as the peer and the SGEs name it
    std::uint64_t length = 0;     ///< bytes
    std::uint8_t* host = nullptr; ///< host address of iova
    std::uint32_t access = 0;     ///< AccessFlags (mem/access.h)
    bool valid = false;
};

// clang-format off
#define DROCE_MEM_CHECKS(X) \
    X(ok)            /* access allowed */ \
    X(invalid_key)   /* no valid MR has this key (never registered, deregistered, stale key byte) */ \
    X(pd_mismatch)   /* MR belongs to another protection domain */ \
    X(out_of_range)  /* [va, va+len) is not inside the MR, or wraps */ \
    X(access_denied) /* MR lacks the required access flag */
// clang-format on

enum class MemCheck : std::uint8_t {
#define DROCE_MEM_ENUM(name) name,
    DROCE_MEM_CHECKS(DROCE_MEM_ENUM)
#undef DROCE_MEM_ENUM
};
[[nodiscard]] std::string_view to_string(MemCheck c) noexcept;

/**
 * Checks that the process may use @p length bytes at @p addr as a memory region: every page mapped
 * (read from /proc/self/maps), readable, and writable when @p writable (the engine stores into an
 * MR with local write access: receives, READ responses, remote writes and atomics). A kernel RDMA
 * provider pins the pages at registration and fails there (ib_umem_get: EFAULT); droce cannot pin,
 * and without this check a region over unmapped or read-only memory would fault the process at the
 * first access. Control path: it reads /proc/self/maps (call it outside the device's
 * ControlSection). Any thread.
 * @return 0 (usable, or @p length 0, or /proc not mounted: not checked), or EFAULT (a page not
 *         mapped, not readable, or not writable when asked; the range wraps).
 */
[[nodiscard]] int check_host_range(const void* addr, std::uint64_t length, bool writable) noexcept;

class MrTable {
  public:
    /**
     * A table of up to @p capacity regions (indexes 1..capacity; key 0 is never valid). Seeds the
     * key byte generator from getrandom(2) (std::random_device where that fails).
     * @throws std::bad_alloc; std::system_error when neither source of randomness works.
     */
    explicit MrTable(std::uint32_t capacity);
    MrTable(const MrTable&) = delete;
    MrTable& operator=(const MrTable&) = delete;

    /**
     * Registers @p length bytes at host address @p addr, named @p iova by SGEs and peers.
     * @param access AccessFlags (mem/access.h). Remote write or remote atomic without local write
     * is EINVAL (IBTA C10-18.x, as ibv_reg_mr).
     * @param[out] err 0, or EINVAL (null pd, null addr with nonzero length, bad flags, iova+length
     * wraps), ENOMEM (table full).
     * @return the region, or nullptr with *err set.
     */
    [[nodiscard]] Mr* register_mr(const Pd* pd, void* addr, std::uint64_t length,
                                  std::uint64_t iova, std::uint32_t access, int* err) noexcept;

    /**
     * Invalidates @p mr; its keys do not match again, not even after its slot is reused (the next
     * registration there gets another key byte). Null is a no-op.
     * @return 0 or EINVAL (not ours / not valid).
     */
    int deregister(Mr* mr) noexcept;

    /** The valid MR named by @p key, or nullptr. */
    [[nodiscard]] Mr* find(std::uint32_t key) noexcept;

    /** True when a valid MR belongs to @p pd (ibv_dealloc_pd then fails with EBUSY). Control path:
     * O(capacity). */
    [[nodiscard]] bool uses_pd(const Pd* pd) const noexcept;

    /**
     * Checks an access of @p len bytes at @p va through @p key on behalf of a QP in @p pd.
     * @param access_needed AccessFlags the access needs (kAccessLocalWrite for local writes, remote
     *        read/write/atomic for a peer; 0 for a local read, which every MR allows).
     * @param[out] host on ok, host address of @p va.
     * The caller decides zero-length exemptions (C9-88): a len of 0 is still checked here.
     */
    [[nodiscard]] MemCheck check(std::uint32_t key, const Pd* pd, std::uint64_t va,
                                 std::uint64_t len, std::uint32_t access_needed,
                                 std::uint8_t** host) noexcept;

  private:
    /** The next key byte, different from @p previous (the slot's last one). Control path. */
    [[nodiscard]] std::uint8_t next_key_byte(std::uint8_t previous) noexcept;

    struct Slot {
        /** After deregister, lkey/rkey keep the last key (valid false): the next must differ. */
        Mr mr;
    };
    std::uint32_t capacity_;
    std::unique_ptr<Slot[]> slots_;
    std::uint32_t next_free_hint_ = 1;
    std::uint64_t key_state_ = 0; ///< key byte generator state; seeded in the constructor
};

} // namespace droce::mem
