/* SPDX-License-Identifier: BSD-3-Clause */
#include "memif_unmap_guard.h"

#include <elf.h>
#include <link.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <ctime>

namespace droce::dpdk {
namespace {

constexpr std::size_t kSlots = 64;

struct alignas(64) Slot {
    std::atomic<std::uint32_t> seq{0};
    std::atomic<bool> used{false};
};
std::array<Slot, kSlots> g_slots;
std::atomic<std::uint32_t> g_waiters{0}; ///< threads in guarded_munmap's wait

/** What net_memif calls instead of munmap: waits for the bursts in flight, then unmaps. */
int guarded_munmap(void* addr, std::size_t len) {
    // Orders the PMD's clearing of its connected flag before the loads of the sequences below,
    // on this thread and (membarrier) against every burst's store of its sequence.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (memif_guard_asymmetric.load(std::memory_order_relaxed))
        (void)syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    for (Slot& s : g_slots) {
        if (!s.used.load(std::memory_order_acquire)) continue;
        const std::uint32_t seq = s.seq.load(std::memory_order_acquire);
        if ((seq & 1u) == 0) continue;
        g_waiters.fetch_add(1, std::memory_order_acq_rel);
        // A burst that started before the flag was cleared: at most one burst long, unless its
        // thread is held (a debugger, SIGSTOP), and then until it runs again.
        for (unsigned spins = 0; s.seq.load(std::memory_order_acquire) == seq; ++spins) {
            if (spins < 1000) {
                sched_yield();
            } else {
                const timespec nap{0, 50'000};
                nanosleep(&nap, nullptr);
            }
        }
        g_waiters.fetch_sub(1, std::memory_order_acq_rel);
    }
    return ::munmap(addr, len);
}

/** A load address of @p d_ptr: glibc rewrites most of them to absolute ones, some loaders not. */
ElfW(Addr) absolute(const dl_phdr_info* info, ElfW(Addr) p) noexcept {
    return p < info->dlpi_addr ? p + info->dlpi_addr : p;
}

/** Points @p slot (a GOT entry inside @p info's object) at guarded_munmap. */
bool patch(const dl_phdr_info* info, void** slot) noexcept {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return false;
    auto* start = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(slot) &
                                          ~(static_cast<std::uintptr_t>(page) - 1));
    // The entry may be in the read-only-after-relocation segment (full RELRO): writable for the
    // store, then read-only again if its whole page is one the loader made read-only (it rounds
    // the segment's end down to a page and leaves a last partial page writable).
    bool relro = false;
    const auto page_lo = reinterpret_cast<ElfW(Addr)>(start);
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_GNU_RELRO) continue;
        const ElfW(Addr) lo = info->dlpi_addr + ph.p_vaddr;
        const ElfW(Addr) hi =
            (lo + ph.p_memsz) & ~(static_cast<ElfW(Addr)>(page) - 1); // read-only up to here
        if (page_lo >= (lo & ~(static_cast<ElfW(Addr)>(page) - 1)) &&
            page_lo + static_cast<ElfW(Addr)>(page) <= hi)
            relro = true;
    }
    if (mprotect(start, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE) != 0) return false;
    __atomic_store_n(slot, reinterpret_cast<void*>(&guarded_munmap), __ATOMIC_RELEASE);
    if (relro) (void)mprotect(start, static_cast<std::size_t>(page), PROT_READ);
    return true;
}

/** Patches every `munmap` relocation of @p info's object; @return how many. */
int patch_object(const dl_phdr_info* info) noexcept {
    const ElfW(Dyn)* dyn = nullptr;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 0;
    const ElfW(Sym)* symtab = nullptr;
    const char* strtab = nullptr;
    const ElfW(Rela)* jmprel = nullptr;
    const ElfW(Rela)* rela = nullptr;
    std::size_t jmprel_size = 0, rela_size = 0;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
        const ElfW(Addr) at = absolute(info, d->d_un.d_ptr); // meaningful for the address tags
        switch (d->d_tag) {
        case DT_SYMTAB:
            symtab = reinterpret_cast<const ElfW(Sym)*>(at);
            break;
        case DT_STRTAB:
            strtab = reinterpret_cast<const char*>(at);
            break;
        case DT_JMPREL:
            jmprel = reinterpret_cast<const ElfW(Rela)*>(at);
            break;
        case DT_RELA:
            rela = reinterpret_cast<const ElfW(Rela)*>(at);
            break;
        case DT_PLTRELSZ:
            jmprel_size = d->d_un.d_val;
            break;
        case DT_RELASZ:
            rela_size = d->d_un.d_val;
            break;
        default:
            break;
        }
    }
    if (!symtab || !strtab) return 0;
    int patched = 0;
    const auto scan = [&](const ElfW(Rela) * r, std::size_t bytes) {
        if (!r) return;
        for (std::size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
            const auto type = ELF64_R_TYPE(r[i].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            const ElfW(Sym)& sym = symtab[ELF64_R_SYM(r[i].r_info)];
            if (std::strcmp(strtab + sym.st_name, "munmap") != 0) continue;
            if (patch(info, reinterpret_cast<void**>(info->dlpi_addr + r[i].r_offset))) ++patched;
        }
    };
    scan(jmprel, jmprel_size);
    scan(rela, rela_size);
    return patched;
}

} // namespace

bool memif_unmap_guard_install() noexcept {
#if defined(__x86_64__)
    static bool installed = false;
    if (installed) return true;
    int patched = 0;
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            if (info->dlpi_name && std::strstr(info->dlpi_name, "librte_net_memif"))
                *static_cast<int*>(data) += patch_object(info);
            return 0;
        },
        &patched);
    installed = patched > 0;
    // Registered before the first guarded burst (the caller creates the port after this): from
    // then on a burst needs no locked instruction (memif_unmap_guard.h).
    if (installed && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
        memif_guard_asymmetric.store(true, std::memory_order_relaxed);
    return installed;
#else
    return false; // the relocation types above are x86-64's
#endif
}

bool memif_unmap_guard_waiting() noexcept {
    return g_waiters.load(std::memory_order_acquire) != 0;
}

std::atomic<std::uint32_t>* memif_burst_slot_claim() noexcept {
    for (Slot& s : g_slots) {
        bool expected = false;
        if (s.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
            return &s.seq;
    }
    return nullptr;
}

void memif_burst_slot_release(std::atomic<std::uint32_t>* slot) noexcept {
    if (!slot) return;
    for (Slot& s : g_slots)
        if (&s.seq == slot) s.used.store(false, std::memory_order_release);
}

} // namespace droce::dpdk
