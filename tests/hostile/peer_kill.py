#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The referee of peer_kill_test.sh: peer_kill.py WIRE_VICTIM TMP (configs TMP/{p,q,s}.ini).

Starts servers P and Q and the client S (streaming to both), kills P with SIGKILL, and checks from
S's status lines: the stream to P ends in RETRY_EXC_ERR between 7 and 8 ACK timeouts (plus
scheduling slack) after the kill; the stream to Q keeps completing, without an error; P starts
again at once on the same config and S reconnects to it and streams; in the end every message S
completed was verified by its server. Prints a line per check; exits with the number that failed.
"""
import signal
import sys
import time

from victims import Victims

victim, tmp = sys.argv[1:3]
TIMEOUT_CODE, RETRY_CNT = 14, 7
ack_timeout_ms = 4.096e-3 * 2 ** TIMEOUT_CODE
v = Victims(victim, tmp)
check, status, wait_for, bye = v.check, v.status, v.wait_for, v.bye
procs = v.procs


def start(name, cfg, *args):
    v.start(name, cfg, ["--idle", "1", *args])


# S first: its memif sockets must be there when P's and Q's ports start.
start("s", "s", "--client", "127.0.0.1:18700,127.0.0.1:18701")
if not wait_for("s", "device up"):
    bye("S did not start")
start("p", "p", "--server", "--port", "18700")
start("q", "q", "--server", "--port", "18701")
for n in ("s", "p", "q"):
    if not wait_for(n, "connected"):
        bye(f"{n} did not connect")


def status_once(done, secs=10):
    """S's status once done(status) holds, or after secs: memif links come up when the EAL
    interrupt threads of both processes have run the handshake, which on a loaded 2-core host has
    taken 1 - 5 s (README: the control threads), so the test waits for the stream, not a fixed
    second."""
    t0 = time.time()
    while True:
        s = status("s")
        if done(s) or time.time() - t0 > secs:
            return s, time.time() - t0
        time.sleep(0.1)


s0, took = status_once(lambda s: all(x["completed"] > 0 for x in s["peers"]))
check("S streams to P and to Q", all(x["completed"] > 0 for x in s0["peers"]),
      f"completed {[x['completed'] for x in s0['peers']]} after {took:.1f} s")

# ---- SIGKILL P.
killed_ms = time.monotonic() * 1000
procs["p"].send_signal(signal.SIGKILL)
procs["p"].wait()
q_at_kill = s0["peers"][1]["completed"]
deadline = time.time() + 15
while time.time() < deadline:
    s1 = status("s")
    if s1["peers"][0]["error_completions"] > 0:
        break
    time.sleep(0.1)
to_p, to_q = s1["peers"][0], s1["peers"][1]
budget_ms = (RETRY_CNT + 1) * ack_timeout_ms
after_ms = to_p["first_error_ms"] - killed_ms if to_p["error_completions"] else None
check("S's stream to the killed P ends in RETRY_EXC_ERR", to_p["first_error"] == "retry_exc_err",
      f"{to_p['first_error'] or 'no error completion in 15 s'}")
check(f"... within the retry budget: between {RETRY_CNT} and {RETRY_CNT + 1} ACK timeouts of "
      f"{ack_timeout_ms:.0f} ms after the kill (+ 300 ms slack)",
      after_ms is not None and RETRY_CNT * ack_timeout_ms - 50 <= after_ms <= budget_ms + 300,
      f"{after_ms:.0f} ms" if after_ms is not None else "never")
check("S counted it (retry_exceeded_err)", s1["counters"]["retry_exceeded_err"] >= 1)
# s1 was taken when the error completion was seen: Q's figures then are from inside the outage.
check("S's stream to Q kept running while P was dead (in the retry window), without an error",
      to_q["completed"] > q_at_kill and to_q["error_completions"] == 0,
      f"{q_at_kill} -> {to_q['completed']} messages between the kill and the error")

# ---- P again, at once, on the same config: its memif socket and hugepages must be free.
t0 = time.time()
procs["p_dead"] = procs.pop("p")
start("p", "p", "--server", "--port", "18700")
started = wait_for("p", "waiting for the client", 20)
check("P starts again at once on the same config after SIGKILL", started,
      f"{time.time() - t0:.2f} s" if started else open(f"{tmp}/p.err").read()[-400:])
if not started:
    bye("P did not restart")
v.command("s", "reconnect 0")
ok = wait_for("s", "peer 0 connected again") and wait_for("p", "connected")
check("S reconnects to the restarted P", ok)
# Streaming (a thousand messages), then a second more of it, as before the wait, so that the
# stream has run long enough for an error to show; an error ends the wait at once.
s3, took = status_once(lambda s: s["peers"][0]["completed"] >= 1000 or
                       s["peers"][0]["error_completions"])
if not s3["peers"][0]["error_completions"]:
    time.sleep(1)
    s3 = status("s")
check("S streams to the restarted P, without an error",
      s3["peers"][0]["completed"] >= 1000 and s3["peers"][0]["error_completions"] == 0,
      f"{s3['peers'][0]['completed']} messages, the first 1,000 within {took:.1f} s of reconnecting"
      if s3["peers"][0]["completed"] and not s3["peers"][0]["error_completions"] else
      f"{s3['peers'][0]}; S's counters: " + ", ".join(
          f"{k} {s3['counters'][k]}" for k in ("link_downed", "link_upped", "sent_pkts",
                                                "local_ack_timeout_err", "tx_no_buffer",
                                                "tx_wait_neigh")))
del procs["p_dead"]

fs = v.quit("s")
fp, fq = v.quit("p"), v.quit("q")
if fs and fp and fq:
    print(f"S completed {fs['peers'][0]['completed']} messages to the restarted P ({fp['stream']['verified']} "
          f"verified) and {fs['peers'][1]['completed']} to Q ({fq['stream']['verified']} verified)")
    check("every message S completed was verified by its server, none bad, no error completion",
          all(p["error_completions"] == 0 for p in fs["peers"]) and
          fs["peers"][0]["completed"] == fp["stream"]["verified"] and
          fs["peers"][1]["completed"] == fq["stream"]["verified"] and
          fp["stream"]["bad"] == 0 and fq["stream"]["bad"] == 0)
else:
    check("final status lines", False)
if v.failures:
    v.dump(("s", "p", "q"))
print(f"failures: {v.failures}")
sys.exit(min(v.failures, 76))
