#!/bin/bash
# Interoperability of the io_uring socket driver (drivers/uring) with the DPDK net_af_packet driver
# over one veth pair between two network namespaces:
#   - side A: droce-perf on a uring port (as nobody) bound to the kernel's address $ip_a on $va, a
#     private copy of config/uring-netns-a.ini;
#   - side B: droce-perf on net_af_packet bound to $vb (as root: a packet socket), a private copy of
#     config/netns-b.ini whose droce address $ip_d the kernel of B does not own (the kernel holds
#     $ip_b for droce-perf's TCP channel); droce answers ARP for $ip_d and asks the kernel of A for
#     $ip_a;
#   - one direction per run (SERVER_SIDE afp: uring client -> af_packet server; uring: the
#     reverse; meson runs both, as two tests that each stay short): RDMA WRITE (4097 bytes, two QPs:
#     two source ports), READ (64 KiB), SEND (4095 bytes) and FETCH_ADD, each with --verify;
#   - a capture of the veth (dumpcap in A, classic pcap) over all of it, in which: droce-trace
#     accepts every RoCEv2 frame with ICRC ok; tshark decodes each as InfiniBand (none malformed,
#     no UDP 4791 frame left undecoded; its Ethernet-over-IB payload heuristic is off: it takes a
#     1-byte payload for an Ethernet header and calls the frame malformed) and the ICRC tshark shows
#     equals one computed here over the frame's own bytes (tshark 4.0 shows the field, it does not
#     check it); both ends send IPv4 ID 0 with DF (what the uring receive rebuilds); and every frame's UDP source port is the QP's
#     entropy, rdma_get_udp_sport(0, lqpn, rqpn) = 0xC000 | fold14(fold20(lqpn * rqpn))
#     (lib/wire/udp_sport.h), from the QPNs each client printed and the BTH dest QPs captured;
#     droce's own probes (TVer 15) are told apart: the uring side's GSO probes (gso = auto asks
#     its peer), which the af_packet side never answers, so no GSO send follows (no frame longer
#     than the veth's MTU) and the probes stay few (five 100 ms apart per process, then one per 2 s).
# Root only (namespaces, af_packet; exit 77 otherwise), exit 77 without dumpcap/tshark; the trap
# removes the namespaces, the files and the EAL runtime directory.
# usage: uring_interop_test.sh afp|uring PATH/TO/droce-perf PATH/TO/droce-trace SOURCE_DIR
set -u
srv_side=$1
bin=$2
trace=$3
cfg=$4/config
case $srv_side in afp | uring) ;; *) echo "usage: $0 afp|uring droce-perf droce-trace srcdir"; exit 2 ;; esac
here=$(dirname "$0")
. "$here/common.sh"
. "$here/netns.sh"
command -v dumpcap > /dev/null && command -v tshark > /dev/null || { echo "no dumpcap/tshark: skipped"; exit 77; }
uring_netns_setup uinterop
tag=uinterop-$$
trap 'uring_netns_cleanup; rm -rf "/var/run/dpdk/droce-$tag"' EXIT
ubin=$(reachable "$bin")
ip_d=$net.3
# Private copies of the shipped pair, config/uring-netns-a.ini (uring) and netns-b.ini (af_packet).
sed -e "s|^ip = 10\.2\.0\.1/24|ip = $ip_a/24|" -e "s|^interface = veth0|interface = $va|" \
    "$cfg/uring-netns-a.ini" > "$tmp/a.ini"
sed -e "s|iface=veth1|iface=$vb|" -e "s|--file-prefix=droce-netns-b|--file-prefix=droce-$tag|" \
    -e "s|^ip = 10\.2\.0\.2/24|ip = $ip_d/24|" -e '/^10\.2\.0\.[0-9]* *=/d' "$cfg/netns-b.ini" > "$tmp/d.ini"
if cat "$tmp/d.ini" "$tmp/a.ini" | grep -v '^ *#' | grep -q '10\.2\.0\.\|veth[01]\|droce-netns'; then
    echo "FAIL: a config copy still names the shipped interface, prefix or address"
    exit 1
