#!/bin/bash
# The Debian package, installed and used as a user would: packaging/build-deb builds
# droce_<version>_<arch>.deb from this build directory (no rebuild), dpkg installs it into an empty
# root, and a mount namespace shows that root's /usr and /etc over the system's (overlay mounts)
# with the source and build trees hidden under empty tmpfs mounts. There, from the installed files
# only: droce-run --help, every tool's --help, --version and man page (man -w), `droce-run
# ibv_devinfo` on the installed default config (/etc/droce/demo.ini), a droce-perf pair and an
# ibv_rc_pingpong pair through droce-run over uring ports on loopback (configs made from
# /etc/droce/uring-*.ini); the running processes' maps must name the installed files and nothing of
# the trees. Then dpkg removes and purges it. Before that: every program in /usr/bin has a man page
# that `man -l --warnings` renders at 80 columns with no warning.
# Needs root (mount namespace, overlay); exit 77 (skipped) without it, without ibverbs-utils, or
# when the build directory's prefix is not /usr (the package's paths are compiled in).
# usage: package_test.sh BUILD_DIR SOURCE_DIR BUILD_DEB
set -u
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
build_deb=$3
unset LD_LIBRARY_PATH DROCE_CONFIG # meson test points LD_LIBRARY_PATH at the build tree: not here
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (mount namespace, overlay mounts)"; exit 77; }
for t in unshare dpkg-deb dpkg-shlibdeps ibv_devinfo ibv_rc_pingpong; do
    command -v $t > /dev/null || { echo "SKIP: $t missing"; exit 77; }
done
# What meson introspect says, read from the files it reads (meson introspect itself takes seconds)
read -r prefix version < <(/usr/bin/python3 -c 'import json,sys
opts = json.load(open(sys.argv[1] + "/meson-info/intro-buildoptions.json"))
info = json.load(open(sys.argv[1] + "/meson-info/intro-projectinfo.json"))
print(next(o["value"] for o in opts if o["name"] == "prefix"), info["version"])' "$build")
[ "$prefix" = /usr ] ||
    { echo "SKIP: $build has prefix $prefix (./droce build and ./droce package use /usr)"; exit 77; }
arch=$(dpkg --print-architecture)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2> /dev/null || gcc -print-multiarch)

