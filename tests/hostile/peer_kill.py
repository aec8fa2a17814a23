#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""The referee of peer_kill_test.sh: peer_kill.py WIRE_VICTIM TMP (configs TMP/{p,q,s}.ini).

Starts servers P and Q and the client S (streaming to both), kills P with SIGKILL, and checks from
S's status lines: the stream to P ends in RETRY_EXC_ERR between 7 and 8 ACK timeouts (plus
scheduling slack) after the kill; the stream to Q keeps completing, without an error; P starts
again at once on the same config and S reconnects to it and streams; in the end every message S
completed was verified by its server. Prints a line per check; exits with the number that failed.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

victim, tmp = sys.argv[1:3]
TIMEOUT_CODE, RETRY_CNT = 14, 7
ack_timeout_ms = 4.096e-3 * 2 ** TIMEOUT_CODE
failures = 0
procs = {}


def check(name, cond, detail=""):
    global failures
    print(("ok   " if cond else "FAIL ") + name + (f"  ({detail})" if detail else ""), flush=True)
    if not cond:
        failures += 1


def start(name, cfg, *args):
    err = open(f"{tmp}/{name}.err", "w")
    p = subprocess.Popen([victim, "--config", f"{tmp}/{cfg}.ini", "--info", f"{tmp}/{name}.json",
                          "--idle", "1", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=err, text=True, bufsize=1)
    procs[name] = p
    return p


def wait_for(name, text, secs=30):
    end = time.time() + secs
    while time.time() < end:
        if text in open(f"{tmp}/{name}.err").read():
            return True
        if procs[name].poll() is not None:
            return False
        time.sleep(0.02)
    return False


def status(name):
    p = procs[name]
    p.stdin.write("status\n")
    p.stdin.flush()
    r, _, _ = select.select([p.stdout], [], [], 20)
    if not r:
        raise RuntimeError(f"{name}: no status line")
    return json.loads(p.stdout.readline())


def quit(name):
    p = procs[name]
    try:
        p.stdin.write("quit\n")
        p.stdin.flush()
        r, _, _ = select.select([p.stdout], [], [], 30)
        line = p.stdout.readline() if r else ""
    except BrokenPipeError:
        line = ""
    try:
        rc = p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "hung"
    check(f"{name} exits 0", rc == 0, f"exit {rc}")
    return json.loads(line) if line else None


def bye(msg):
    print("FAIL " + msg)
    for name in procs:
        print(f"-- {name}.err:\n" + open(f"{tmp}/{name}.err").read()[-1500:])
        procs[name].kill()
    sys.exit(max(failures, 1))


# S first: its memif sockets must be there when P's and Q's ports start.
start("s", "s", "--client", "127.0.0.1:18700,127.0.0.1:18701")
if not wait_for("s", "device up"):
    bye("S did not start")
start("p", "p", "--server", "--port", "18700")
start("q", "q", "--server", "--port", "18701")
for n in ("s", "p", "q"):
    if not wait_for(n, "connected"):
        bye(f"{n} did not connect")
time.sleep(1)
s0 = status("s")
check("S streams to P and to Q", all(x["completed"] > 0 for x in s0["peers"]),
      f"completed {[x['completed'] for x in s0['peers']]}")

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
time.sleep(0.5)
s2 = status("s")
check("S's stream to Q kept running while P was dead, without an error",
      s2["peers"][1]["completed"] > q_at_kill and s2["peers"][1]["error_completions"] == 0,
      f"{q_at_kill} -> {s2['peers'][1]['completed']} messages")

# ---- P again, at once, on the same config: its memif socket and hugepages must be free.
t0 = time.time()
procs["p_dead"] = procs.pop("p")
start("p", "p", "--server", "--port", "18700")
started = wait_for("p", "waiting for the client", 20)
check("P starts again at once on the same config after SIGKILL", started,
      f"{time.time() - t0:.2f} s" if started else open(f"{tmp}/p.err").read()[-400:])
if not started:
    bye("P did not restart")
procs["s"].stdin.write("reconnect 0\n")
procs["s"].stdin.flush()
ok = wait_for("s", "peer 0 connected again") and wait_for("p", "connected")
check("S reconnects to the restarted P", ok)
time.sleep(1)
s3 = status("s")
check("S streams to the restarted P, without an error",
      s3["peers"][0]["completed"] > 0 and s3["peers"][0]["error_completions"] == 0,
      f"{s3['peers'][0]['completed']} messages" if s3["peers"][0]["completed"] else
      f"{s3['peers'][0]}; S's counters: " + ", ".join(
          f"{k} {s3['counters'][k]}" for k in ("link_downed", "link_upped", "sent_pkts",
                                                "local_ack_timeout_err", "tx_no_buffer",
                                                "tx_wait_neigh")))
del procs["p_dead"]

fs = quit("s")
fp, fq = quit("p"), quit("q")
if fs and fp and fq:
    print(f"S completed {fs['peers'][0]['completed']} messages to the restarted P ({fp['stream']['verified']} "
          f"verified) and {fs['peers'][1]['completed']} to Q ({fq['stream']['verified']} verified)")
    check("every message S completed was verified by its server, none bad",
          fs["peers"][0]["completed"] == fp["stream"]["verified"] and
          fs["peers"][1]["completed"] == fq["stream"]["verified"] and
          fp["stream"]["bad"] == 0 and fq["stream"]["bad"] == 0)
else:
    check("final status lines", False)
if failures:
    for name in ("s", "p", "q"):
        print(f"-- {name}.err:\n" + open(f"{tmp}/{name}.err").read()[-1500:])
print(f"failures: {failures}")
sys.exit(min(failures, 76))
