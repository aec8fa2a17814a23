# Shared by the system tests that change a link in the middle of a droce-perf run (sourced).
#
# at_progress_line ERR_FILE PID SECOND COMMAND...
#   Waits until the droce-perf client writing ERR_FILE (its stderr; with --json the per-second
#   progress lines go there) has printed its SECOND-second line (" [  3.0 s] ..."), then runs
#   COMMAND once. Returns COMMAND's status; 1 when PID ended first or no such line came within
#   20 s.
at_progress_line() {
    local err=$1 pid=$2 second=$3
    shift 3
    local _
    for _ in $(seq 1 400); do
        if grep -q "^ \[ *$second\.[0-9] s\]" "$err" 2> /dev/null; then
            "$@"
            return
        fi
        kill -0 "$pid" 2> /dev/null || return 1
        sleep 0.05
    done
    return 1
}
