/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc's controller API and control socket under bad input (regressions of an attack review):
 * profile states out of the enum, an explicit profile's EV array across mode changes, calls on an
 * MRC context whose verbs context was closed; the droce-mrcctl socket with numbers out of range, a
 * client that never sends, a client that leaves before the reply (no SIGPIPE for the process),
 * deeply nested or huge input.
 */
#include <mrc_ctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "mrc_fixture.h"

namespace {

using namespace mrc_fixture;
using json = nlohmann::json;

class MrcCtlAttack : public MrcApi {
  protected:
    bool port_enabled(std::uint8_t p) {
        mrc_ctl_port_attr pa{};
        EXPECT_EQ(mrc_ctl_query_port(mctx[0], p, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
        return pa.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED;
    }
};

// ---------------------------------------------------------------- the control socket

/** A connection to this process's control socket (-1 on failure). */
int connect_ctl() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const int n = std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "droce-mrcctl.%ld",
                                static_cast<long>(getpid()));
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/** Sends @p line (a newline added) and reads the reply within @p ms; null on timeout or EOF. */
json ask(const std::string& line, int ms = 5000) {
    const int fd = connect_ctl();
    if (fd < 0) return nullptr;
    const std::string out = line + "\n";
    std::size_t off = 0;
    while (off < out.size()) {
        const ssize_t n = send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break; // the server may close on a line it will not read
        off += static_cast<std::size_t>(n);
    }
    std::string reply;
    char buf[4096];
    while (reply.find('\n') == std::string::npos && readable(fd, ms)) {
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        reply.append(buf, static_cast<std::size_t>(n));
    }
    close(fd);
    if (reply.empty()) return nullptr;
    try {
        return json::parse(reply);
    } catch (const std::exception&) {
        return nullptr;
    }
}

int errno_of(const json& r) {
    return r.is_object() && !r.value("ok", true) ? r.value("errno", 0) : 0;
}

TEST_F(MrcCtlAttack, SocketNumbersOutOfRangeAreRefusedNotTruncated) {
    ASSERT_TRUE(ask(R"({"cmd":"list"})").value("ok", false));
    // 257 and -255 are port 1 modulo 256: the server must not take port 1 down.
    for (const char* port : {"257", "-255", "1.5", "1e300", "\"1\"", "null", "true"}) {
        const json r = ask(std::string(R"({"cmd":"port","up":false,"port":)") + port + "}");
        EXPECT_EQ(errno_of(r), EINVAL) << port << ": " << r.dump();
        EXPECT_TRUE(port_enabled(1)) << port;
    }
    // "up" must be a boolean.
    EXPECT_EQ(errno_of(ask(R"({"cmd":"port","port":1,"up":0})")), EINVAL);
    EXPECT_TRUE(port_enabled(1));
    // An EV value above 32 bits is not its low 32 bits; a port above 255 is not port & 255; a
    // negative profile is not UINT64_MAX.
    EXPECT_EQ(errno_of(ask(R"({"cmd":"ev_state","value":4295016449,"port":1,"deny":true})")),
              EINVAL);
    EXPECT_EQ(errno_of(ask(R"({"cmd":"ev_state","value":49153,"port":257,"deny":true})")), EINVAL);
    EXPECT_EQ(
        errno_of(ask(R"({"cmd":"ev_state","value":49153,"port":1,"deny":true,"profile":-1})")),
        EINVAL);
    // Probe counts and timeouts out of their ranges, and EVs over 16 bits (UDP), are refused.
    for (const char* extra : {R"("count":0)", R"("count":1000)", R"("count":1e30)", R"("count":-5)",
                              R"("timeout_ms":0)", R"("timeout_ms":1e30)", R"("timeout_ms":-1)",
                              R"("ev":65536)", R"("ev":65535,"count":2)", R"("ev":-1)"}) {
        const json r =
            ask(std::string(R"({"cmd":"probe","port":1,"dgid":"10.0.0.2",)") + extra + "}");
        EXPECT_EQ(errno_of(r), EINVAL) << extra << ": " << r.dump();
    }
    EXPECT_EQ(errno_of(ask(R"({"cmd":"probe","port":1,"dgid":"not an address"})")), EINVAL);
    EXPECT_EQ(errno_of(ask(R"({"cmd":"probe","port":1,"dgid":7})")), EINVAL);
    // A good probe still works.
    const json ok = ask(R"({"cmd":"probe","port":1,"dgid":"10.0.0.2","count":2,"timeout_ms":500})");
    ASSERT_TRUE(ok.value("ok", false)) << ok.dump();
    EXPECT_EQ(ok.at("replies").size(), 2u);
}

TEST_F(MrcCtlAttack, SocketSurvivesMalformedInput) {
    for (const std::string& bad :
         {std::string("not json"), std::string("[1,2]"), std::string("\"list\""),
          std::string("null"), std::string(R"({"cmd":5})"), std::string(R"({"cmd":"port"})"),
          std::string(R"({"cmd":"nope"})"), std::string(50000, '['), std::string(60000, '{'),
          std::string("{\"cmd\":\"list\"") + std::string(1 << 20, ' ') + "}"}) {
        const json r = ask(bad);
        EXPECT_EQ(errno_of(r), EINVAL) << bad.substr(0, 40) << ": " << r.dump();
    }
    EXPECT_TRUE(ask(R"({"cmd":"list"})").value("ok", false));
}

TEST_F(MrcCtlAttack, SocketClientThatNeverSendsDoesNotBlockOthers) {
    // A client connects and sends nothing (or half a line): the single server thread must not
    // wait for it for ever.
    const int idle = connect_ctl();
    ASSERT_GE(idle, 0);
    const int half = connect_ctl();
    ASSERT_GE(half, 0);
    ASSERT_EQ(send(half, "{\"cmd\":", 7, MSG_NOSIGNAL), 7);
    const auto t0 = std::chrono::steady_clock::now();
    const json r = ask(R"({"cmd":"list"})", 10'000);
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_TRUE(r.is_object() && r.value("ok", false)) << r.dump();
    EXPECT_LT(waited, std::chrono::seconds(6));
    // The idle connections were told ETIMEDOUT and closed by the server.
    for (const int fd : {idle, half}) {
        std::string got;
        char buf[256];
        ssize_t n = 0;
        while (readable(fd, 5000) && (n = read(fd, buf, sizeof buf)) > 0)
            got.append(buf, static_cast<std::size_t>(n));
        EXPECT_EQ(n, 0) << "closed";
        EXPECT_EQ(errno_of(json::parse(got, nullptr, false)), ETIMEDOUT) << got;
        close(fd);
    }
}

TEST_F(MrcCtlAttack, SocketClientLeavingBeforeTheReplyDoesNotKillTheProcess) {
    // A probe that takes 300 ms to time out (nobody at 10.0.0.99), and a client that hangs up at
    // once (a droce-mrcctl interrupted with ^C): the reply goes to a closed socket. Without
    // MSG_NOSIGNAL that write raises SIGPIPE, whose default action ends this process.
    for (int i = 0; i < 3; ++i) {
        const int fd = connect_ctl();
        ASSERT_GE(fd, 0);
        const std::string line = R"({"cmd":"probe","port":1,"dgid":"10.0.0.99","timeout_ms":300})"
                                 "\n";
        ASSERT_EQ(send(fd, line.data(), line.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(line.size()));
        close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_TRUE(ask(R"({"cmd":"list"})").value("ok", false)); // still alive, still serving
}

// ---------------------------------------------------------------- profile state machines

TEST_F(MrcCtlAttack, ProfileStatesOutsideTheEnumAreRefused) {
    const auto bad = static_cast<mrc_ctl_profile_state>(7);
    // Format profile: OFFLINE, then a state that is none of INIT / OFFLINE / ONLINE.
    mrc_ctl_ev_fmt_profile_attr f{};
    f.profile_state = MRC_CTL_PROFILE_OFFLINE;
    f.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
    ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(
                  mctx[0], 70, &f, MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE),
              0);
    f = {};
    f.profile_state = bad;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 70, &f, MRC_CTL_EV_FMT_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    f = {};
    ASSERT_EQ(mrc_ctl_query_ev_fmt_profile(mctx[0], 70, &f, MRC_CTL_EV_FMT_PROFILE_STATE), 0);
    EXPECT_EQ(f.profile_state, MRC_CTL_PROFILE_OFFLINE);
    f.profile_state = MRC_CTL_PROFILE_INIT;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 70, &f, MRC_CTL_EV_FMT_PROFILE_STATE), 0);

    // EV profile (AUTO).
    mrc_ctl_ev_profile_attr e{};
    e.profile_state = MRC_CTL_PROFILE_OFFLINE;
    e.ev_mode = MRC_CTL_EV_MODE_AUTO;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 71, &e,
                                        MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE),
              0);
    e = {};
    e.profile_state = bad;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 71, &e, MRC_CTL_EV_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    e = {};
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], 71, &e, MRC_CTL_EV_PROFILE_STATE), 0);
    EXPECT_EQ(e.profile_state, MRC_CTL_PROFILE_OFFLINE);
    e.profile_state = MRC_CTL_PROFILE_INIT;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 71, &e, MRC_CTL_EV_PROFILE_STATE), 0);

    // CC profile.
    mrc_ctl_cc_profile_attr c{};
    c.profile_state = MRC_CTL_PROFILE_OFFLINE;
    c.algorithm = "dcqcn";
    ASSERT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 72, &c,
                                        MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
              0);
    c = {};
    c.profile_state = bad;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 72, &c, MRC_CTL_CC_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL);
    c = {};
    ASSERT_EQ(mrc_ctl_query_cc_profile(mctx[0], 72, &c, MRC_CTL_CC_PROFILE_STATE), 0);
    EXPECT_EQ(c.profile_state, MRC_CTL_PROFILE_OFFLINE);
    c.profile_state = MRC_CTL_PROFILE_INIT;
    EXPECT_EQ(mrc_ctl_modify_cc_profile(mctx[0], 72, &c, MRC_CTL_CC_PROFILE_STATE), 0);
}

