#!/usr/bin/env bash
# Fails when a C++ source file of the repository differs from what clang-format-14 makes of it with
# the repository's .clang-format. Fix with: git ls-files '*.cc' '*.h' | xargs clang-format-14 -i
set -euo pipefail
cd "$1"
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then
  echo "clang-format not installed (./droce installs it)"
  exit 77
fi
bad=0
while IFS= read -r f; do
  if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    bad=$((bad + 1))
  fi
done < <(git ls-files '*.cc' '*.h' 2>/dev/null || find lib drivers apps tests bench -name '*.cc' -o -name '*.h')
echo "$bad file(s) not formatted"
[ "$bad" -eq 0 ]
