# SPDX-License-Identifier: BSD-3-Clause
"""wire-victim processes driven over their stdin/stdout, and the check lines of the hostile tests
(wire_attack.py, peer_kill.py): one copy of what both referees need."""
import json
import select
import subprocess
import sys
import time


class Victims:
    """wire-victim processes by name; outputs in TMP/NAME.{err,json}; a count of failed checks."""

    def __init__(self, victim, tmp):
        self.victim, self.tmp = victim, tmp
        self.procs = {}
        self.failures = 0

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
        p = subprocess.Popen([*prefix, self.victim, "--config", f"{self.tmp}/{cfg}.ini", "--info",
                              f"{self.tmp}/{name}.json", *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                             bufsize=1)
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
        """NAME's status line, parsed."""
        p = self.procs[name]
        if not self.command(name, "status"):
            raise RuntimeError(f"{name} has exited")
        r, _, _ = select.select([p.stdout], [], [], 20)
        if not r:
            raise RuntimeError(f"{name}: no status line")
        return json.loads(p.stdout.readline())

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

    def bye(self, msg):
        """A failure that ends the test: stderr of every process, all killed, exit."""
        print("FAIL " + msg)
        self.dump(list(self.procs))
        for p in self.procs.values():
            p.kill()
        sys.exit(max(self.failures, 1))
