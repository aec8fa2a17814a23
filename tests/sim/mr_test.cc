/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib/mem MrTable: registration rules (as ibv_reg_mr), keys and their key bytes, and every MemCheck
 * outcome of check(). Lives in tests/sim because tests/unit/meson.build has another owner; it is a
 * unit test and registered in the 'unit' suite as well.
 */
#include <cerrno>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "mem/mr.h"
#include "rc/types.h"

namespace droce::mem {
namespace {

constexpr std::uint32_t kLw = rc::kAccessLocalWrite;
constexpr std::uint32_t kRw = rc::kAccessRemoteWrite;
constexpr std::uint32_t kRr = rc::kAccessRemoteRead;
constexpr std::uint32_t kRa = rc::kAccessRemoteAtomic;

class MrTableTest : public ::testing::Test {
  protected:
    MrTable table{8};
    Pd pd{1};
    Pd other_pd{2};
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(4096);
    static constexpr std::uint64_t kIova = 0x10000;

    Mr* reg(std::uint32_t access, std::uint64_t iova = kIova) {
        int err = -1;
        Mr* mr = table.register_mr(&pd, buf.data(), buf.size(), iova, access, &err);
        EXPECT_NE(mr, nullptr);
        EXPECT_EQ(err, 0);
        return mr;
    }
};

TEST(MemCheckNames, EveryOutcomeHasItsName) {
    EXPECT_EQ(to_string(MemCheck::ok), "ok");
    EXPECT_EQ(to_string(MemCheck::invalid_key), "invalid_key");
    EXPECT_EQ(to_string(MemCheck::pd_mismatch), "pd_mismatch");
    EXPECT_EQ(to_string(MemCheck::out_of_range), "out_of_range");
    EXPECT_EQ(to_string(MemCheck::access_denied), "access_denied");
}

TEST_F(MrTableTest, RegisterFillsTheRegion) {
    Mr* mr = reg(kLw | kRr);
    ASSERT_NE(mr, nullptr);
    EXPECT_TRUE(mr->valid);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_NE(mr->lkey, 0u);
    EXPECT_EQ(mr->pd, &pd);
    EXPECT_EQ(mr->iova, kIova);
    EXPECT_EQ(mr->length, buf.size());
    EXPECT_EQ(mr->host, buf.data());
    EXPECT_EQ(mr->access, kLw | kRr);
    EXPECT_EQ(table.find(mr->lkey), mr);
}

TEST_F(MrTableTest, CheckOk) {
    Mr* mr = reg(kLw | kRw | kRr | kRa);
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(mr->rkey, &pd, kIova + 100, 200, kRw, &host), MemCheck::ok);
    EXPECT_EQ(host, buf.data() + 100);
    // The whole region, the last byte, and a zero-length access at the very end are all inside.
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova, buf.size(), kLw, &host), MemCheck::ok);
    EXPECT_EQ(host, buf.data());
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova + buf.size() - 1, 1, 0, &host), MemCheck::ok);
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova + buf.size(), 0, 0, &host), MemCheck::ok);
    // host may be null when the caller only wants the verdict.
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova, 1, 0, nullptr), MemCheck::ok);
}

TEST_F(MrTableTest, LocalReadNeedsNoFlag) {
    Mr* mr = reg(0);
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova, 16, 0, &host), MemCheck::ok);
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova, 16, kLw, &host), MemCheck::access_denied);
}

TEST_F(MrTableTest, InvalidKey) {
    Mr* mr = reg(kLw);
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(0, &pd, kIova, 1, 0, &host), MemCheck::invalid_key);
    EXPECT_EQ(table.find(0), nullptr);
    EXPECT_EQ(table.check(mr->lkey ^ 0x1u, &pd, kIova, 1, 0, &host),
              MemCheck::invalid_key); // wrong tag
    EXPECT_EQ(table.check(mr->lkey + (1u << 8), &pd, kIova, 1, 0, &host),
              MemCheck::invalid_key); // unused index
    EXPECT_EQ(table.check(0xffffff00u | (mr->lkey & 0xffu), &pd, kIova, 1, 0, &host),
              MemCheck::invalid_key); // index beyond capacity
    EXPECT_EQ(host, nullptr);
}

TEST_F(MrTableTest, PdMismatch) {
    Mr* mr = reg(kLw | kRr);
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(mr->rkey, &other_pd, kIova, 1, kRr, &host), MemCheck::pd_mismatch);
    EXPECT_EQ(table.check(mr->rkey, nullptr, kIova, 1, kRr, &host), MemCheck::pd_mismatch);
}

TEST_F(MrTableTest, OutOfRange) {
    Mr* mr = reg(kLw | kRr);
    std::uint8_t* host = nullptr;
    const std::uint64_t n = buf.size();
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova - 1, 1, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova + n, 1, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova + n - 4, 5, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova, n + 1, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova + n + 1, 0, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(host, nullptr);
}

