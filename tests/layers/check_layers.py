#!/usr/bin/python3
"""Fails when a source file includes a header from a higher layer.

The layers are the `droce_layers` list of the top-level meson.build, lowest first: a file in one
component may include headers of its own component and of those listed before it, never of one
listed after it, and nothing under lib/ or drivers/ may include from apps/ or tests/.

    check_layers.py SOURCE_ROOT       check the tree, print every violation, exit 1 if any
    check_layers.py --self-test       check a scratch tree with one upward include (must be caught)
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = ('.h', '.hh', '.hpp', '.cc', '.cpp', '.c')


def read_layers(root):
    text = open(os.path.join(root, 'meson.build')).read()
    m = re.search(r'droce_layers\s*=\s*\[(.*?)\]', text, re.S)
    if not m:
        raise SystemExit('meson.build: no droce_layers list')
    return re.findall(r"'([^']+)'", m.group(1))


def component_of(rel, layers):
    best = None
    for c in layers:
        if rel == c or rel.startswith(c + '/'):
            if best is None or len(c) > len(best):
                best = c
    return best


def resolve(root, including_dir, inc):
    """Where a quoted include points: the including file's directory first, then the include
    roots the build uses (lib/, drivers/)."""
    for base in (including_dir, os.path.join(root, 'lib'), os.path.join(root, 'drivers')):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(p):
            return os.path.relpath(p, root)
    return None


def check(root):
    layers = read_layers(root)
    rank = {c: i for i, c in enumerate(layers)}
    problems = []
    checked = 0
    for top in ('lib', 'drivers', 'apps'):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                mine = component_of(rel, layers)
                if mine is None:
                    problems.append(f'{rel}: in no component of droce_layers (meson.build)')
                    continue
                checked += 1
                for n, line in enumerate(open(path, encoding='utf-8', errors='replace'), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = resolve(root, dirpath, m.group(1))
                    if target is None:
                        problems.append(f'{rel}:{n}: "{m.group(1)}" is no file of the tree')
                        continue
                    theirs = component_of(target, layers)
                    if target.startswith(('tests/', 'bench/')) or (theirs == 'apps' and mine != 'apps'):
                        problems.append(f'{rel}:{n}: includes {target} (apps/tests are above every library)')
                    elif theirs is None:
                        problems.append(f'{rel}:{n}: includes {target}, in no component')
                    elif rank[theirs] > rank[mine]:
                        problems.append(f'{rel}:{n}: {mine} includes {target} of {theirs}, a higher layer')
    return checked, problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, 'lib/low'))
        os.makedirs(os.path.join(d, 'lib/high'))
        os.makedirs(os.path.join(d, 'apps/tool'))
        open(os.path.join(d, 'meson.build'), 'w').write("droce_layers = ['lib/low', 'lib/high', 'apps']\n")
        open(os.path.join(d, 'lib/high/h.h'), 'w').write('#include "low/l.h"\n')  # down: fine
        open(os.path.join(d, 'apps/tool/t.h'), 'w').write('#pragma once\n')
        open(os.path.join(d, 'lib/low/l.h'), 'w').write('#include "high/h.h"\n#include "../../apps/tool/t.h"\n')
        _, problems = check(d)
        assert len(problems) == 2, problems
        assert 'higher layer' in problems[0] and 'apps/tests' in problems[1], problems
    print('self-test: an upward include and an include of apps/ are both reported')


if __name__ == '__main__':
    if sys.argv[1:] == ['--self-test']:
        self_test()
        sys.exit(0)
    checked, problems = check(sys.argv[1])
    for p in problems:
        print(p)
    print(f'{checked} files checked, {len(problems)} layering violations')
    sys.exit(1 if problems else 0)