TEST_F(MrcCtlAttack, ExplicitArrayFollowsTheModeBackAndForth) {
    // Format 80 (UDP, 16 bits) ONLINE; EV profile 81 EXP with 8 EVs, then AUTO, then EXP again
    // with the count unchanged: the array must be 8 unpopulated EVs again, and ONLINE refused
    // until they are given.
    mrc_ctl_ev_fmt_field w{16};
    mrc_ctl_ev_fmt_profile_attr f{};
    f.profile_state = MRC_CTL_PROFILE_OFFLINE;
    f.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
    f.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
    f.ev_fmt_op.fmt_fields = &w;
    f.ev_fmt_op.fmt_field_count = 1;
    ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 80, &f,
                                            MRC_CTL_EV_FMT_PROFILE_STATE |
                                                MRC_CTL_EV_FMT_PROFILE_MODE |
                                                MRC_CTL_EV_FMT_PROFILE_OP),
              0);
    f = {};
    f.profile_state = MRC_CTL_PROFILE_ONLINE;
    ASSERT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 80, &f, MRC_CTL_EV_FMT_PROFILE_STATE), 0);

    mrc_ctl_ev_profile_attr a{};
    a.profile_state = MRC_CTL_PROFILE_OFFLINE;
    a.ev_mode = MRC_CTL_EV_MODE_EXP;
    a.ev_fmt_profile_id = 80;
    a.ev_count = 8;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 81, &a,
                                        MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                                            MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT),
              0);
    a = {};
    a.ev_mode = MRC_CTL_EV_MODE_AUTO;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 81, &a, MRC_CTL_EV_PROFILE_MODE), 0);
    a = {};
    a.ev_mode = MRC_CTL_EV_MODE_EXP;
    ASSERT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 81, &a, MRC_CTL_EV_PROFILE_MODE), 0);

    mrc_ctl_ev_op_entry en[8] = {};
    a = {};
    a.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
    a.ev_op.entries = en;
    a.ev_op.entry_count = 8;
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], 81, &a,
                                       MRC_CTL_EV_PROFILE_EV_OP | MRC_CTL_EV_PROFILE_COUNT),
              0);
    EXPECT_EQ(a.ev_count, 8u);
    EXPECT_EQ(a.ev_op.entry_count, 8); // the array has ev_count entries
    for (const mrc_ctl_ev_op_entry& x : en)
        EXPECT_EQ(x.state, MRC_CTL_EV_UNKNOWN); // unpopulated
    a = {};
    a.profile_state = MRC_CTL_PROFILE_ONLINE;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 81, &a, MRC_CTL_EV_PROFILE_STATE), -1);
    EXPECT_EQ(errno, EINVAL); // OCP: every explicit EV given before ONLINE

    a = {};
    a.profile_state = MRC_CTL_PROFILE_INIT;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 81, &a, MRC_CTL_EV_PROFILE_STATE), 0);
    f = {};
    f.profile_state = MRC_CTL_PROFILE_OFFLINE;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 80, &f, MRC_CTL_EV_FMT_PROFILE_STATE), 0);
    f.profile_state = MRC_CTL_PROFILE_INIT;
    EXPECT_EQ(mrc_ctl_modify_ev_fmt_profile(mctx[0], 80, &f, MRC_CTL_EV_FMT_PROFILE_STATE), 0);
}

