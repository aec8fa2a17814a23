#!/bin/bash
# A memif server held by a debugger while its peer leaves (memif_held.py says how) must not crash
# when it runs again: private copies of the shipped memif configs (copy mode), ROUNDS rounds.
# usage: memif_held_test.sh PATH/TO/droce-perf CONFIG_DIR [ROUNDS]
set -u
bin=$1
cfg=$2
rounds=${3:-4}
tag=held$$
. "$(dirname "$0")/../common/memif_pair.sh"
memif_pair_setup "$cfg" # $tmp/server.ini, $tmp/client.ini; the EXIT trap cleans up
/usr/bin/python3 "$(dirname "$0")/memif_held.py" "$bin" "$tmp/server.ini" "$tmp/client.ini" "$rounds"
