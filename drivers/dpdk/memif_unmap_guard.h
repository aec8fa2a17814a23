/* SPDX-License-Identifier: BSD-3-Clause */
#pragma once
/**
 * @file
 * Holds net_memif's unmapping of a port's shared memory until the port's receive or transmit burst
 * in flight has ended.
 *
 * When a memif peer leaves, DPDK 22.11's net_memif handles it on the EAL interrupt thread:
 * memif_disconnect() clears the port's connected flag, closes the control channel and the queues'
 * event fds, then unmaps the shared regions, with no lock against the datapath. A receive burst
 * that read the flag before it was cleared goes on copying out of the regions; if they are gone by
 * then, the engine thread dies of SIGSEGV in librte_net_memif. In a running process the window is
 * microseconds; in one that was held inside a burst (gdb attached, which lets the threads go one by
 * one; SIGSTOP; a starved core) it is the whole pause: gdb attached to a memif server during a
 * transfer whose client left meanwhile crashed it in 3 of 4 tries (2026-12-04).
 *
 * The guard: every burst on a memif port runs inside a MemifBurst, which makes the port's slot
 * sequence odd for its duration; net_memif's calls to munmap (and only net_memif's: its entry in
 * the plugin's global offset table is pointed at droce's function) first wait until no slot is odd
 * with the sequence it had, then unmap. The connected flag is cleared before the unmap, and a burst
 * that starts afterwards returns at once, so only bursts already in flight are waited for. The
 * order is Dekker's, asymmetric: a burst stores its odd sequence, then (a compiler barrier) the PMD
 * reads the flag; the unmapper, after the PMD cleared the flag, has every thread of the process
 * pass a full memory barrier (membarrier(2), MEMBARRIER_CMD_PRIVATE_EXPEDITED), then reads the
 * sequences. Either the burst sees the flag cleared or the unmapper sees the burst. Where the
 * kernel refuses membarrier, the burst's increment is a locked add and the unmapper fences.
 */
#include <atomic>
#include <cstdint>

namespace droce::dpdk {

/** Set by memif_unmap_guard_install() when the process registered for expedited private
 *  membarrier(2): the unmapper then issues the bursts' half of the fence for them. */
inline std::atomic<bool> memif_guard_asymmetric{false};

/**
 * Points net_memif's munmap at the guard: patches the GOT entries of `munmap` in the loaded
 * librte_net_memif plugin (dl_iterate_phdr; JUMP_SLOT and GLOB_DAT relocations). Call after the
 * EAL has loaded its plugins, before a memif port starts; idempotent (the first call patches).
 * Control path; not thread-safe against itself (the DPDK driver's creation path is serialised).
 * @return true when net_memif's munmap goes through the guard (false: no such plugin or no such
 * relocation, e.g. a DPDK with net_memif built in: the ports then run unguarded, as before).
 */
bool memif_unmap_guard_install() noexcept;

/**
 * True while net_memif's munmap waits in the guard for a burst to end (a thread holding a burst
 * can keep it there, e.g. under a debugger). Any thread. close_on_interrupt_thread() waits on
 * rather than closing beside it (that would run memif_disconnect twice at once).
 */
bool memif_unmap_guard_waiting() noexcept;

/**
 * A burst sequence of the guard's own (64 in a process), or nullptr when every one is taken (that
 * port runs unguarded). Owned by the caller until memif_burst_slot_release(); control path.
 */
std::atomic<std::uint32_t>* memif_burst_slot_claim() noexcept;

/** Gives @p slot back (null: nothing). Only once no burst can run on its port any more. */
void memif_burst_slot_release(std::atomic<std::uint32_t>* slot) noexcept;

/**
 * One burst on a guarded memif port (scope): the slot's sequence is odd while it lives. @p slot
 * null: does nothing (an unguarded port). Datapath: two stores and a compiler barrier (a locked
 * add without membarrier), no lock. One thread at a time writes a slot: the poll owner or a
 * control section (both handed over with acquire/release). Never call munmap inside a burst (the
 * guard would wait for itself); net_memif does so only in a DPDK secondary process, which droce
 * is not.
 */
class MemifBurst {
  public:
    explicit MemifBurst(std::atomic<std::uint32_t>* slot) noexcept : slot_(slot) {
        if (!slot_) return;
        // Ordered before the PMD reads its connected flag (file comment): with membarrier the
        // unmapper pays for the fence, so a compiler barrier is enough here (an empty receive
        // poll is some 20 ns, and a locked add cost the 64 B message rate 4.5 %); without it, a
        // locked add.
        if (memif_guard_asymmetric.load(std::memory_order_relaxed)) {
            slot_->store(slot_->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
            std::atomic_signal_fence(std::memory_order_seq_cst);
        } else {
            slot_->fetch_add(1, std::memory_order_seq_cst);
        }
    }
    ~MemifBurst() {
        // Only this thread writes the sequence: a plain release store, no second locked add.
        if (slot_)
            slot_->store(slot_->load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    MemifBurst(const MemifBurst&) = delete;
    MemifBurst& operator=(const MemifBurst&) = delete;

  private:
    std::atomic<std::uint32_t>* slot_;
};

} // namespace droce::dpdk
