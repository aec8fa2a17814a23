#!/bin/bash
# Several processes on one host share UDP 4791 (drivers/uring, share = yes): four droce-perf
# clients in one network namespace all bound to 10.97.N.1:4791, each with two QPs to one of four
# droce-perf servers in another namespace, all bound to 10.97.N.2:4791, over a veth pair. Every
# transfer runs at the same time with --verify (WRITE, READ, SEND and WRITE at sizes up to 1 MiB),
# as nobody. The kernel steers each datagram to the process that owns its BTH destination QP:
# were the steering wrong, QPs would see foreign traffic and stall (RETRY_EXC_ERR) or fail to
# verify; the processes leave at different times, so each leave must keep the others steered. The
# QPNs droce-perf prints carry four distinct slots on each side. Then two of four servers are
# killed at once mid-run, and the clients of the other two finish verified (the survivors repair
# the group: drivers/uring/README.md, "a member killed"). Then unmodified
# ibv_rc_pingpong pairs through droce's libibverbs.so.1 share it the same way. After they exit, no
# group table is left in /dev/shm. A process without share = yes is refused with the message.
# Needs root (namespaces, veth; the processes then run as nobody); exits 77 (skipped) without.
# usage: uring_share_test.sh PATH/TO/droce-perf [BUILD_DIR_OF_libibverbs.so.1]
set -u
bin=$1
libdir=${2:-}
[ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
command -v ip > /dev/null || { echo "no iproute2: skipped"; exit 77; }
command -v setpriv > /dev/null || { echo "setpriv missing (util-linux): skipped"; exit 77; }
timeout 10 ip netns list > /dev/null 2>&1 || { echo "ip netns unavailable: skipped"; exit 77; }

tag=us$$
nsa=droce-$tag-a
nsb=droce-$tag-b
va=du$$a
vb=du$$b
n=$(($$ % 250 + 1))
ipa=10.97.$n.1
ipb=10.97.$n.2
tmp=$(mktemp -d /tmp/droce-ushare.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
    timeout 10 ip netns del "$nsa" 2> /dev/null
    timeout 10 ip netns del "$nsb" 2> /dev/null
    [ -n "${keep:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT

timeout 10 ip netns add "$nsa" || { echo "cannot create network namespaces: skipped"; exit 77; }
timeout 10 ip netns add "$nsb" || { echo "cannot create network namespaces: skipped"; exit 77; }
timeout 10 ip link add "$va" netns "$nsa" type veth peer name "$vb" netns "$nsb" ||
    { echo "cannot create a veth pair: skipped"; exit 77; }
for x in "$nsa $va $ipa" "$nsb $vb $ipb"; do
    set -- $x
    timeout 10 ip -n "$1" link set lo up
    timeout 10 ip -n "$1" link set "$2" up
    timeout 10 ip -n "$1" addr add "$3/24" dev "$2"
done

# nobody must reach the binary (a build tree under a private home may be out of its reach).
if ! setpriv --reuid=nobody --regid=nogroup --clear-groups -- test -x "$bin"; then
    cp -L "$bin" "$tmp/droce-perf" && chmod 755 "$tmp/droce-perf"
    bin=$tmp/droce-perf
fi
if [ -n "$libdir" ] && ! setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
    test -r "$libdir/libibverbs.so.1"; then
    mkdir -p "$tmp/lib" && cp -L "$libdir/libibverbs.so.1" "$tmp/lib/" && chmod -R a+rX "$tmp/lib"
    libdir=$tmp/lib
fi
for side in a b; do
    ip=$ipa iface=$va
    [ $side = b ] && ip=$ipb iface=$vb
    cat > "$tmp/$side.ini" << INI
[device]
name = share-$side

[port0]
driver = uring
ip = $ip/24
interface = $iface
share = yes

[qp]
path_mtu = 1024
INI
done
sed '/^share/d' "$tmp/a.ini" > "$tmp/a-noshare.ini"
mkdir -p "$tmp/xdg"
chown nobody:nogroup "$tmp/xdg"
export XDG_RUNTIME_DIR=$tmp/xdg HOME=$tmp
as_nobody() { # NS COMMAND...
    local ns=$1
    shift
    ip netns exec "$ns" setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
}
uid=$(id -u nobody)
tables() { ls /dev/shm/droce-share-"$uid"-* 2> /dev/null; }
tables_before=$(tables)

failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

ops=(write read send write)
sizes=(65536 4097 4095 1048576)
tcp=$((30000 + $$ % 20000))
# Four servers sharing 10.97.N.2:4791, started one after another (slots 0..3).
for i in 0 1 2 3; do
    as_nobody "$nsb" timeout 50 "$bin" --server --once -c "$tmp/b.ini" -p $((tcp + i)) \
        > "$tmp/s$i.out" 2> "$tmp/s$i.err" &
    pids+=($!)
done
for i in 0 1 2 3; do
    for t in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/s$i.err" 2> /dev/null && break
        sleep 0.05
    done
    grep -q "waiting for a client" "$tmp/s$i.err" || fail "server $i not up: $(tail -2 "$tmp/s$i.err")"
done
# Four clients sharing 10.97.N.1:4791, all at once: each runs 2 s (a count of messages let a fast
# client end, and free its slot for the next one, before the last had joined). Four messages in flight per QP: eight
# processes poll on a small host, and an unprivileged socket buffer holds about 200 packets
# (net.core.rmem_max), so deeper windows only measure the host's loss recovery.
cpids=()
for i in 0 1 2 3; do
    as_nobody "$nsa" timeout 45 "$bin" "$ipb" -c "$tmp/a.ini" -p $((tcp + i)) --op "${ops[$i]}" \
        -s "${sizes[$i]}" -D 2 -q 2 -t 4 --bw --verify \
        > "$tmp/c$i.out" 2> "$tmp/c$i.err" &
    cpids+=($!)
    pids+=($!)
done
for i in 0 1 2 3; do
    wait "${cpids[$i]}"
    crc=$?
    line=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$tmp/c$i.out" | head -1)
    echo "== client $i (${ops[$i]} ${sizes[$i]} B for 2 s x 2 QPs): exit $crc: $line"
    if [ $crc != 0 ]; then
        fail "client $i exit $crc"
        tail -n 3 "$tmp/c$i.err" "$tmp/s$i.err"
    fi
    grep -q "data verified   : yes" "$tmp/c$i.out" || fail "client $i: data not verified"
done
for i in 0 1 2 3; do
    wait "${pids[$i]}" || fail "server $i exit $?: $(tail -2 "$tmp/s$i.err")"
done
# Each process's QPNs carry its slot in the top byte (QPN = slot << 16 | n): four distinct slots
# on each side, and every client talked to a server of another slot than its own or the same,
# as the join order fell.
slots() { # local|remote
    local i
    for i in 0 1 2 3; do
        sed -n "s/^ $1 address: QPN 0x\([0-9a-f]*\) .*/\1/p" "$tmp/c$i.out" | head -1 |
            while read -r q; do echo $((0x$q >> 16)); done
    done | sort -n | tr '\n' ' '
}
echo "slots: clients [$(slots local)] servers [$(slots remote)]"
[ "$(slots local)" = "0 1 2 3 " ] || {
    fail "client slots are not 0..3: [$(slots local)]"
    grep -H -E "QPN|share_|rx_foreign" "$tmp"/c?.out "$tmp"/c?.err | head -40
}
[ "$(slots remote)" = "0 1 2 3 " ] || fail "server slots are not 0..3: [$(slots remote)]"

# Two of four servers killed at once in the middle of their runs (SIGKILL: nothing leaves the
# group's table, and which one the kernel removed first, so where it moved the others, is
# unknown). The survivors' datagrams are then steered by a stale table: to the wrong member, or
# by the kernel's hash, fixed per QP. A survivor that receives frames of another slot finds the
# dead members' signs of life gone, asks each index who it is and rewrites the table and the
# program: the clients of the surviving servers finish with their data verified. (Without the
# repair a QP steered wrong stays wrong and fails with RETRY_EXC_ERR; all four QPs of the two
# clients right by the hash is one chance in 16.)
kpids=()
for i in 0 1 2 3; do
    as_nobody "$nsb" timeout 50 "$bin" --server --once -c "$tmp/b.ini" -p $((tcp + 40 + i)) \
        > "$tmp/ks$i.out" 2> "$tmp/ks$i.err" &
    kpids+=($!)
    pids+=($!)
    for t in $(seq 1 200); do
        grep -q "waiting for a client" "$tmp/ks$i.err" 2> /dev/null && break
        sleep 0.05
    done
done
kcpids=()
for i in 0 1 2 3; do
    as_nobody "$nsa" timeout 45 "$bin" "$ipb" -c "$tmp/a.ini" -p $((tcp + 40 + i)) --op write \
        -s 65536 -D 3 -q 2 -t 4 --bw --verify > "$tmp/kc$i.out" 2> "$tmp/kc$i.err" &
    kcpids+=($!)
    pids+=($!)
done
sleep 1
# The job started is a subshell (ip netns exec, setpriv, timeout): kill droce-perf itself.
kill_server() { # PORT
    local p killed=0
    for p in $(pgrep -f -- "--server --once -c $tmp/b.ini -p $1\$"); do
        [ "$(cat /proc/"$p"/comm 2> /dev/null)" = droce-perf ] || continue
        kill -KILL "$p" && killed=1
    done
    [ $killed = 1 ] || fail "no droce-perf server on TCP port $1 to kill"
}
kill_server $((tcp + 40))
kill_server $((tcp + 41))
for i in 2 3; do
    wait "${kcpids[$i]}"
    crc=$?
    line=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$tmp/kc$i.out" | head -1)
    echo "== client $i of a surviving server (write 65536 B for 3 s x 2 QPs): exit $crc: $line"
    [ $crc = 0 ] || fail "client $i of a surviving server: exit $crc: $(tail -n 2 "$tmp/kc$i.err")"
    grep -q "data verified   : yes" "$tmp/kc$i.out" ||
        fail "client $i of a surviving server: data not verified"
    wait "${kpids[$i]}" || fail "surviving server $i exit $?: $(tail -2 "$tmp/ks$i.err")"
done
for i in 0 1; do
    wait "${kcpids[$i]}"
    crc=$?
    why=$(grep -h -i -m1 -E "error|fail|retry" "$tmp/kc$i.out" "$tmp/kc$i.err" | head -1)
    echo "== client $i of a killed server: exit $crc ($why)"
    wait "${kpids[$i]}" 2> /dev/null
done

# The same through droce's libibverbs.so.1 (when given and ibv_rc_pingpong is installed): three
# unmodified ibv_rc_pingpong pairs sharing 4791 on both sides, at once. A verbs program never
# destroys droce's runtime: the library leaves the groups at exit. The first pair (index 0) ends
# first and the kernel moves the third into its index: the table it rewrote keeps the third
# steered (without it, the third's datagrams would go to the kernel's hash of two members).
if [ -n "$libdir" ] && command -v ibv_rc_pingpong > /dev/null; then
    vpids=()
    n_of() { [ "$1" = 0 ] && echo 50 || echo 300; }
    for i in 0 1 2; do
        DROCE_CONFIG=$tmp/b.ini LD_LIBRARY_PATH=$libdir as_nobody "$nsb" timeout 40 \
            ibv_rc_pingpong -g 0 -p $((tcp + 20 + i)) -n "$(n_of $i)" -s 4096 \
            > "$tmp/vs$i.out" 2>&1 &
        vpids+=($!)
        pids+=($!)
        sleep 0.2 # join in order: the first server gets index 0
    done
    sleep 1 # ibv_rc_pingpong retries its TCP connect only briefly: let the servers listen
    for i in 0 1 2; do
        DROCE_CONFIG=$tmp/a.ini LD_LIBRARY_PATH=$libdir as_nobody "$nsa" timeout 40 \
            ibv_rc_pingpong -g 0 -p $((tcp + 20 + i)) -n "$(n_of $i)" -s 4096 "$ipb" \
            > "$tmp/vc$i.out" 2>&1 &
        vpids+=($!)
        pids+=($!)
        sleep 0.2
    done
    for k in 0 1 2 3 4 5; do
        wait "${vpids[$k]}" || fail "ibv_rc_pingpong process $k exit $?"
    done
    for i in 0 1 2; do
        grep "iters in" "$tmp/vc$i.out" || { fail "pingpong $i: $(tail -n 3 "$tmp/vc$i.out")"; }
    done
else
    echo "no libibverbs.so.1 given or no ibv_rc_pingpong: the verbs pairs skipped"
fi

# Sharing off: a process that does not share is told how.
as_nobody "$nsa" timeout 20 "$bin" --server --once -c "$tmp/a.ini" -p $((tcp + 9)) > /dev/null \
    2> "$tmp/hold.err" &
hold=$!
pids+=($hold)
for t in $(seq 1 200); do
    grep -q "waiting for a client" "$tmp/hold.err" 2> /dev/null && break
    sleep 0.05
done
as_nobody "$nsa" timeout 20 "$bin" --server --once -c "$tmp/a-noshare.ini" -p $((tcp + 10)) \
    > /dev/null 2> "$tmp/noshare.err"
# The holder named (a process of the same user shows in /proc), and what to do.
grep -Eq "UDP port 4791 on $ipa is in use by PID [0-9]+ \(droce-perf\): stop it.*set share = yes" \
    "$tmp/noshare.err" || fail "share off: $(cat "$tmp/noshare.err")"
# The holder ends the ordinary way (a client's run), leaving its group as every member does.
as_nobody "$nsb" timeout 20 "$bin" "$ipa" -c "$tmp/b.ini" -p $((tcp + 9)) --op write -s 64 -n 10 \
    > /dev/null 2>&1 || fail "the holder's client failed"
wait "$hold" || fail "the holder exit $?"

# Nothing left behind: the last member of each group removed its table.
left=$(comm -13 <(echo "$tables_before") <(tables))
[ -z "$left" ] || fail "group tables left in /dev/shm: $left"

if [ $failures = 0 ]; then
    echo "PASS: four processes shared UDP 4791 on each side, all transfers verified"
    exit 0
fi
echo "FAIL: $failures failures"
exit 1