tmp=$(mktemp -d /tmp/droce-package.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# ---- build the package
t0=$(date +%s%N)
elapsed() { echo "$((($(date +%s%N) - t0) / 1000000)) ms"; }
deb=$("$build_deb" "$build" "$tmp/out") || { echo "FAIL: build-deb"; exit 1; }
echo "built $(basename "$deb") ($(($(stat -c %s "$deb") / 1024)) KiB) in $((($(date +%s%N) - t0) / 1000000)) ms"
[ "$(basename "$deb")" = "droce_${version}_${arch}.deb" ] || fail "package name $(basename "$deb")"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version: $(dpkg-deb -f "$deb" Version)"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libc6 'libstdc++6' liburing2 libisal2 librte-eal23 librte-ethdev23 libpcap0.8; do
    [[ ", $depends," == *", $lib "* ]] || fail "Depends lacks $lib"
done
[[ ", $depends," == *", libibverbs1 "* ]] && fail "Depends names the system libibverbs1"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$tmp/contents"
for f in /usr/bin/droce-run /usr/bin/droce-perf /usr/bin/droce-trace /usr/bin/droce-stat \
    /usr/bin/droce-burnin /usr/bin/droce-mrcctl /usr/bin/droce-doctor "/usr/lib/$ma/droce/libibverbs.so.1" \
    "/usr/lib/$ma/droce/lib_mrc.so" "/usr/lib/$ma/droce/libmrc.so" /usr/include/droce/mrc.h \
    /usr/include/droce/mrc_ctl.h /etc/droce/demo.ini /etc/droce/uring-a.ini /etc/droce/pci-nic.ini \
    /etc/droce/af-xdp.ini /etc/droce/memif-zc-client.ini /etc/droce/memif-zc-server.ini \
    /usr/share/doc/droce/copyright; do
    grep -qx "$f" "$tmp/contents" || fail "package lacks $f"
done
grep -E "^/usr/lib/($ma/)?libibverbs" "$tmp/contents" && fail "package would shadow the system libibverbs"
dpkg-deb -I "$deb" conffiles | grep -qx /etc/droce/demo.ini || fail "/etc/droce/demo.ini not a conffile"
# Every program in /usr/bin has its section-1 man page (help2man at build time), gzipped
tools=$(sed -n 's|^/usr/bin/||p' "$tmp/contents" | grep -v '^$' | sort)
[ "$(echo "$tools" | wc -w)" -ge 7 ] || fail "only $(echo $tools) in /usr/bin"
for t in $tools; do
    grep -qx "/usr/share/man/man1/$t.1.gz" "$tmp/contents" || fail "no man page for $t"
done

# ---- install it into an empty root with dpkg (its dependencies are the host's: --force-depends)
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --log="$tmp/dpkg.log" --force-depends -i "$deb" > "$tmp/dpkg.out" 2>&1 ||
    { cat "$tmp/dpkg.out"; echo "FAIL: dpkg -i"; exit 1; }
dpkg --root="$root" -s droce | grep -q '^Status: install ok installed' || fail "dpkg -s: not installed"
# Each man page renders without a groff or man warning at 80 columns and says what --help and
# --version say (its NAME line, its options, the version).
if command -v man > /dev/null; then
    for t in $tools; do
        page=$root/usr/share/man/man1/$t.1.gz
        [ -f "$page" ] || continue
        warn=$(MANWIDTH=80 man -l --warnings "$page" 2>&1 > /dev/null)
        [ -z "$warn" ] || fail "man -l $t.1.gz warns: $warn"
        MANWIDTH=80 man -l "$page" 2> /dev/null > "$tmp/$t.man"
        grep -q "^NAME" "$tmp/$t.man" && grep -q "^SYNOPSIS" "$tmp/$t.man" &&
            grep -q "^SEE ALSO" "$tmp/$t.man" || fail "$t.1: no NAME, SYNOPSIS or SEE ALSO"
        grep -Eq "^ +$t +- " "$tmp/$t.man" || fail "$t.1: NAME is not '$t - ...'"
        grep -q -- "--help" "$tmp/$t.man" || fail "$t.1: no --help"
        grep -q "droce $version" "$tmp/$t.man" || fail "$t.1: no 'droce $version' in its footer"
    done
    grep -q -- "--inline-progress" "$tmp/droce-perf.man" || fail "droce-perf.1 lacks --inline-progress"
    grep -q -- "--snaplen" "$tmp/droce-stat.man" || fail "droce-stat.1 lacks its capture subcommand"
    echo "man pages: $(echo $tools | wc -w), each rendered by man -l with no warning"
else
    fail "man (man-db) missing: cannot render the man pages"
fi
echo "installed into $root at $(elapsed)"

# ---- use it in a mount namespace where /usr and /etc hold the installed files over the system's
# and neither tree is reachable
x=$((1 + $$ % 250))
cat > "$tmp/inner.sh" <<'INNER'
set -u
root=$1 src=$2 build=$3 ma=$4 work=$5 x=$6 version=$7
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
mount -t overlay overlay -o "lowerdir=$root/usr:/usr" /usr || exit 1
mount -t overlay overlay -o "lowerdir=$root/etc:/etc" /etc || exit 1
mount -t tmpfs -o size=1m,mode=0755 none "$src" || exit 1
[ -d "$build" ] && { mount -t tmpfs -o size=1m,mode=0755 none "$build" || exit 1; }
# The EAL of the default config (demo.ini) makes its runtime directory in /run/dpdk: a private /run
# takes it away with the namespace.
mount -t tmpfs -o size=16m,mode=0755 none /run || exit 1
[ -z "$(ls -A "$src")" ] || fail "the source tree is still reachable"
cd "$work" || exit 1
hash -r

droce-run --help | grep -q "^Usage: droce-run" || fail "droce-run --help"
droce-run --version | grep -q "droce" || fail "droce-run --version"
for t in droce-run droce-perf droce-trace droce-stat droce-burnin droce-mrcctl droce-doctor; do
    [ "$(command -v $t)" = "/usr/bin/$t" ] || fail "$t is $(command -v $t)"
    $t --help > help.out 2>&1 || fail "$t --help: exit $?"
    grep -qi "usage" help.out || fail "$t --help prints no usage"
    $t --version > version.out 2>&1 || fail "$t --version: exit $?"
    [ "$(cat version.out)" = "$t (droce) $version" ] || fail "$t --version: $(cat version.out)"
    [ "$(man -w $t 2> /dev/null)" = "/usr/share/man/man1/$t.1.gz" ] || fail "man -w $t: $(man -w $t 2>&1)"
done
droce-run -c no-such-config true 2> err.out && fail "droce-run -c no-such-config succeeded"
grep -q "no config file" err.out || fail "droce-run -c no-such-config: $(cat err.out)"
droce-run ldd "$(command -v ibv_devinfo)" | grep -q "libibverbs.so.1 => /usr/lib/$ma/droce/libibverbs.so.1" ||
    fail "droce-run does not load the installed libibverbs.so.1"
ldd "$(command -v ibv_devinfo)" | grep -q "libibverbs.so.1 => /usr/lib/$ma/droce/" &&
    fail "without droce-run the installed libibverbs.so.1 shadows the system one"

# The installed default config: /etc/droce/demo.ini, two devices in one process (no DROCE_CONFIG)
(unset DROCE_CONFIG; timeout 40 droce-run ibv_devinfo > devinfo.out 2>&1) || fail "droce-run ibv_devinfo: exit $?"
grep -Eq "hca_id:[[:space:]]+droce_a" devinfo.out && grep -Eq "hca_id:[[:space:]]+droce_b" devinfo.out &&
    grep -q "PORT_ACTIVE" devinfo.out || { fail "droce-run ibv_devinfo"; cat devinfo.out; }

# uring configs of this run: the installed ones on loopback addresses of our own
for side in a b; do
    n=1; [ $side = b ] && n=2
    sed "s|^ip = 127.0.0.[12]/8|ip = 127.77.$x.$n/8|" "/etc/droce/uring-$side.ini" > $side.ini
    grep -q "^ip = 127.77.$x.$n/8" $side.ini || fail "uring-$side.ini: no ip line to change"
done
tcp_port=$((42000 + x * 7))

# maps_check PID WHAT FILE: the program timeout PID runs maps FILE and nothing of either tree
maps_check() {
    local child
    child=$(pgrep -P "$1" | head -1)
    [ -n "$child" ] || { fail "$2 is not running"; return; }
    grep -q " $3\$" /proc/$child/maps || fail "$2 does not map $3"
    grep -Eq " ($src|$build)/" /proc/$child/maps && fail "$2 maps a file of the trees"
}

timeout 40 droce-perf --server -c b.ini -p $tcp_port > perf.server 2>&1 &
spid=$!
sleep 1
[ -d /proc/$spid ] && maps_check $spid "droce-perf server" /usr/bin/droce-perf
timeout 30 droce-perf 127.77.$x.2 -c a.ini -p $tcp_port --op write -s 65536 -n 500 --bw --verify \
    > perf.client 2>&1 || { fail "droce-perf client: exit $?"; tail -5 perf.client perf.server; }
kill $spid 2> /dev/null; wait $spid 2> /dev/null
grep -i "gb/s\|verified" perf.client | head -3

pp="ibv_rc_pingpong -g 0 -p $((tcp_port + 1)) -n 200 -s 4096"
timeout 40 droce-run -c b.ini $pp > pp.server 2>&1 &
spid=$!
sleep 1
[ -d /proc/$spid ] && maps_check $spid "droce-run ibv_rc_pingpong" "/usr/lib/$ma/droce/libibverbs.so.1"
timeout 30 droce-run -c a.ini $pp 127.77.$x.2 > pp.client 2>&1 || { fail "ibv_rc_pingpong client: exit $?"; tail -5 pp.client pp.server; }
wait $spid || fail "ibv_rc_pingpong server: exit $?"
grep "iters in" pp.client || fail "ibv_rc_pingpong: no iteration line"
exit $failures
INNER
mkdir -p "$tmp/work"
unshare -m --propagation private bash "$tmp/inner.sh" "$root" "$src" "$build" "$ma" "$tmp/work" "$x" "$version"
rc=$?
[ $rc = 0 ] || fail "in the namespace: $rc failure(s)"
echo "used from the namespace at $(elapsed)"

# ---- remove keeps the conffiles, purge removes everything
dpkg --root="$root" --log="$tmp/dpkg.log" -r droce > "$tmp/dpkg.out" 2>&1 || fail "dpkg -r"
[ -e "$root/usr/lib/$ma/droce/libibverbs.so.1" ] && fail "dpkg -r left libibverbs.so.1"
[ -e "$root/etc/droce/demo.ini" ] || fail "dpkg -r removed a conffile"
dpkg --root="$root" --log="$tmp/dpkg.log" -P droce > "$tmp/dpkg.out" 2>&1 || fail "dpkg -P"
left=$(cd "$root" && find usr etc -type f 2> /dev/null | head -3)
[ -z "$left" ] || fail "dpkg -P left $left"
echo "removed and purged at $(elapsed)"
echo "failures: $failures"
[ $failures = 0 ]