TEST_F(MrTableTest, OutOfRangeWhenVaPlusLenOverflows) {
    // A region that ends at the top of the address space: va + len wraps past zero.
    constexpr std::uint64_t kTop = std::numeric_limits<std::uint64_t>::max();
    Mr* mr = reg(kLw, kTop - buf.size());
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(mr->lkey, &pd, kTop - 10, 10, 0, &host), MemCheck::ok);
    EXPECT_EQ(table.check(mr->lkey, &pd, kTop - 10, 20, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(table.check(mr->lkey, &pd, kTop - 10, kTop, 0, &host), MemCheck::out_of_range);
    EXPECT_EQ(table.check(mr->lkey, &pd, kTop, 2, 0, &host), MemCheck::out_of_range);
    // A region at iova 0x10000: a huge len from inside it wraps va + len to a small number.
    Mr* low = reg(kLw);
    EXPECT_EQ(table.check(low->lkey, &pd, kIova + 8, kTop - 4, 0, &host), MemCheck::out_of_range);
}

TEST_F(MrTableTest, AccessDenied) {
    Mr* ro = reg(kLw | kRr);
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(ro->rkey, &pd, kIova, 8, kRr, &host), MemCheck::ok);
    EXPECT_EQ(table.check(ro->rkey, &pd, kIova, 8, kRw, &host), MemCheck::access_denied);
    EXPECT_EQ(table.check(ro->rkey, &pd, kIova, 8, kRa, &host), MemCheck::access_denied);
    // Every bit must be present: read+write needs both.
    EXPECT_EQ(table.check(ro->rkey, &pd, kIova, 8, kRr | kRw, &host), MemCheck::access_denied);
    Mr* local = reg(0);
    EXPECT_EQ(table.check(local->lkey, &pd, kIova, 8, kRr, &host), MemCheck::access_denied);
}

TEST_F(MrTableTest, ChecksRunInOrderKeyPdRangeAccess) {
    Mr* mr = reg(0);
    std::uint8_t* host = nullptr;
    // Wrong PD, out of range and missing access at once: the PD is reported.
    EXPECT_EQ(table.check(mr->lkey, &other_pd, kIova + (1u << 20), 8, kRw, &host),
              MemCheck::pd_mismatch);
    // Out of range and missing access: the range is reported.
    EXPECT_EQ(table.check(mr->lkey, &pd, kIova - 8, 8, kRw, &host), MemCheck::out_of_range);
}

TEST_F(MrTableTest, StaleKeyAfterDeregisterAndReuseOfTheIndex) {
    Mr* first = reg(kLw);
    const std::uint32_t old_key = first->lkey;
    ASSERT_EQ(table.deregister(first), 0);
    EXPECT_EQ(table.find(old_key), nullptr);
    std::uint8_t* host = nullptr;
    EXPECT_EQ(table.check(old_key, &pd, kIova, 1, 0, &host), MemCheck::invalid_key);

    Mr* second = reg(kLw);
    // Same index (the slot just freed), new tag: the old key must not name the new region.
    EXPECT_EQ(second->lkey >> 8, old_key >> 8);
    EXPECT_NE(second->lkey, old_key);
    EXPECT_EQ(table.find(old_key), nullptr);
    EXPECT_EQ(table.check(old_key, &pd, kIova, 1, 0, &host), MemCheck::invalid_key);
    EXPECT_EQ(table.check(second->lkey, &pd, kIova, 1, 0, &host), MemCheck::ok);
}

TEST_F(MrTableTest, DeregisterRules) {
    EXPECT_EQ(table.deregister(nullptr), 0);
    Mr* mr = reg(kLw);
    EXPECT_EQ(table.deregister(mr), 0);
    EXPECT_EQ(table.deregister(mr), EINVAL); // already invalid
    Mr foreign{};
    foreign.lkey = foreign.rkey = (1u << 8) | 1u;
    foreign.valid = true;
    EXPECT_EQ(table.deregister(&foreign), EINVAL); // not one of ours
    MrTable other(4);
    int err = -1;
    Mr* theirs = other.register_mr(&pd, buf.data(), buf.size(), kIova, kLw, &err);
    ASSERT_NE(theirs, nullptr);
    EXPECT_EQ(table.deregister(theirs), EINVAL);
    EXPECT_EQ(other.deregister(theirs), 0);
}