fi
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# dumpcap drops root's right to write in the directory of nobody: a directory of its own.
mkdir -m 777 "$tmp/cap"
cap=$tmp/cap/veth.pcap
in_a timeout 120 dumpcap -q -P -i "$va" -w "$cap" > /dev/null 2> "$tmp/dumpcap.err" &
cap_pid=$!
pids="$pids $cap_pid"
for _ in $(seq 1 200); do
    grep -q "Capturing on" "$tmp/dumpcap.err" 2> /dev/null && break
    kill -0 "$cap_pid" 2> /dev/null || break
    sleep 0.05
done
grep -q "Capturing on" "$tmp/dumpcap.err" || { echo "FAIL: dumpcap did not start"; cat "$tmp/dumpcap.err"; exit 1; }

# run_pair NAME SERVER_SIDE CLIENT_ARGS...: SERVER_SIDE uring (server in A, client on af_packet in
# B) or afp (the reverse). Appends "client_ip server_ip lqpn rqpn" to $tmp/qps for the checks.
run_pair() {
    local name=$1 side=$2
    shift 2
    local srv=(in_b timeout 40 "$bin" --server --once -c "$tmp/d.ini") cli=(in_a $run timeout 30 "$ubin" "$ip_b" -c "$tmp/a.ini")
    local cip=$ip_a sip=$ip_d
    if [ "$side" = uring ]; then
        srv=(in_a $run timeout 40 "$ubin" --server --once -c "$tmp/a.ini")
        cli=(in_b timeout 30 "$bin" "$ip_a" -c "$tmp/d.ini")
        cip=$ip_d sip=$ip_a
    fi
    "${srv[@]}" -p "$tcp_port" > "$tmp/$name.server" 2> "$tmp/$name.server.err" &
    local spid=$!
    local _
    for _ in $(seq 1 400); do
        grep -q "waiting for a client" "$tmp/$name.server.err" 2> /dev/null && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.05
    done
    if ! kill -0 "$spid" 2> /dev/null; then
        wait "$spid"
        echo "== $name: the server exited $? before a client came"
        tail -n 5 "$tmp/$name.server.err"
        return 1
    fi
    "${cli[@]}" -p "$tcp_port" "$@" > "$tmp/$name.client" 2> "$tmp/$name.client.err"
    local crc=$?
    [ $crc = 0 ] || kill "$spid" 2> /dev/null
    wait "$spid"
    local src=$?
    echo "== $name: client $crc server $src: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$tmp/$name.client" | head -1)"
    if [ $crc != 0 ] || [ $src != 0 ]; then
        tail -n 5 "$tmp/$name.client.err" "$tmp/$name.server.err" "$tmp/$name.server"
        return 1
    fi
    grep -q "data verified   : yes" "$tmp/$name.client" || { fail "$name: data not verified"; return 1; }
    grep -q "data verified   : yes" "$tmp/$name.server" || { fail "$name: server: data not verified"; return 1; }
    # One line per QP: the client prints its QPs and then the server's, in the same order.
    paste -d ' ' <(sed -n 's/^ local address: QPN \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.client") \
        <(sed -n 's/^ remote address: QPN \(0x[0-9a-f]*\) .*/\1/p' "$tmp/$name.client") |
        sed "s/^/$cip $sip /" >> "$tmp/qps"
}

echo "uring $ip_a on $va in $nsa; af_packet $ip_d on $vb in $nsb (kernel $ip_b); servers on $srv_side"
run_pair write $srv_side --op write -s 4097 -n 50 -q 2 --bw --verify || fail "$srv_side server: write"
run_pair read $srv_side --op read -s 65536 -n 30 -t 16 --bw --verify || fail "$srv_side server: read"
run_pair send $srv_side --op send -s 4095 -n 50 --bw --verify || fail "$srv_side server: send"
run_pair atomic $srv_side --op atomic -n 50 --bw --verify || fail "$srv_side server: atomic"

sleep 0.3
# TERM: an asynchronous command of a script ignores SIGINT, and dumpcap inherits that.
kill -TERM "$cap_pid" 2> /dev/null
wait "$cap_pid"
# timeout(1) can return before dumpcap has written its last records (in a test run, the last 100
# frames were missing for droce-trace and present for tshark a moment later): wait for dumpcap itself.
for _ in $(seq 1 100); do
    pgrep -f -- "dumpcap .*-w $cap" > /dev/null || break
    sleep 0.05