// ---------------------------------------------------------------- bad arguments

TEST_F(MrcCtlAttack, BadArgumentsAreRefusedWithTheDocumentedErrno) {
    // EV event CQs: eight per device, the ninth ENOSPC; polls of 0 entries return 0, negative
    // counts -EINVAL.
    std::vector<mrc_cq*> cqs;
    for (int i = 0; i < 8; ++i) {
        cqs.push_back(mrc_ctl_create_ev_event_cq(mctx[0], 4, nullptr, nullptr, 0));
        ASSERT_NE(cqs.back(), nullptr) << i;
    }
    errno = 0;
    EXPECT_EQ(mrc_ctl_create_ev_event_cq(mctx[0], 4, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, ENOSPC);
    mrc_ctl_ev_event ev{};
    EXPECT_EQ(mrc_ctl_poll_ev_event(cqs[0], 0, nullptr), 0);
    EXPECT_EQ(mrc_ctl_poll_ev_event(cqs[0], -1, &ev), -EINVAL);
    for (mrc_cq* c : cqs)
        EXPECT_EQ(mrc_destroy_cq(c), 0);
    mrc_cq* again = mrc_ctl_create_ev_event_cq(mctx[0], 4, nullptr, nullptr, 0);
    ASSERT_NE(again, nullptr) << "slots freed by destroy";
    EXPECT_EQ(mrc_destroy_cq(again), 0);

    // EV profile ops: NULL entries with a count, a negative count, too many fields.
    mrc_ctl_ev_profile_attr a{};
    a.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
    a.ev_op.entries = nullptr;
    a.ev_op.entry_count = 1 << 30;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    a.ev_op.entry_count = -1;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], 0, &a, MRC_CTL_EV_PROFILE_EV_OP), -1);
    EXPECT_EQ(errno, EINVAL);
    mrc_ctl_ev_field fields[9] = {};
    a = {};
    a.profile_state = MRC_CTL_PROFILE_OFFLINE;
    a.ev_mode = MRC_CTL_EV_MODE_AUTO;
    a.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
    a.ev_fields_op.fields = fields;
    a.ev_fields_op.field_count = 9;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], UINT64_MAX, &a,
                                        MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                                            MRC_CTL_EV_PROFILE_EV_FIELDS_OP),
              -1);
    EXPECT_EQ(errno, E2BIG);
    a.ev_fields_op.field_count = 0;
    a.ev_count = 257;
    errno = 0;
    EXPECT_EQ(mrc_ctl_modify_ev_profile(mctx[0], UINT64_MAX, &a,
                                        MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
                                            MRC_CTL_EV_PROFILE_COUNT),
              -1);
    EXPECT_EQ(errno, E2BIG);
    mrc_ctl_ev_profile_attr q{};
    ASSERT_EQ(mrc_ctl_query_ev_profile(mctx[0], UINT64_MAX, &q, MRC_CTL_EV_PROFILE_STATE), 0);
    EXPECT_EQ(q.profile_state, MRC_CTL_PROFILE_INIT) << "a refused call left a profile behind";

    // Endpoint batches: no request, too many, no response array, a DSCP over 63.
    mrc_ctl_ep_req req[257] = {};
    mrc_ctl_ep_rsp rsp[257] = {};
    int got = 0;
    for (const int n : {0, -1, 257}) {
        errno = 0;
        EXPECT_EQ(
            mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req, n, 1000, rsp, &got),
            -1)
            << n;
        EXPECT_EQ(errno, EINVAL) << n;
    }
    errno = 0;
    EXPECT_EQ(
        mrc_ctl_ep_batch_send_wait(mctx[0], 0, MRC_CTL_EP_OP_EV_PROBE, req, 1, 1000, nullptr, &got),
        -1);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(
        mrc_ctl_ep_batch_send_wait(mctx[0], 64, MRC_CTL_EP_OP_EV_PROBE, req, 1, 1000, rsp, &got),
        -1);
    EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------- closing the verbs context first