TEST_F(MrTableTest, TableFullIsEnomemAndRecovers) {
    std::vector<Mr*> mrs;
    for (int i = 0; i < 8; ++i)
        mrs.push_back(reg(kLw));
    int err = 0;
    EXPECT_EQ(table.register_mr(&pd, buf.data(), buf.size(), kIova, kLw, &err), nullptr);
    EXPECT_EQ(err, ENOMEM);
    // Keys are all different and all valid.
    for (std::size_t i = 0; i < mrs.size(); ++i) {
        EXPECT_EQ(table.find(mrs[i]->lkey), mrs[i]);
        for (std::size_t j = i + 1; j < mrs.size(); ++j)
            EXPECT_NE(mrs[i]->lkey, mrs[j]->lkey);
    }
    ASSERT_EQ(table.deregister(mrs[3]), 0);
    Mr* again = table.register_mr(&pd, buf.data(), buf.size(), kIova, kLw, &err);
    EXPECT_NE(again, nullptr);
    EXPECT_EQ(err, 0);
}

TEST_F(MrTableTest, BadArgumentsAreEinval) {
    int err = 0;
    // Remote write or remote atomic without local write (as ibv_reg_mr).
    EXPECT_EQ(table.register_mr(&pd, buf.data(), buf.size(), kIova, kRw, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    err = 0;
    EXPECT_EQ(table.register_mr(&pd, buf.data(), buf.size(), kIova, kRa | kRr, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    // Remote read alone is fine.
    EXPECT_NE(table.register_mr(&pd, buf.data(), buf.size(), kIova, kRr, &err), nullptr);
    EXPECT_EQ(err, 0);
    // Null PD, null address with a length, iova + length wrapping.
    EXPECT_EQ(table.register_mr(nullptr, buf.data(), buf.size(), kIova, kLw, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    err = 0;
    EXPECT_EQ(table.register_mr(&pd, nullptr, 16, kIova, kLw, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    err = 0;
    EXPECT_EQ(table.register_mr(&pd, buf.data(), 16, std::numeric_limits<std::uint64_t>::max() - 8,
                                kLw, &err),
              nullptr);
    EXPECT_EQ(err, EINVAL);
    // A zero-length region at a null address is allowed (zero-length SGEs name it).
    EXPECT_NE(table.register_mr(&pd, nullptr, 0, 0, kLw, &err), nullptr);
    EXPECT_EQ(err, 0);
}

TEST(MrTableTags, TagsStayDistinctAcrossManyReuses) {
    MrTable table(1);
    Pd pd{1};
    std::uint8_t byte = 0;
    int err = 0;
    std::uint32_t prev = 0;
    for (int i = 0; i < 300; ++i) {
        Mr* mr = table.register_mr(&pd, &byte, 1, 0, 0, &err);
        ASSERT_NE(mr, nullptr);
        EXPECT_NE(mr->lkey, 0u);
        EXPECT_NE(mr->lkey, prev);
        EXPECT_EQ(table.find(prev), nullptr);
        prev = mr->lkey;
        ASSERT_EQ(table.deregister(mr), 0);
    }
}

/** The key bytes (low 8 bits) of @p n registrations in a fresh table, checking the index part. */
std::vector<std::uint8_t> first_key_bytes(std::uint32_t n) {
    MrTable table(n);
    Pd pd{1};
    std::uint8_t byte = 0;
    std::vector<std::uint8_t> out;
    for (std::uint32_t i = 0; i < n; ++i) {
        int err = 0;
        Mr* mr = table.register_mr(&pd, &byte, 1, 0, 0, &err);
        EXPECT_NE(mr, nullptr);
        if (!mr) break;
        EXPECT_EQ(mr->lkey >> 8, i + 1) << "the index part names the slot";
        out.push_back(static_cast<std::uint8_t>(mr->lkey));
    }
    return out;
}

TEST(MrTableKeys, KeysAreNotTheOldFixedSequence) {
    // Keys used to be (n << 8) | 1 for the n-th registration of every process: a peer could forge a
    // frame naming any MR without being given its key. Eight key bytes all 1 by chance: 2^-64.
    const std::vector<std::uint8_t> bytes = first_key_bytes(8);
    ASSERT_EQ(bytes.size(), 8u);
    EXPECT_NE(bytes, std::vector<std::uint8_t>(8, 1));
}

TEST(MrTableKeys, TwoTablesDrawDifferentKeys) {
    // Each table (each device, each process) seeds its own generator: the same registrations get
    // other keys. The same eight key bytes by chance: 2^-64.
    EXPECT_NE(first_key_bytes(8), first_key_bytes(8));
}

TEST(MrTableTags, ZeroCapacityTableRegistersNothing) {
    MrTable table(0);
    Pd pd{1};
    std::uint8_t byte = 0;
    int err = 0;
    EXPECT_EQ(table.register_mr(&pd, &byte, 1, 0, 0, &err), nullptr);
    EXPECT_EQ(err, ENOMEM);
    EXPECT_EQ(table.find(0x100), nullptr);
}

} // namespace
} // namespace droce::mem