done
[ -s "$cap" ] || { fail "empty capture"; echo "failures: $failures"; exit 1; }

timeout 60 "$trace" read --json "$cap" > "$tmp/trace.jsonl" 2> "$tmp/trace.err" ||
    { fail "droce-trace read exited $?"; cat "$tmp/trace.err"; }
timeout 60 tshark -n --disable-heuristic eth_over_ib -r "$cap" -Y 'udp.dstport == 4791' -T fields -E separator=/t -e frame.number \
    -e ip.src -e ip.dst -e ip.id -e ip.flags.df -e udp.srcport -e infiniband.bth.opcode \
    -e infiniband.bth.destqp -e infiniband.invariant.crc -e _ws.malformed \
    > "$tmp/tshark.txt" 2> "$tmp/tshark.err" || { fail "tshark exited $?"; cat "$tmp/tshark.err"; }
va_mtu=$(in_a cat "/sys/class/net/$va/mtu")
/usr/bin/python3 - "$cap" "$tmp/trace.jsonl" "$tmp/tshark.txt" "$tmp/qps" "$va_mtu" "$ip_a" <<'PY' || fail "capture checks"
import collections, json, socket, struct, sys, zlib
cap, trace, tsh, qps = sys.argv[1:5]

def sport(lqpn, rqpn):  # lib/wire/udp_sport.h, written again here
    v = lqpn * rqpn
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xfffff
    return 0xC000 | ((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14))

def icrc(frame):  # IBTA Annex A17 over IPv4: the variant fields set to ones
    ip = bytearray(frame[14:34])
    ip[1] = 0xff; ip[8] = 0xff; ip[10:12] = b"\xff\xff"
    udp = bytearray(frame[34:42]); udp[6:8] = b"\xff\xff"
    rest = bytearray(frame[42:-4]); rest[4] = 0xff
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(rest))

raw = open(cap, "rb").read()
assert struct.unpack("<I", raw[:4])[0] == 0xa1b2c3d4, "not a little-endian pcap"
frames, off = [], 24
while off < len(raw):
    _, _, incl, orig = struct.unpack("<IIII", raw[off:off + 16])
    frames.append(raw[off + 16:off + 16 + incl])
    off += 16 + incl

problems = []
mtu = int(sys.argv[5])

def probe_kind(fr):  # drivers/uring's probes: 32 bytes, TVer 15, magic at byte 8, kind at byte 4
    u = fr[34:]
    if len(u) < 40 or struct.unpack(">H", u[4:6])[0] != 40 or u[9] != 0x0f or u[16:24] != b"DROCESHR":
        return None
    return u[12]

probes = collections.Counter()
for fr in frames:
    # UDP to 4791 only: the TCP channel's segments are larger (TSO on the veth).
    if len(fr) >= 38 and fr[12:14] == b"\x08\x00" and fr[23] == 17 and fr[36:38] == b"\x12\xb7" and len(fr) > mtu + 14:
        problems.append("a %d-byte frame: longer than the veth's MTU (a GSO send?)" % len(fr))
    k = probe_kind(fr)
    if k is not None:
        probes[(socket.inet_ntoa(fr[26:30]), k)] += 1
print("droce probes (source, kind: 2 GSO probe, 3 GSO answer):", dict(probes))
uring_ip = sys.argv[6]
for (src, k), n in probes.items():
    if k != 2 or src != uring_ip:
        problems.append("%d probes of kind %d from %s: only the uring side's GSO probes expected" % (n, k, src))
    elif n > 4 * 12:
        # Five probes 100 ms apart, then one every 2 s: 12 covers a run of 15 s.
        problems.append("%d GSO probes from %s: more than 12 for each of the 4 runs" % (n, src))
runs = [l.split() for l in open(qps) if l.strip()]
runs = [(c, s, int(lq, 16), int(rq, 16)) for c, s, lq, rq in runs]
print("capture: %d frames; runs (client server lqpn rqpn sport):" % len(frames))
for c, s, lq, rq in runs:
    print("  %s %s 0x%x 0x%x 0x%04x" % (c, s, lq, rq, sport(lq, rq)))