TEST_F(MrcCtlAttack, ClosingTheDeviceUnderAnMrcContextIsRefused) {
    // ibv_close_device under a live MRC context returned 0 and freed the verbs context the MRC
    // context refers to: its controller calls were then refused, and mrc_destroy_context left the
    // MRC CQ on the device for good. The close is refused (EBUSY) until the MRC context is gone.
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ibv_context* v = nullptr;
    for (int i = 0; i < n && !v; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), "droce_a") == 0) v = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    ASSERT_NE(v, nullptr);
    mrc_context* m = mrc_create_context(v, nullptr);
    ASSERT_NE(m, nullptr);
    mrc_cq* cq = mrc_create_cq(m, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    errno = 0;
    EXPECT_EQ(ibv_close_device(v), EBUSY);
    EXPECT_EQ(errno, EBUSY);
    // Still open: the MRC context's calls act on the device.
    mrc_ctl_port_attr pa{};
    pa.port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED;
    EXPECT_EQ(mrc_ctl_modify_port(m, 2, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
    EXPECT_FALSE(port_enabled(2));
    pa.port_admin_state = MRC_CTL_PORT_ADMIN_ENABLED;
    EXPECT_EQ(mrc_ctl_modify_port(m, 2, &pa, MRC_CTL_PORT_ADMIN_STATE), 0);
    EXPECT_TRUE(port_enabled(2));
    // A second MRC context on the same verbs context holds it too.
    mrc_context* m2 = mrc_create_context(v, nullptr);
    ASSERT_NE(m2, nullptr);
    EXPECT_EQ(mrc_destroy_context(m), 0); // takes its CQ with it
    EXPECT_EQ(ibv_close_device(v), EBUSY);
    EXPECT_EQ(mrc_destroy_context(m2), 0);
    EXPECT_EQ(ibv_close_device(v), 0);
    errno = 0;
    EXPECT_EQ(mrc_destroy_context(m), -1); // destroyed: refused, not read
    EXPECT_EQ(errno, EINVAL);
}

} // namespace
