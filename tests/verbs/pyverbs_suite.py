#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Runs Debian's pyverbs test suite (rdma-core 44, /usr/share/doc/rdma-core/tests) on droce.

The suite is copied into the build tree and gunzipped, then each module runs in its own
/usr/bin/python3 process (a crash or hang in one module costs only that module) with
LD_LIBRARY_PATH pointing at droce's libibverbs.so.1. Prints pass / fail / skip per module and
every test that did not pass with its reason, writes JSON, and acts as a regression gate: every
test named in the expected-pass file must pass (exit 1 otherwise). A test that passes but is not
in the file is reported as newly passing, so the file can be extended.

Usage: pyverbs_suite.py --build BUILD --dev DEVICE [--config INI] [--expect FILE] [--json OUT]
                        [--update-expect] [MODULE ...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import unittest

SUITE_SRC = '/usr/share/doc/rdma-core/tests'
MODULES = ['test_device', 'test_pd', 'test_cq', 'test_cq_events', 'test_cqex', 'test_mr', 'test_qp',
           'test_qpex', 'test_atomic', 'test_addr']
MODULE_TIMEOUT_S = 300


def prepare_suite(build_dir):
    """Copies the suite under BUILD/pyverbs/tests and gunzips it. Returns that directory."""
    import gzip
    root = os.path.join(build_dir, 'pyverbs')
    dest = os.path.join(root, 'tests')
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(root, exist_ok=True)
    shutil.copytree(SUITE_SRC, dest)
    for name in os.listdir(dest):
        if name.endswith('.gz'):
            path = os.path.join(dest, name)
            with gzip.open(path, 'rb') as src, open(path[:-3], 'wb') as out:
                shutil.copyfileobj(src, out)
            os.unlink(path)
    return dest


class Collect(unittest.TestResult):
    """Keeps one outcome per test id: pass, fail (failure or error) or skip, with the reason."""

    def __init__(self):
        super().__init__()
        self.outcomes = {}

    def addSuccess(self, test):
        self.outcomes[test.id()] = ('pass', '')

    def addFailure(self, test, err):
        self.outcomes[test.id()] = ('fail', self._exc_info_to_string(err, test).strip().splitlines()[-1])

    def addError(self, test, err):
        self.outcomes[test.id()] = ('fail', self._exc_info_to_string(err, test).strip().splitlines()[-1])

    def addSkip(self, test, reason):
        self.outcomes[test.id()] = ('skip', str(reason).splitlines()[0] if reason else '')

    def addExpectedFailure(self, test, err):
        self.outcomes[test.id()] = ('skip', 'expected failure')

    def addUnexpectedSuccess(self, test):
        self.outcomes[test.id()] = ('pass', 'unexpected success')


def run_module_in_child(suite_dir, module, dev):
    """Child mode: loads the suite as run_tests.py does, runs one module, prints JSON outcomes."""
    sys.path.insert(0, suite_dir)
    from importlib.machinery import SourceFileLoader
    from args_parser import parser
    sys.argv = ['run_tests.py', '--dev', dev]
    parser.parse_args()
    tests = SourceFileLoader('tests', os.path.join(suite_dir, '__init__.py')).load_module()
    suite = unittest.TestLoader().loadTestsFromModule(getattr(tests, module))
    result = Collect()
    suite.run(result)
    sys.stdout.write('PYVERBS-RESULT ' + json.dumps(result.outcomes) + '\n')


def run_module(suite_dir, module, dev, env):
    """Runs one module in a child; a crash or timeout marks the module's run as failed."""
    cmd = [sys.executable, os.path.abspath(__file__), '--child', suite_dir, '--dev', dev, module]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=MODULE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {f'tests.{module}': ('fail', f'module timed out after {MODULE_TIMEOUT_S} s')}
    for line in p.stdout.splitlines():
        if line.startswith('PYVERBS-RESULT '):
            return {k: tuple(v) for k, v in json.loads(line[len('PYVERBS-RESULT '):]).items()}
    tail = (p.stderr.strip().splitlines() or ['no output'])[-1]
    return {f'tests.{module}': ('fail', f'module exited with status {p.returncode}: {tail}')}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--build', help='droce build directory (holds lib/verbs/libibverbs.so.1)')
    ap.add_argument('--dev', required=True, help='droce device name')
    ap.add_argument('--config', help='DROCE_CONFIG for the library (default: the library\'s own)')
    ap.add_argument('--expect', help='file of test ids that must pass (regression gate)')
    ap.add_argument('--update-expect', action='store_true', help='rewrite --expect with what passed')
    ap.add_argument('--json', help='write the outcomes here')
    ap.add_argument('--child', metavar='SUITE_DIR', help=argparse.SUPPRESS)
    ap.add_argument('modules', nargs='*', default=MODULES)
    a = ap.parse_args()

    if a.child:
        run_module_in_child(a.child, a.modules[0], a.dev)
        return 0
    if not a.build:
        ap.error('--build is required')
    suite_dir = prepare_suite(a.build)
    env = dict(os.environ)
    libdir = os.path.join(os.path.abspath(a.build), 'lib', 'verbs')
    env['LD_LIBRARY_PATH'] = libdir + (':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else '')
    if a.config:
        env['DROCE_CONFIG'] = os.path.abspath(a.config)

    outcomes = {}
    print(f'{"module":<16} {"pass":>5} {"fail":>5} {"skip":>5}')
    totals = [0, 0, 0]
    for module in a.modules:
        res = run_module(suite_dir, module, a.dev, env)
        outcomes.update(res)
        counts = [sum(1 for v in res.values() if v[0] == k) for k in ('pass', 'fail', 'skip')]
        totals = [t + c for t, c in zip(totals, counts)]
        print(f'{module:<16} {counts[0]:>5} {counts[1]:>5} {counts[2]:>5}', flush=True)
    print(f'{"total":<16} {totals[0]:>5} {totals[1]:>5} {totals[2]:>5}')

    failed = sorted(k for k, v in outcomes.items() if v[0] == 'fail')
    if failed:
        print('\nnot passing:')
        for k in failed:
            print(f'  FAIL {k}: {outcomes[k][1]}')
    skip_reasons = {}
    for k, v in outcomes.items():
        if v[0] == 'skip':
            skip_reasons[v[1]] = skip_reasons.get(v[1], 0) + 1
    if skip_reasons:
        print('\nskip reasons:')
        for reason, n in sorted(skip_reasons.items(), key=lambda kv: -kv[1]):
            print(f'  {n:4} {reason}')
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'modules': a.modules, 'totals': dict(zip(('pass', 'fail', 'skip'), totals)),
                       'outcomes': {k: {'result': v[0], 'reason': v[1]} for k, v in outcomes.items()}}, f, indent=1)

    passed = {k for k, v in outcomes.items() if v[0] == 'pass'}
    if a.expect and a.update_expect:
        with open(a.expect, 'w') as f:
            f.write('# pyverbs tests that pass on droce: tests/verbs/pyverbs_suite.py fails if one stops passing.\n')
            f.write('# Regenerate with --update-expect after a change that makes more pass.\n')
            for k in sorted(passed):
                f.write(k + '\n')
        print(f'\nwrote {len(passed)} ids to {a.expect}')
        return 0
    if a.expect:
        with open(a.expect) as f:
            expected = {ln.strip() for ln in f if ln.strip() and not ln.startswith('#')}
        expected = {k for k in expected if k.split('.')[1] in a.modules}
        regressed = sorted(expected - passed)
        newly = sorted(passed - expected)
        for k in newly:
            print(f'  newly passing (add to {os.path.basename(a.expect)}): {k}')
        if regressed:
            print(f'\nREGRESSION: {len(regressed)} expected-pass tests did not pass:')
            for k in regressed:
                print(f'  {k}: {outcomes.get(k, ("missing", "not run"))[1]}')
            return 1
        print(f'\ngate: all {len(expected)} expected-pass tests passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
