#!/usr/bin/python3
"""droce-trace explain, checked against what droce did and against what a real browser draws.

    trace_explain_test.py MODE --trace DROCE_TRACE --perf DROCE_PERF --config CONFIG_DIR
                          --captures CAPTURES_DIR

MODE:
  rc-loss        droce-perf RC WRITEs between two processes over net_memif, 2 % loss injected on
                 the client's transmit (seeded), captured by the client (--capture). explain must
                 count the packets, retransmissions and sequence NAKs the client's engine counted,
                 every sequence NAK must name the PSN the go-back-N resend after it starts from, and
                 --qp must select and filter.
  cnp            RC WRITEs through a 0.5 Gb/s bottleneck that marks ECN-CE (RED), DCQCN on: explain
                 must count the CNPs the client's reaction point received, group them into
                 episodes, and say the sender slowed down exactly where its packets came further
                 apart.
  mrc-plane-down droce-perf --mrc over four memif pairs, plane 2 taken down half way
                 (--plane-down 2@0.5): explain must find plane 2 falling silent (and no other), count
                 the retransmissions the engine counted, and resend plane 2's packets on the others.
  captures       the real captures of tests/data/captures (other stacks' traffic) and the droce
                 capture committed there: explain reads them all; exact figures on the droce one.
Each mode also renders its HTML page in Debian's headless Chromium: the DOM the page's script built
must hold as many packet, retransmission, loss and marker elements, and as many plane legend
entries, as explain --json reports, and the screenshot must show the timeline (not a blank page,
the plane colours present).

Exit 0 = pass, 1 = fail, 77 = skipped (every other check passed, but there is no Chromium to render
the page). Each mode takes 10-30 s on a loaded 2-core host.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CHROMIUM = "/usr/bin/chromium-headless-shell"
# The page's colours (flow_render.cc): RC and plane 0, then planes 1, 2, 3.
PLANE_RGB = [(0x1f, 0x77, 0xb4), (0x2c, 0xa0, 0x2c), (0x94, 0x67, 0xbd), (0xff, 0x7f, 0x0e)]

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(cmd, timeout=60, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, **kw)


def explain_json(args, path, *extra):
    r = run([args.trace, "explain", "--json", path, *extra])
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit("droce-trace explain %s failed: %d" % (path, r.returncode))
    return json.loads(r.stdout)


class MemifPair:
    """Two droce-perf processes over private copies of config/BASE-{server,client}.ini."""

    def __init__(self, args, base, tmp):
        self.args, self.tmp = args, tmp
        self.tag = "ex%d" % os.getpid()
        self.runtime = "/var/run/dpdk" if os.getuid() == 0 else os.environ.get(
            "XDG_RUNTIME_DIR", "/tmp") + "/dpdk"
        for side in ("server", "client"):
            text = open(os.path.join(args.config, "%s-%s.ini" % (base, side))).read()
            text = text.replace("socket=/run/droce/%s.sock" % base,
                                "socket=/run/droce/memif-%s.sock" % self.tag)
            text = text.replace("--file-prefix=droce-%s-%s" % (base, side),
                                "--file-prefix=droce-%s-%s" % (self.tag, side[0]))
            open(os.path.join(tmp, side + ".ini"), "w").write(text)
        self.port = 20000 + (os.getpid() + 7000) % 20000

    def run(self, client_args, server_args=()):
        a = self.args
        serr = open(os.path.join(self.tmp, "server.err"), "w")
        server = subprocess.Popen([a.perf, "--server", "--once", "-c", os.path.join(self.tmp, "server.ini"),
                                   "-p", str(self.port), *server_args], stdout=subprocess.DEVNULL,
                                  stderr=serr)
        try:
            for _ in range(300):
                if "waiting for a client" in open(os.path.join(self.tmp, "server.err")).read():
                    break
                if server.poll() is not None:
                    break
                time.sleep(0.1)
            c = run([a.perf, "127.0.0.1", "-c", os.path.join(self.tmp, "client.ini"), "-p",
                     str(self.port), "--json", *client_args], timeout=60)
            server.wait(timeout=30)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGKILL)
                server.wait()
            for side in "sc":
                shutil.rmtree(os.path.join(self.runtime, "droce-%s-%s" % (self.tag, side)),
                              ignore_errors=True)
        if c.returncode != 0 or server.returncode != 0:
            print(c.stdout[-2000:], c.stderr[-2000:])
            print(open(os.path.join(self.tmp, "server.err")).read()[-2000:])
            raise SystemExit("droce-perf: client %d, server %d" % (c.returncode, server.returncode))
        return json.loads(c.stdout)


def chromium(tmp, html, *flags):
    profile = tempfile.mkdtemp(dir=tmp, prefix="chromium-")
    return run([CHROMIUM, "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                "--user-data-dir=" + profile, "--window-size=1320,900",
                "--virtual-time-budget=5000", *flags, "file://" + os.path.abspath(html)],
               timeout=55)


def have_browser():
    return os.access(CHROMIUM, os.X_OK)


def check_page(args, tmp, capture, name):
    """Renders explain's HTML of @capture in the browser; the DOM and the pixels must agree with
    explain --json. Without the browser only the page itself is checked (main() then exits 77)."""
    html = os.path.join(tmp, name + ".html")
    r = run([args.trace, "explain", capture, "--html", html])
    if not check(r.returncode == 0 and os.path.getsize(html) > 0, name + ": --html wrote a page"):
        return
    page = open(html).read()
    check(not re.search(r'(src|href)\s*=\s*"(https?:)?//', page),
          name + ": the page loads nothing from the network")
    story = explain_json(args, capture)
    if not have_browser():
        print("skip  %s: no %s to render the page" % (name, CHROMIUM))
        return
    t0 = time.time()
    dom = chromium(tmp, html, "--dump-dom")
    check(dom.returncode == 0 and "</html>" in dom.stdout,
          name + ": chromium --dump-dom rendered the page (%.1f s)" % (time.time() - t0))
    d = dom.stdout
    check('data-rendered="yes"' in d, name + ": the page's script ran to the end")
    for c in story["connections"]:
        i, tl = c["id"], c["timeline"]
        sec = re.search(r'<section class="conn" id="conn-%d">(.*?)</section>' % i, d, re.S)
        if not check(sec is not None, "%s conn %d: its section is in the DOM" % (name, i)):
            continue
        s = sec.group(1)
        marks = re.findall(r'class="pkt (new|retx|lost) plane-(-?\d+)"', s)
        kinds = [k for k, _ in marks]
        check(len(marks) == tl["marks"],
              "%s conn %d: %d packet marks drawn, explain --json says %d" %
              (name, i, len(marks), tl["marks"]))
        for kind, key in (("new", "new"), ("retx", "retransmissions"), ("lost", "lost")):
            check(kinds.count(kind) == tl[key], "%s conn %d: %d %s marks drawn, --json says %d" %
                  (name, i, kinds.count(kind), kind, tl[key]))
        legend = len(re.findall(r'class="legend-plane"', s))
        check(legend == len(tl["planes"]), "%s conn %d: %d planes in the legend, --json says %d" %
              (name, i, legend, len(tl["planes"])))
        if c["transport"] == "MRC":
            drawn = sorted({int(p) for _, p in marks})
            check(drawn == tl["planes"], "%s conn %d: marks on planes %s, --json says %s" %
                  (name, i, drawn, tl["planes"]))
        for mtype, n in tl["markers"].items():
            got = len(re.findall(r'class="marker %s"' % mtype, s))
            check(got == n, "%s conn %d: %d '%s' markers drawn, --json says %d" %
                  (name, i, got, mtype, n))
    png = os.path.join(tmp, name + ".png")
    shot = chromium(tmp, html, "--screenshot=" + png)
    if not check(shot.returncode == 0 and os.path.exists(png), name + ": chromium --screenshot"):
        return
    from PIL import Image
    img = Image.open(png).convert("RGB")
    w, h = img.size
    px = list(img.getdata())
    ink = sum(1 for p in px if p != (255, 255, 255))
    check(ink > 0.03 * w * h, "%s: screenshot %dx%d is not blank: %.1f %% of its pixels drawn" %
          (name, w, h, 100.0 * ink / (w * h)))
    # The first connection's timeline is on screen: its plane colours must be there.
    first = story["connections"][0]
    want = first["timeline"]["planes"] if first["transport"] == "MRC" else [0]

    def near(p, rgb):
        return all(abs(p[k] - rgb[k]) <= 12 for k in range(3))
    for plane in want:
        rgb = PLANE_RGB[plane % len(PLANE_RGB)]
        n = sum(1 for p in px if near(p, rgb))
        check(n >= 20, "%s: plane %d's colour #%02x%02x%02x shows in %d pixels" %
              (name, plane, rgb[0], rgb[1], rgb[2], n))


# Appended by check_axes() after the page's own script: marks each tick label the browser laid out
# (partly) outside its SVG, where it is cut off.
CLIP_PROBE = """<script>
document.querySelectorAll('svg.timeline').forEach(function (svg) {
  var r = svg.getBoundingClientRect();
  svg.querySelectorAll('text.tick').forEach(function (t) {
    var b = t.getBoundingClientRect();
    if (b.left < r.left - 0.5 || b.right > r.right + 0.5) t.setAttribute('data-clipped', 'yes');
  });
});
</script>"""


def check_axes(args, tmp, capture, name):
    """The axes of each timeline of @capture's page as the browser drew them: PSN ticks are whole
    PSNs, no two ticks of an axis have one label, and no label is cut off. Tiny captures (one or
    two packets a connection, a span of a microsecond) once got PSN 1000.2, 0.6000000000000001
    (cut off by the margin) and time ticks 0, 0, 0, 0.001, 0.001."""
    html = os.path.join(tmp, name + "-axes.html")
    r = run([args.trace, "explain", capture, "--html", html])
    if not check(r.returncode == 0, name + ": --html wrote a page"):
        return
    if not have_browser():
        print("skip  %s: no %s to render the page" % (name, CHROMIUM))
        return
    page = open(html).read()
    open(html, "w").write(page.replace("</body>", CLIP_PROBE + "\n</body>"))
    d = chromium(tmp, html, "--dump-dom").stdout
    svgs = re.findall(r'<svg[^>]*class="timeline".*?</svg>', d, re.S)
    want = len(explain_json(args, capture)["connections"])
    check(len(svgs) == want, "%s: %d timelines drawn, %d connections" % (name, len(svgs), want))
    for i, svg in enumerate(svgs, 1):
        labels = re.findall(r'<text ([^>]*class="tick"[^>]*)>([^<]*)</text>', svg)
        # x ticks are centred under the chart; the PSN ticks and the plane lanes' names end at
        # the left margin.
        times = [s for a, s in labels if 'text-anchor="middle"' in a]
        psns = [s for a, s in labels if 'text-anchor="end"' in a and not s.startswith("plane ")]
        clipped = [s for a, s in labels if 'data-clipped="yes"' in a]
        check(len(times) >= 2 and len(psns) >= 2,
              "%s timeline %d: %d time and %d PSN ticks" % (name, i, len(times), len(psns)))
        check(all(re.fullmatch(r"\d+", s) for s in psns),
              "%s timeline %d: PSN ticks are whole PSNs: %s" % (name, i, psns))
        check(len(set(times)) == len(times) and len(set(psns)) == len(psns),
              "%s timeline %d: no two ticks alike: %s / %s" % (name, i, times, psns))
        check(not clipped, "%s timeline %d: no tick label cut off (%s)" % (name, i, clipped))


def rc_loss(args, tmp):
    cap = os.path.join(tmp, "rc-loss.pcapng")
    out = MemifPair(args, "memif", tmp).run(
        ["--op", "write", "-s", "4096", "-n", "200", "--bw", "--verify", "--capture", cap,
         "--snaplen", "128", "--impair", "loss=0.02,seed=5"])
    counters = out.get("counters", {})
    story = explain_json(args, cap)
    conns = [c for c in story["connections"] if c["transport"] == "RC"]
    if not check(len(conns) == 1, "rc-loss: one RC connection (%d)" % len(conns)):
        return
    c = conns[0]
    check(c["requests"] == counters.get("sent_pkts"),
          "rc-loss: %d request packets, the client's engine sent %s" %
          (c["requests"], counters.get("sent_pkts")))
    check(c["retransmissions"] == counters.get("retransmitted_pkts"),
          "rc-loss: %d retransmissions, the engine counted %s" %
          (c["retransmissions"], counters.get("retransmitted_pkts")))
    check(c["naks"] >= 1 and c["naks"] == counters.get("packet_seq_err"),
          "rc-loss: %d sequence NAKs, the engine's packet_seq_err %s" %
          (c["naks"], counters.get("packet_seq_err")))
    check(c["new_psns"] + c["retransmissions"] == c["requests"], "rc-loss: new + resent = sent")
    ev = c["events"]
    retx_total = sum(e["count"] for e in ev if e["kind"] == "retransmit")
    check(retx_total == c["retransmissions"],
          "rc-loss: the retransmit events add up to %d" % retx_total)
    for k, e in enumerate(ev):
        if e["kind"] != "nak":
            continue
        nxt = next((x for x in ev[k + 1:] if x["kind"] == "retransmit"), None)
        ok = nxt is not None and nxt["cause"] == "sequence_nak" and \
            nxt["psns"].split("-")[0].split(",")[0] == str(e["expected_psn"])
        check(ok, "rc-loss: NAK #%d (expected PSN %d, got %s, missing %s) -> go-back-N from %s" %
              (e["first_frame"], e["expected_psn"], e["got_psn"], e["missing"],
               nxt["psns"].split(",")[0] if nxt else "nothing"))
        check(e["got_psn"] is not None and e["missing"].split("-")[0].split(",")[0] ==
              str(e["expected_psn"]), "rc-loss: NAK #%d names the missing PSNs from %d" %
              (e["first_frame"], e["expected_psn"]))
    text = run([args.trace, "explain", cap]).stdout
    check("the responder expected PSN" in text and "go-back-N" in text,
          "rc-loss: the text tells why the NAK was sent and what was resent")
    only = explain_json(args, cap, "--qp", hex(c["responder"]["qpn"]))
    check([x["id"] for x in only["connections"]] == [c["id"]], "rc-loss: --qp selects it")
    none = run([args.trace, "explain", cap, "--json", "--qp", "0xfedcba"])
    check(none.returncode == 1 and "no connection" in none.stderr and none.stdout == "",
          "rc-loss: --qp 0xfedcba selects nothing and says so (exit %d)" % none.returncode)
    bad = run([args.trace, "explain", cap, "--qp", "nope"])
    check(bad.returncode == 2, "rc-loss: --qp nope is a usage error (exit %d)" % bad.returncode)
    check_page(args, tmp, cap, "rc-loss")


def mrc_plane_down(args, tmp):
    cap = os.path.join(tmp, "mrc-down.pcapng")
    out = MemifPair(args, "memif4", tmp).run(
        ["--mrc", "-s", "65536", "-D", "1", "--verify", "--plane-down", "2@0.5", "--plane-rate",
         "0.02", "--capture", cap, "--snaplen", "128"])
    counters = out.get("counters", {})
    story = explain_json(args, cap)
    check(story["directions"], "mrc: the capture says which way each frame went")
    conns = [c for c in story["connections"] if c["transport"] == "MRC"]
    if not check(len(conns) == 1, "mrc: one MRC connection (%d)" % len(conns)):
        return
    c = conns[0]
    planes = {p["plane"]: p for p in c["planes"]}
    check(sorted(planes) == [0, 1, 2, 3], "mrc: packets on planes %s" % sorted(planes))
    mrcc = out.get("mrc_counters", {})
    sent = mrcc.get("data_pkts_sent", 0) + mrcc.get("retransmits", 0)
    check(c["requests"] == sent, "mrc: %d data packets, the engine sent %d (data_pkts_sent + "
          "retransmits)" % (c["requests"], sent))
    # The capture sees every frame that arrives; the client's plane 2 is administratively down
    # after 0.5 s and hears nothing (rx_dropped_port_down): SACKs the server sent on it before it
    # learned are in the file but not taken by the QP.
    rcvd, down = mrcc.get("sacks_rcvd", -1), counters.get("rx_dropped_port_down", 0)
    check(rcvd <= c["sacks"] <= rcvd + down,
          "mrc: %d SACKs, the engine received %s and dropped %s frames on the down plane" %
          (c["sacks"], rcvd, down))
    check(c["retransmissions"] == counters.get("retransmitted_pkts"),
          "mrc: %d retransmissions, the engine counted %s" %
          (c["retransmissions"], counters.get("retransmitted_pkts")))
    downs = [e for e in c["events"] if e["kind"] == "plane_down"]
    check([e["plane"] for e in downs] == [2], "mrc: planes found going down: %s" %
          [e["plane"] for e in downs])
    if downs:
        d = downs[0]
        check(0.3 <= d["t_ms"] / 1000.0 <= 5.0, "mrc: plane 2 fell silent at %.3f s" %
              (d["t_ms"] / 1000.0))
        check(d["silent_ms"] is None, "mrc: plane 2 stays silent to the end")
        for e in c["events"]:
            if e["kind"] == "retransmit" and e["cause"] == "plane_down":
                check(2 not in e["planes"] and e["t_ms"] >= d["t_ms"],
                      "mrc: plane 2's packets resent on planes %s after it died" % e["planes"])
        resent = sum(e["count"] for e in c["events"]
                     if e["kind"] == "retransmit" and e["cause"] == "plane_down")
        check(resent == d["resent"], "mrc: the plane_down event's %d resent = %d in the "
              "retransmit events" % (d["resent"], resent))
    ps = [e for e in c["events"] if e["kind"] == "port_status" and e["from"] == "requester"]
    check(any(e["port_mask"] & 4 == 0 for e in ps), "mrc: a port status from the requester "
          "says plane 2 is down")
    copies = sum(e["copies"] for e in ps)
    check(copies == mrcc.get("port_status_sent"), "mrc: %d port status copies from the "
          "requester, the engine sent %s" % (copies, mrcc.get("port_status_sent")))
    check(planes[2]["packets"] < min(planes[p]["packets"] for p in (0, 1, 3)),
          "mrc: plane 2 carried less than the others")
    check_page(args, tmp, cap, "mrc-down")


def cnp(args, tmp):
    cap = os.path.join(tmp, "cnp.pcapng")
    pair = MemifPair(args, "memif", tmp)
    # DCQCN on both sides (the NVIDIA profile, a 1 Gb/s line), and on the client's port a 0.5 Gb/s
    # bottleneck whose queue marks ECN-CE by RED, as tests/cc/cnp_memif_test.sh does. One thread a
    # side (--inline-progress): with an engine thread and a spinning application thread each,
    # four busy threads on a 2-core host preempted the client's engine every 20-30 us, so the
    # pacer, not DCQCN, set the requester's spacing and a cut was not always visible around a CNP.
    for side in ("server", "client"):
        ini = os.path.join(tmp, side + ".ini")
        text = open(ini).read().replace("[device]\n", "[device]\ndcqcn = nvidia\n", 1)
        text = re.sub(r"^mtu = (.*)$", r"mtu = \1\nline_rate_gbps = 1", text, count=1, flags=re.M)
        open(ini, "w").write(text)
    out = pair.run(["--op", "write", "-s", "65536", "-n", "300", "--bw", "--verify", "--capture",
                    cap, "--snaplen", "128", "--inline-progress", "--impair",
                    "bw=0.5,queue=4000000,red_kmin=40000,red_kmax=160000,red_pmax=0.2"],
                   server_args=["--inline-progress"])
    counters = out.get("counters", {})
    story = explain_json(args, cap)
    conns = [c for c in story["connections"] if c["transport"] == "RC"]
    if not check(len(conns) == 1, "cnp: one RC connection (%d)" % len(conns)):
        return
    c = conns[0]
    rcvd = counters.get("rp_cnp_handled", 0) + counters.get("rp_cnp_ignored", 0)
    check(c["cnps"] > 0 and c["cnps"] == rcvd, "cnp: %d CNPs, the client's reaction point got %d "
          "(rp_cnp_handled + rp_cnp_ignored)" % (c["cnps"], rcvd))
    eps = [e for e in c["events"] if e["kind"] == "cnp"]
    check(sum(e["cnps"] for e in eps) == c["cnps"], "cnp: %d CNP episodes hold all %d CNPs" %
          (len(eps), c["cnps"]))
    # What explain must get right is its reading of the capture: each episode with packets on
    # both sides says "slowed down" exactly where they came more than 1.2 x further apart, and
    # "no slow-down visible" elsewhere. Whether DCQCN's cut shows in a given run's spacing is the
    # run's (a sender behind its pacer, a queue marked without pause merging the CNPs into one
    # episode), and cc-cnp-memif checks the reaction point's cuts.
    measured = [e for e in eps if "rate_after_gbps" in e]
    slowed = [e for e in measured if e["gap_after_us"] > 1.2 * e["gap_before_us"]]
    # Marks can also last the whole run (seen once in CI: 2,429 CNPs, none 2 ms after the last):
    # then the one episode has no data packet after it, and explain must say it cannot see the rate.
    if measured:
        check(True, "cnp: %d episode(s) with the requester's spacing measured on both sides" %
              len(measured))
    else:
        check(len(eps) == 1 and "Too few data packets around it" in eps[0]["text"],
              "cnp: no episode with packets on both sides: the marks lasted the run, one episode "
              "(%d) that says it cannot see the rate" % len(eps))
    check(all(("slowed down" in e["text"]) == (e in slowed) and
              ("no slow-down visible" in e["text"]) == (e not in slowed) for e in measured),
          "cnp: the story says slowed down for exactly the %d episode(s) after which the "
          "requester's packets came further apart (of %d measured)" % (len(slowed), len(measured)))
    for e in eps:
        print("      episode of %d CNP(s): packets %s us apart before, %s us after" %
              (e["cnps"], e.get("gap_before_us", "?"), e.get("gap_after_us", "?")))
    check(c["timeline"]["markers"].get("cnp") == len(eps), "cnp: one timeline marker per episode")
    check_page(args, tmp, cap, "cnp")


def captures(args, tmp):
    names = sorted(f for f in os.listdir(args.captures) if f.endswith((".pcap", ".pcapng")))
    for f in names:
        path = os.path.join(args.captures, f)
        r = run([args.trace, "explain", path])
        check(r.returncode == 0 and r.stdout.startswith("droce-trace explain"),
              "captures: explain %s" % f)
        j = explain_json(args, path)
        check(j["frames"] > 0, "captures: %s: %d frames, %d RoCEv2, %d connections" %
              (f, j["frames"], j["roce_frames"], len(j["connections"])))
    # rxe over IPv4: an RC WRITE and a READ of 4096 B answered in four READ RESPONSE packets.
    j = explain_json(args, os.path.join(args.captures, "montybeatnik_rdma-roce-lab_test.pcap"))
    rc = [c for c in j["connections"] if c["transport"] == "RC"]
    check(len(rc) >= 1 and sum(c["retransmissions"] for c in rc) == 0 and
          sum(c["naks"] for c in rc) == 0, "captures: rxe's RC traffic, no resend and no NAK")
    # Every READ response packet is the RC connection's, up to the last PSN of the 4096 B READ
    # (its request PSN + 3): none made a connection of its own (transport "?"), as the last did.
    check(len(rc) == 1 and rc[0]["last_frame"] == 10 and rc[0]["acks"] == 1 and
          not [c for c in j["connections"] if c["transport"] == "?"] and
          "1 ACK, the last for PSN 12726936; 4 READ response packets" in rc[0]["events"][0]["text"],
          "captures: rxe's READ of four response packets is its connection's (%s)" %
          [(c["transport"], c["first_frame"], c["last_frame"]) for c in j["connections"]])
    # droce's own: see tests/data/captures/README.md for how it was made.
    own = os.path.join(args.captures, "droce_mrc_plane_down_loss.pcapng")
    j = explain_json(args, own)
    c = [c for c in j["connections"] if c["transport"] == "MRC"]
    if check(len(c) == 1, "captures: droce MRC capture: one MRC connection"):
        c = c[0]
        exp = json.load(open(os.path.join(args.captures, "droce_mrc_plane_down_loss.json")))
        for k in ("requests", "retransmissions", "sacks", "plane_downs"):
            check(c[k] == exp[k], "captures: droce MRC capture: %s %d (made with %d)" %
                  (k, c[k], exp[k]))
        # droce binds path i to plane i mod planes: the plane from the pcapng interface and the
        # path from the MDETH must agree.
        check(all(p["paths"] and all(x % 4 == p["plane"] for x in p["paths"]) for p in c["planes"]),
              "captures: droce MRC capture: every path seen on plane k is k mod 4 (%s)" %
              {p["plane"]: len(p["paths"]) for p in c["planes"]})
        causes = {e["cause"] for e in c["events"] if e["kind"] == "retransmit"}
        check({"sack_hole", "plane_down"} <= causes,
              "captures: droce MRC capture: resends by SACK hole and by the dead plane (%s)" %
              sorted(causes))
    # The pcapng block reader: read shows each MRC frame's plane, from droce's interface names.
    lines = run([args.trace, "read", own]).stdout.splitlines()
    planes = {int(m.group(1)) for m in (re.search(r"  plane=(\d+)  ", l) for l in lines) if m}
    check(planes == {0, 1, 2, 3}, "captures: read shows the planes of droce's MRC frames: %s" %
          sorted(planes))
    # A capture of both ends holds each packet as sent and as received: read tells the copies
    # apart by the pcapng direction (it printed both alike).
    dirs = {m.group(1) for m in (re.search(r"  dir=(in|out)  ", l) for l in lines) if m}
    check(dirs == {"in", "out"}, "captures: read shows each frame's direction: %s" % sorted(dirs))
    check_page(args, tmp, own, "droce-mrc")
    # The counts come from what the browser drew, not from the page's text: a page whose data
    # lost one mark renders one mark fewer.
    html = os.path.join(tmp, "droce-mrc.html")
    page = open(html).read()
    doctored = re.sub(r'("marks":\[)\[[^\]]*\],', r"\1", page, count=1)
    bad = os.path.join(tmp, "doctored.html")
    open(bad, "w").write(doctored)
    d = chromium(tmp, bad, "--dump-dom").stdout if have_browser() else ""
    n = len(re.findall(r'class="pkt (new|retx|lost) plane-', d))
    want = explain_json(args, own)["connections"][0]["timeline"]["marks"]
    check(doctored != page and (n == want - 1 or not have_browser()),
          "captures: a page with one mark taken out of its data draws %d marks, not %d" % (n, want))
    check_page(args, tmp, os.path.join(args.captures, "montybeatnik_rdma-roce-lab_test.pcap"),
               "rxe")
    # Captures of a few packets a connection: the axes of a tiny timeline.
    for f in ("montybeatnik_rdma-roce-lab_test.pcap", "scapy_roce_uts_icrc_vectors.pcap",
              "oferby_proxy_roce.pcap"):
        check_axes(args, tmp, os.path.join(args.captures, f), f.split("_")[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["rc-loss", "mrc-plane-down", "cnp", "captures"])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--perf")
    ap.add_argument("--config")
    ap.add_argument("--captures")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="trace-explain-")
    try:
        {"rc-loss": rc_loss, "mrc-plane-down": mrc_plane_down, "cnp": cnp, "captures": captures}[
            args.mode](args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    if not have_browser():
        # Everything else passed, but the page was not rendered: not a pass.
        print("skipped: %s is not installed (Debian package chromium-headless-shell)" % CHROMIUM)
        return 77
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
