# SPDX-License-Identifier: BSD-3-Clause
"""wire-victim processes driven over their stdin/stdout, and the check lines of the hostile tests
(wire_attack.py, peer_kill.py): one copy of what both referees need."""
import atexit
import json
import os
import select
import signal
import subprocess
import sys
import time


class Victims:
    """wire-victim processes by name; outputs in TMP/NAME.{err,json}; a count of failed checks."""

    def __init__(self, victim, tmp):
        self.victim, self.tmp = victim, tmp
        self.procs = {}
        self.failures = 0
        atexit.register(self.kill_all)  # whatever way the referee ends, no victim outlives it

    def check(self, name, cond, detail=""):
        """Prints "ok   NAME" or "FAIL NAME (DETAIL)" and counts a failure."""
        print(("ok   " if cond else "FAIL ") + name + (f"  ({detail})" if detail else ""),
              flush=True)
        if not cond:
            self.failures += 1

    def start(self, name, cfg, args, prefix=()):
        """Starts wire-victim NAME on TMP/CFG.ini with ARGS, the command behind PREFIX (for
        example `ip netns exec NS`)."""
        err = open(f"{self.tmp}/{name}.err", "w")
        # A session of its own: kill_all() reaches the victim behind any wrapper (timeout).
        p = subprocess.Popen([*prefix, self.victim, "--config", f"{self.tmp}/{cfg}.ini", "--info",
                              f"{self.tmp}/{name}.json", *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                             bufsize=1, start_new_session=True)
        self.procs[name] = p
        return p

    def wait_for(self, name, text, secs=60):
        """True once NAME's stderr holds TEXT; False when it exits first or SECS pass."""
        end = time.time() + secs
        while time.time() < end:
            try:
                if text in open(f"{self.tmp}/{name}.err").read():
                    return True
            except OSError:
                pass
            if self.procs[name].poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def command(self, name, line):
        """Writes LINE to NAME's stdin; False when it has gone."""
        try:
            self.procs[name].stdin.write(line + "\n")
            self.procs[name].stdin.flush()
            return True
        except BrokenPipeError:
            return False

    def status(self, name):
        """NAME's status line, parsed; a victim that died or hangs ends the test (bye)."""
        p = self.procs[name]
        if not self.command(name, "status"):
            self.bye(f"{name} has exited ({p.poll()}): no status")
        r, _, _ = select.select([p.stdout], [], [], 20)
        line = p.stdout.readline() if r else ""
        try:
            return json.loads(line)
        except ValueError:
            self.bye(f"{name}: no status line (exit {p.poll()}): {line[:200]!r}")

    def quit(self, name):
        """quit to NAME: its last status line (None without one); checks that it exits 0."""
        p = self.procs[name]
        line = ""
        if self.command(name, "quit"):
            r, _, _ = select.select([p.stdout], [], [], 30)
            line = p.stdout.readline() if r else ""
        try:
            rc = p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "hung"
        self.check(f"{name} exits 0", rc == 0, f"exit {rc}")
        return json.loads(line) if line else None

    def dump(self, names):
        """The end of each NAME's stderr."""
        for name in names:
            try:
                print(f"-- {name}.err:\n" + open(f"{self.tmp}/{name}.err").read()[-1500:])
            except OSError:
                pass

    def kill_all(self):
        """SIGKILL to every victim still running (its whole session)."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def bye(self, msg):
        """A failure that ends the test: stderr of every process, all killed, exit."""
        print("FAIL " + msg)
        self.dump(list(self.procs))
        self.kill_all()
        sys.exit(max(self.failures + 1, 1))
