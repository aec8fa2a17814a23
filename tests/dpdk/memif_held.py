#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""memif_held.py DROCE_PERF SERVER_INI CLIENT_INI ROUNDS

A memif server held by a debugger while its peer leaves must not crash when it runs again.

Each round: droce-perf streams 64 KiB WRITEs from a client to a server over net_memif (copy
mode). The server's threads are attached with ptrace, one by one, as gdb attaches (each stops
where it is; its engine thread mostly inside a receive burst, copying out of the shared memory).
The client is killed: its end of the memif control channel closes. Then, as gdb may, the server's
threads are let go one by one, the engine thread last, a second after the others: the EAL
interrupt thread sees the channel end and DPDK 22.11's memif_disconnect() unmaps the shared
regions while the engine thread is still held inside its burst. Without droce's guard
(drivers/dpdk/memif_unmap_guard.h) the engine thread then faulted (SIGSEGV in librte_net_memif) in
3 of 4 gdb attaches; with it, the unmap waits until the burst ends.

Passes when, in every round, the server ends by itself within 10 s of the engine thread being let
go, with droce-perf's exit status for a client that went away (1): not by a signal, and not stuck
(a guard that waited for ever would be). Every process is ended on the way out. Needs ptrace rights over the server (root, or the same user with
kernel.yama.ptrace_scope 0); exits 77 (skipped) without them.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

PTRACE_ATTACH, PTRACE_DETACH = 16, 17
WALL = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def attach(tid):
    if libc.ptrace(PTRACE_ATTACH, tid, None, None) != 0:
        return False
    os.waitpid(tid, WALL)  # stopped
    return True


def detach(tid):
    libc.ptrace(PTRACE_DETACH, tid, None, None)


def memif_text(pid):
    """The address range of librte_net_memif's mappings in @pid (its code among them)."""
    lo, hi = 1 << 64, 0
    for line in open(f'/proc/{pid}/maps'):
        if 'librte_net_memif' in line:
            a, b = (int(x, 16) for x in line.split()[0].split('-'))
            lo, hi = min(lo, a), max(hi, b)
    return lo, hi


def threads(pid):
    out = {}
    for t in os.listdir(f'/proc/{pid}/task'):
        try:
            out[int(t)] = open(f'/proc/{pid}/task/{t}/comm').read().strip()
        except OSError:
            pass
    return out


def listening(port):
    # Not by connecting: droce-perf's --once server would take the probe for its client.
    out = subprocess.run(['ss', '-Hltn', f'sport = :{port}'], capture_output=True, text=True).stdout
    return bool(out.strip())


def stop(proc):
    """Ends @proc and everything it started, whatever state it is in."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def one_round(r, perf, server_ini, client_ini):
    """@return 'ok', 'fail' or 'skip' (the engine thread never caught inside net_memif), or None
    (no ptrace rights)."""
    port = 20000 + (os.getpid() + r) % 20000
    srv = subprocess.Popen([perf, '--server', '-c', server_ini, '-p', str(port), '--once'],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    cli = None
    held = []
    try:
        for _ in range(300):
            if listening(port) or srv.poll() is not None:
                break
            time.sleep(0.1)
        cli = subprocess.Popen([perf, '127.0.0.1', '-c', client_ini, '-p', str(port), '--op',
                                'write', '--bw', '-s', '65536', '-D', '30'],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        time.sleep(2)  # streaming by now
        if srv.poll() is not None:
            print(f'FAIL round {r}: the server ended before it was held ({srv.returncode})')
            print('\n'.join(srv.stderr.read().strip().splitlines()[-3:]))
            return 'fail'
        tids = threads(srv.pid)
        engine = [t for t, c in tids.items() if c == 'droce-engine']
        if not engine:
            print(f'FAIL round {r}: no droce-engine thread in the server ({sorted(tids.values())})')
            return 'fail'
        # Hold the threads at a moment the engine thread is inside net_memif's code (its burst):
        # /proc/TID/syscall reads "-1 SP PC" for a thread stopped outside a system call.
        lo, hi = memif_text(srv.pid)
        caught = False
        for _ in range(500):
            held = [t for t in tids if attach(t)]
            if not held:
                return None
            try:
                f = open(f'/proc/{srv.pid}/task/{engine[0]}/syscall').read().split()
                caught = f[0] == '-1' and lo <= int(f[2], 16) < hi
            except (OSError, IndexError, ValueError):
                caught = False
            if caught:
                break
            for t in held:
                detach(t)
            held = []
            time.sleep(0.002)
        if not caught:
            print(f'  round {r}: the engine thread was never caught inside net_memif (500 tries)')
            return 'skip'
        os.killpg(cli.pid, signal.SIGKILL)
        cli.wait()
        time.sleep(1)  # the client's end of the control channel is closed
        for t in held:
            if t not in engine:
                detach(t)
        time.sleep(1)  # the interrupt thread runs memif_disconnect meanwhile
        for t in held:
            if t in engine:
                detach(t)
        held = []
        # droce-perf's server ends by itself once its client is gone: exit 1. Not by a signal,
        # and not stuck (a guard that waited for ever would be).
        try:
            rc = srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            where = {c: open(f'/proc/{srv.pid}/task/{t}/wchan').read()
                     for t, c in threads(srv.pid).items()}
            print(f'FAIL round {r}: the server still runs 10 s after its engine thread was let go '
                  f'(threads in: {where})')
            return 'fail'
        if rc != 1:
            what = signal.Signals(-rc).name if rc < 0 else f'exit {rc}'
            print(f'FAIL round {r}: the server ended with {what} after its engine thread was let '
                  f'go (droce-perf says 1 when its client is gone); {len(tids)} threads held')
            print('\n'.join(srv.stderr.read().strip().splitlines()[-3:]))
            return 'fail'
        print(f'ok   round {r}: {len(tids)} server threads held (the engine thread inside '
              f'net_memif), the client killed, the engine thread let go last: the server exited '
              f'1 by itself')
        return 'ok'
    finally:
        for t in held:
            detach(t)
        if cli:
            stop(cli)
        stop(srv)


def main():
    perf, server_ini, client_ini, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    results = []
    for r in range(1, rounds + 1):
        res = one_round(r, perf, server_ini, client_ini)
        if res is None:
            print('SKIP: cannot ptrace the server (needs root or ptrace_scope 0)')
            return 77
        results.append(res)
    if results.count('skip') == rounds:
        print('SKIP: the engine thread was never caught inside net_memif')
        return 77
    failures = results.count('fail')
    print(f'failures: {failures}')
    print('PASS: memif server held while its peer left' if failures == 0 else
          'FAIL: memif server held while its peer left')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