if len(runs) != 5:
    problems.append("%d QPs in the runs, 5 expected" % len(runs))
if len(set(sport(lq, rq) for _, _, lq, rq in runs)) < 2:
    problems.append("every QP has the same UDP source port: the check would prove little")
per_qp = collections.Counter()

# droce-trace: every RoCEv2 frame accepted, ICRC ok.
roce, bad, ops, skipped_probes = 0, [], collections.Counter(), 0
for line in open(trace):
    f = json.loads(line)
    if f.get("status") == "skipped":
        if "droce GSO probe" in f.get("skipped", ""):
            skipped_probes += 1
        continue
    roce += 1
    if f.get("status") != "ok" or f.get("icrc") != "ok":
        bad.append(f)
    ops[(f["ip"]["src"], f.get("opcode"))] += 1
print("droce-trace: %d RoCEv2 frames, %d not ok, %d droce GSO probes" % (roce, len(bad), skipped_probes))
if skipped_probes != sum(probes.values()):
    problems.append("droce-trace named %d GSO probes, the capture holds %d" % (skipped_probes, sum(probes.values())))
for (src, op), n in sorted(ops.items()):
    print("  from %-15s %-32s %d" % (src, op, n))
for f in bad[:5]:
    problems.append("droce-trace frame %s: status %s icrc %s" % (f.get("index"), f.get("status"), f.get("icrc")))

# tshark: decoded, ICRC equal to ours, IP ID 0 + DF, source port = the QP's entropy.
rows = [l.rstrip("\n").split("\t") for l in open(tsh) if l.strip()]
rows = [r for r in rows if probe_kind(frames[int(r[0]) - 1]) is None]
if len(rows) != roce:
    problems.append("tshark sees %d UDP 4791 frames, droce-trace %d RoCEv2 frames" % (len(rows), roce))
seen = collections.Counter()
nbad = collections.Counter()
for r in rows:
    num, src, dst, ipid, df, sp, op, dqp, crc, malformed = (r + [""] * 10)[:10]
    fr = frames[int(num) - 1]
    if op == "" or crc == "":
        nbad["not decoded as InfiniBand"] += 1
        continue
    if malformed:
        nbad["malformed"] += 1
    ours = icrc(fr)
    if int(crc, 16) != struct.unpack(">I", struct.pack("<I", ours))[0] or \
            struct.unpack("<I", fr[-4:])[0] != ours:
        nbad["ICRC differs"] += 1
    if int(ipid, 16) != 0 or df not in ("1", "True"):
        nbad["IPv4 ID %s DF %s" % (ipid, df)] += 1
    dqp, sp = int(dqp, 16), int(sp)
    # A frame to a client carries the client's QPN, one to a server the server's.
    cand = [(c, s, lq, rq) for c, s, lq, rq in runs
            if (dst == c and src == s and dqp == lq) or (dst == s and src == c and dqp == rq)]
    if not cand:
        nbad["from %s to %s dest QP 0x%x of no run" % (src, dst, dqp)] += 1
    elif all(sport(lq, rq) != sp for _, _, lq, rq in cand):
        nbad["UDP source port 0x%04x is not the QP's entropy (from %s)" % (sp, src)] += 1
    else:
        seen[src] += 1
        for _, _, lq, rq in cand:
            if sport(lq, rq) == sp:
                per_qp[(lq, rq)] += 1
for k, n in nbad.items():
    problems.append("%d frames: %s" % (n, k))
print("tshark: %d InfiniBand frames; ICRC, IP ID 0 + DF and source port checked: %s"
      % (len(rows), dict(seen)))
for _, _, lq, rq in runs:
    if per_qp[(lq, rq)] == 0:
        problems.append("no frame of QPs 0x%x - 0x%x" % (lq, rq))
for e in set(c for c, _, _, _ in runs) | set(s for _, s, _, _ in runs):
    if seen[e] == 0:
        problems.append("no checked frame from %s" % e)
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
echo "failures: $failures"
[ $failures = 0 ]
