# Sourced by the telemetry tests after tests/common/memif_pair.sh: fail() counts failures (the test
# exits with their count), and the EXIT trap stops a client still running ($client_pid) and then
# the memif pair.
client_pid=
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
cleanup_all() {
    [ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null
    memif_pair_cleanup
}
trap cleanup_all EXIT
