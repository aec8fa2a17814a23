/* SPDX-License-Identifier: BSD-3-Clause */
/** @file The three renderings of a FlowStory (flow_explain.h): text, JSON and an HTML page. */
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <set>

#include "flow_explain.h"
#include "trace_explain.h"

namespace droce::trace {

using Json = nlohmann::ordered_json;

namespace {

double round3(double v) {
    return static_cast<double>(static_cast<std::int64_t>(v * 1000.0 + (v < 0 ? -0.5 : 0.5))) /
           1000.0;
}

/** Why some or all of the capture's frames were skipped for their link type, "" when none was:
 *  the sentence `read --explain` gives each such frame when the whole file is of one such type. */
std::string not_ethernet_text(const FlowStory& s) {
    std::uint64_t n = 0;
    for (const auto& [type, frames] : s.not_ethernet)
        n += frames;
    if (n == 0) return {};
    if (s.not_ethernet.size() == 1 && n == s.frames)
        return not_ethernet_sentence(s.not_ethernet.begin()->first);
    std::string t;
    for (const auto& [type, frames] : s.not_ethernet)
        t += (t.empty() ? "" : ", ") + std::to_string(frames) + " of link type " +
             link_type_name(type);
    return t + " are not Ethernet frames; droce-trace decodes RoCEv2 in Ethernet only, so they are "
               "skipped.";
}

/** "133 frames, 130 RoCEv2": frames as captured; with UDP GSO sends in the capture (one frame, up
 *  to 64 packets) the packets too, since the story counts packets. */
std::string capture_counts_text(const FlowStory& s) {
    std::string t =
        std::to_string(s.frames) + " frames, " + std::to_string(s.roce_frames) + " RoCEv2";
    if (s.gso_sends == 0) return t;
    return t + " (" + std::to_string(s.roce_packets) +
           " RoCEv2 packets: " + std::to_string(s.gso_sends) +
           " of the frames are UDP GSO sends captured before the " + "kernel cut them, " +
           std::to_string(s.gso_packets) + " packets in all)";
}

double t_ms(std::int64_t ns) {
    return round3(static_cast<double>(ns) / 1e6);
}

std::string qpn_hex(std::uint32_t q) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%06x", q);
    return buf;
}

std::string frames_text(const FlowEvent& e) {
    if (e.first_frame == e.last_frame) return "#" + std::to_string(e.first_frame);
    return "#" + std::to_string(e.first_frame) + "-#" + std::to_string(e.last_frame);
}

/** The marks a timeline draws: all of them, or past @p max every retransmission and loss plus
 *  every step-th in-order packet. */
struct Drawn {
    std::vector<const FlowMark*> marks;
    std::size_t step = 1;
    std::uint64_t news = 0, retx = 0, lost = 0;
    std::vector<int> planes; ///< planes drawn (MRC), ascending
};

Drawn select_marks(const FlowConnection& c, std::size_t max) {
    Drawn d;
    std::size_t special = 0;
    for (const FlowMark& m : c.marks)
        if (m.kind != kMarkNew) ++special;
    const std::size_t news = c.marks.size() - special;
    if (c.marks.size() > max && news > 0) {
        const std::size_t budget = max > special + 1 ? max - special : 1;
        d.step = (news + budget - 1) / budget;
    }
    std::size_t i = 0;
    std::set<int> planes;
    for (const FlowMark& m : c.marks) {
        if (m.kind == kMarkNew && (i++ % d.step) != 0) continue;
        d.marks.push_back(&m);
        if (m.kind == kMarkNew) ++d.news;
        if (m.kind == kMarkRetx) ++d.retx;
        if (m.kind == kMarkLost) ++d.lost;
        if (c.transport == "MRC" && m.plane >= 0) planes.insert(m.plane);
    }
    d.planes.assign(planes.begin(), planes.end());
    return d;
}

std::string heading(const FlowConnection& c, std::size_t id) {
    std::string s = "Connection " + std::to_string(id) + ": " + c.transport + ", requester " +
                    c.requester_ip + (c.requester_qpn ? " QP " + qpn_hex(*c.requester_qpn) : "") +
                    " -> responder " + c.responder_ip;
    if (c.transport != "?") s += " QP " + qpn_hex(c.responder_qpn);
    if (c.transport == "MRC") s += " (addresses of the first packet; each plane has its own)";
    return s;
}

std::string counts_text(const FlowConnection& c) {
    // Both ends captured, a loss is seen (sent, never received); from one end it is inferred from
    // what the sender did next, and the count says which of the two it is.
    std::string s =
        std::to_string(c.requests) + " request packets: " + std::to_string(c.new_psns) + " new" +
        (c.sent_before_capture > 0
             ? " (" + std::to_string(c.sent_before_capture) +
                   " of them seen only as received: sent before the capture began)"
             : std::string()) +
        ", " + std::to_string(c.retransmissions) + " retransmitted, " + std::to_string(c.lost) +
        (c.both_ends ? " lost on the wire (sent, never received); "
                     : " presumed lost (reported missing or given up on by the "
                       "sender); ");
    if (c.transport == "MRC") {
        s += std::to_string(c.sacks) + " SACKs, " + std::to_string(c.mrc_nacks) + " NACKs, " +
             std::to_string(c.port_status) + " port status, " + std::to_string(c.plane_downs) +
             " plane(s) down";
    } else {
        s += std::to_string(c.acks) + " ACKs, " + std::to_string(c.naks) + " sequence NAKs, " +
             std::to_string(c.rnr_naks) + " RNR NAKs, " + std::to_string(c.error_naks) +
             " error NAKs";
    }
    s += ", " + std::to_string(c.cnps) + " CNPs";
    return s;
}

/** "32 paths (0,4,8,...,124)" or "3 paths (0,4-5)": a sorted list of path indices. */
std::string paths_text(const std::vector<std::uint16_t>& v) {
    const std::string n = std::to_string(v.size()) + (v.size() == 1 ? " path (" : " paths (");
    if (v.size() > 6) {
        return n + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) +
               ",...," + std::to_string(v.back()) + ")";
    }
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
        std::size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1)
            ++j;
        if (!s.empty()) s += ',';
        s += std::to_string(v[i]);
        if (j > i) s += "-" + std::to_string(v[j]);
        i = j;
    }
    return n + s + ")";
}

std::string html_escape(const std::string& s) {
    std::string o;
    o.reserve(s.size());
    for (char ch : s) {
        switch (ch) {
        case '&':
            o += "&amp;";
            break;
        case '<':
            o += "&lt;";
            break;
        case '>':
            o += "&gt;";
            break;
        case '"':
            o += "&quot;";
            break;
        default:
            o += ch;
        }
    }
    return o;
}

} // namespace

bool story_selects(const FlowConnection& c, const StoryOptions& opts) {
    if (!opts.qp) return true;
    return (c.transport != "?" && c.responder_qpn == *opts.qp) || c.requester_qpn == *opts.qp;
}

std::string story_text(const FlowStory& s, const StoryOptions& opts) {
    std::string out = "droce-trace explain " + s.file + ": " + capture_counts_text(s) + ", " +
                      std::to_string(s.connections.size()) + " connection(s)";
    if (const std::string why = not_ethernet_text(s); !why.empty()) out += ". " + why;
    if (s.twins > 0) {
        out += "; " + std::to_string(s.twins) +
               " packets were captured at both ends (sent and received) and count once";
    }
    if (s.rejected > 0) {
        out += "; " + std::to_string(s.rejected) +
               " RoCEv2 frames a receiver rejects are left out of the story (";
        for (std::size_t i = 0; i < s.rejected_first.size(); ++i)
            out += (i ? ", #" : "#") + std::to_string(s.rejected_first[i].first) + " " +
                   s.rejected_first[i].second;
        out += s.rejected > s.rejected_first.size() ? ", ...)" : ")";
    }
    if (s.capture_dropped > 0) {
        out += "; the capture itself dropped " + std::to_string(s.capture_dropped) +
               " frames (its ring was full: pcapng isb_ifdrop), so a gap below may be the "
               "capture's, not the network's";
    }
    out += '\n';
    std::size_t id = 0;
    for (const FlowConnection& c : s.connections) {
        ++id;
        if (!story_selects(c, opts)) continue;
        out += '\n' + heading(c, id) + '\n';
        char span[64];
        std::snprintf(span, sizeof span, ", %.3f ms to %.3f ms",
                      static_cast<double>(c.t_first_ns) / 1e6,
                      static_cast<double>(c.t_last_ns) / 1e6);
        out += "  frames #" + std::to_string(c.first_frame) + "-#" + std::to_string(c.last_frame) +
               span;
        if (c.transport != "?") out += "; first PSN " + std::to_string(c.first_psn);
        out += '\n';
        out += "  " + counts_text(c) + '\n';
        if (!c.plane_packets.empty()) {
            out += "  planes:";
            for (std::size_t p = 0; p < c.plane_packets.size(); ++p) {
                out += " " + std::to_string(p) + ": " + std::to_string(c.plane_packets[p]) +
                       " packets (" + std::to_string(c.plane_retx[p]) + " resent)";
                if (p < c.plane_paths.size() && !c.plane_paths[p].empty())
                    out += " on " + paths_text(c.plane_paths[p]);
                if (p + 1 < c.plane_packets.size()) out += ',';
            }
            out += '\n';
        }
        for (const FlowEvent& e : c.events) {
            char head[96];
            std::snprintf(head, sizeof head, "  %-15s %10.3f ms  %-11s ", frames_text(e).c_str(),
                          static_cast<double>(e.t_ns) / 1e6, to_string(e.kind));
            out += head + e.text + '\n';
        }
    }
    return out;
}

Json story_json(const FlowStory& s, const StoryOptions& opts) {
    Json j;
    j["file"] = s.file;
    j["frames"] = s.frames;
    j["roce_frames"] = s.roce_frames;
    j["roce_packets"] = s.roce_packets;
    j["gso_sends"] = s.gso_sends;
    j["gso_packets"] = s.gso_packets;
    Json ne = Json::object();
    for (const auto& [type, frames] : s.not_ethernet)
        ne[link_type_name(type)] = frames;
    j["not_ethernet"] = std::move(ne);
    j["directions"] = s.directions;
    j["twins"] = s.twins;
    j["capture_dropped"] = s.capture_dropped;
    j["rejected"] = s.rejected;
    Json conns = Json::array();
    std::size_t id = 0;
    for (const FlowConnection& c : s.connections) {
        ++id;
        if (!story_selects(c, opts)) continue;
        Json o;
        o["id"] = id;
        o["transport"] = c.transport;
        o["requester"] = {{"ip", c.requester_ip},
                          {"qpn", c.requester_qpn ? Json(*c.requester_qpn) : Json(nullptr)}};
        o["responder"] = {{"ip", c.responder_ip}, {"qpn", c.responder_qpn}};
        o["first_psn"] = c.first_psn;
        o["first_frame"] = c.first_frame;
        o["last_frame"] = c.last_frame;
        o["requests"] = c.requests;
        o["new_psns"] = c.new_psns;
        o["sent_before_capture"] = c.sent_before_capture;
        o["retransmissions"] = c.retransmissions;
        o["lost"] = c.lost;
        o["both_ends"] = c.both_ends;
        o["acks"] = c.acks;
        o["naks"] = c.naks;
        o["error_naks"] = c.error_naks;
        o["rnr_naks"] = c.rnr_naks;
        o["cnps"] = c.cnps;
        o["sacks"] = c.sacks;
        o["mrc_nacks"] = c.mrc_nacks;
        o["port_status"] = c.port_status;
        o["plane_downs"] = c.plane_downs;
        Json planes = Json::array();
        for (std::size_t p = 0; p < c.plane_packets.size(); ++p) {
            if (c.plane_packets[p] == 0) continue;
            planes.push_back({{"plane", p},
                              {"packets", c.plane_packets[p]},
                              {"retransmissions", c.plane_retx[p]},
                              {"paths", p < c.plane_paths.size() ? c.plane_paths[p]
                                                                 : std::vector<std::uint16_t>{}}});
        }
        o["planes"] = std::move(planes);
        const Drawn d = select_marks(c, opts.max_marks);
        Json markers = Json::object();
        for (const FlowMarker& m : c.markers)
            markers[m.type] = markers.value(m.type, 0) + 1;
        o["timeline"] = {{"marks", d.marks.size()},        {"new", d.news},
                         {"retransmissions", d.retx},      {"lost", d.lost},
                         {"thinned_from", c.marks.size()}, {"every_nth_new", d.step},
                         {"markers", std::move(markers)},  {"planes", d.planes}};
        Json evs = Json::array();
        for (const FlowEvent& e : c.events) {
            Json ev;
            ev["kind"] = to_string(e.kind);
            ev["first_frame"] = e.first_frame;
            ev["last_frame"] = e.last_frame;
            ev["t_ms"] = t_ms(e.t_ns);
            for (const auto& [k, v] : e.data.items())
                ev[k] = v;
            ev["text"] = e.text;
            evs.push_back(std::move(ev));
        }
        o["events"] = std::move(evs);
        conns.push_back(std::move(o));
    }
    j["connections"] = std::move(conns);
    return j;
}

namespace {

// The page's script: draws each connection's timeline from the JSON in #flow-data. Kept small and
// dependency-free so that the page works offline and a headless browser can be asked what it drew.
constexpr const char* kScript = R"JS(
(function () {
  var data = JSON.parse(document.getElementById('flow-data').textContent);
  var NS = 'http://www.w3.org/2000/svg';
  var COLORS = ['#1f77b4', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#17becf', '#e377c2', '#7f7f7f'];
  var MARK = {nak: '#d62728', error: '#8b0000', rnr: '#6a3d9a', cnp: '#e6550d', plane_down: '#111111', plane_up: '#888888'};
  var NAMES = {nak: 'NAK', error: 'error NAK', rnr: 'RNR NAK', cnp: 'CNP', plane_down: 'plane down', plane_up: 'plane up'};
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  // About n round values from lo to hi and their labels. PSNs are integers: an integer axis never
  // steps by less than 1 (a capture of two packets would get PSN 1000.2). Each value is a whole
  // multiple of the step, not a sum of steps (0.2 + 0.2 + 0.2 is 0.6000000000000001, a label too
  // wide for the margin), and the labels have as many decimals as the step needs, so that two
  // ticks of a span of a microsecond are not both "0.001".
  function ticks(lo, hi, n, integer, label) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= n) { step *= m; return true; } return false; });
    if (integer) step = Math.max(1, Math.round(step));
    var decimals = integer ? 0 : Math.max(0, -Math.floor(Math.log10(step) + 1e-9)), out = [];
    for (var i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i++)
      out.push({v: i * step, text: label(i * step, decimals)});
    return out;
  }
  function color(c, plane) { return c.transport === 'MRC' && plane >= 0 ? COLORS[plane % COLORS.length] : COLORS[0]; }
  data.connections.forEach(function (c) {
    var host = document.getElementById('timeline-' + c.id);
    if (!host) return;
    var lanes = c.transport === 'MRC' ? c.planes : [], LH = 14, LT = lanes.length ? 26 + lanes.length * LH : 0;
    var W = 1060, H = 380 + LT, L = 78, R = 16, T = 14, B = 46 + LT;
    var svg = el('svg', {width: W + 200, height: H, viewBox: '0 0 ' + (W + 200) + ' ' + H, 'class': 'timeline'}, host);
    var t0 = c.t0, t1 = Math.max(c.t1, c.t0 + 0.001), p0 = c.p0, p1 = Math.max(c.p1, c.p0 + 1);
    function X(t) { return L + (t - t0) / (t1 - t0) * (W - L - R); }
    function Y(p) { return H - B - (p - p0) / (p1 - p0) * (H - B - T); }
    el('rect', {x: L, y: T, width: W - L - R, height: H - B - T, fill: '#fafafa', stroke: '#ccc'}, svg);
    ticks(t0, t1, 8, false, function (t, d) { return t.toFixed(d); }).forEach(function (k) {
      el('line', {x1: X(k.v), x2: X(k.v), y1: T, y2: H - B, stroke: '#eee'}, svg);
      el('text', {x: X(k.v), y: H - B + 16, 'text-anchor': 'middle', 'class': 'tick'}, svg).textContent = k.text;
    });
    ticks(p0, p1, 6, true, function (p) { return (((c.first_psn + p) % 16777216) + 16777216) % 16777216 + ''; }).forEach(function (k) {
      el('line', {x1: L, x2: W - R, y1: Y(k.v), y2: Y(k.v), stroke: '#eee'}, svg);
      el('text', {x: L - 6, y: Y(k.v) + 4, 'text-anchor': 'end', 'class': 'tick'}, svg).textContent = k.text;
    });
    // MRC: one lane per plane under the chart, shaded by how many packets the plane sent in each
    // time slice: a plane that died is an empty lane from then on.
    lanes.forEach(function (p, i) {
      var y = H - LT + 8 + i * LH;
      el('text', {x: L - 6, y: y + LH - 4, 'text-anchor': 'end', 'class': 'tick'}, svg).textContent = 'plane ' + p;
      el('rect', {x: L, y: y + 1, width: W - L - R, height: LH - 2, fill: '#f4f4f4'}, svg);
      var bins = c.lanes[p] || [], bw = (W - L - R) / c.nbins;
      bins.forEach(function (b) {
        el('rect', {x: L + b[0] * bw, y: y + 1, width: Math.max(bw, 1), height: LH - 2, fill: COLORS[p % COLORS.length],
                    'fill-opacity': 0.25 + 0.75 * b[1] / c.binmax, 'class': 'lane-bin plane-' + p}, svg);
      });
    });
    el('text', {x: (L + W) / 2, y: H - 8, 'text-anchor': 'middle', 'class': 'axis'}, svg).textContent = 'time since the first frame of the capture (ms)';
    el('text', {x: 14, y: (T + H - B) / 2, 'text-anchor': 'middle', 'class': 'axis', transform: 'rotate(-90 14 ' + (T + H - B) / 2 + ')'}, svg).textContent = 'PSN';
    var g = el('g', {'class': 'marks'}, svg);
    c.marks.forEach(function (m) {
      var x = X(m[0]), y = Y(m[1]), col = color(c, m[2]), cls = 'pkt ' + ['new', 'retx', 'lost'][m[3]] + ' plane-' + m[2];
      if (m[3] === 0) el('circle', {cx: x, cy: y, r: 2.2, fill: col, 'class': cls}, g);
      else if (m[3] === 1) el('path', {d: 'M' + x + ',' + (y - 5) + 'l4.5,8h-9z', fill: col, stroke: '#000', 'stroke-width': 0.8, 'class': cls}, g);
      else el('path', {d: 'M' + (x - 4) + ',' + (y - 4) + 'l8,8m0,-8l-8,8', stroke: '#d62728', 'stroke-width': 2, 'class': cls}, g);
    });
    c.markers.forEach(function (k) {
      var mg = el('g', {'class': 'marker ' + k[2]}, svg), x = X(k[0]);
      el('line', {x1: x, x2: x, y1: T, y2: H - B, stroke: MARK[k[2]] || '#000', 'stroke-width': k[2] === 'plane_down' ? 2 : 1.2, 'stroke-dasharray': k[2] === 'cnp' ? '' : '4,3'}, mg);
      el('circle', {cx: x, cy: Y(k[1]), r: 4, fill: 'none', stroke: MARK[k[2]] || '#000', 'stroke-width': 1.5}, mg);
      el('title', {}, mg).textContent = k[3] + ' at ' + k[0] + ' ms';
      if (k[2] === 'plane_down' || k[2] === 'plane_up')
        el('text', {x: x + 4, y: T + 14, 'class': 'legend-text'}, mg).textContent = k[3];
    });
    var lg = el('g', {'class': 'legend', transform: 'translate(' + (W + 8) + ',' + (T + 8) + ')'}, svg), ly = 0;
    function item(cls, draw, label) {
      var ig = el('g', {'class': cls, transform: 'translate(0,' + ly + ')'}, lg);
      draw(ig);
      el('text', {x: 16, y: 4, 'class': 'legend-text'}, ig).textContent = label;
      ly += 18;
    }
    if (c.transport === 'MRC') {
      c.planes.forEach(function (p) {
        item('legend-plane', function (ig) { el('circle', {cx: 5, cy: 0, r: 4, fill: COLORS[p % COLORS.length]}, ig); }, 'plane ' + p);
      });
    } else {
      item('legend-rc', function (ig) { el('circle', {cx: 5, cy: 0, r: 4, fill: COLORS[0]}, ig); }, c.transport + ' packet');
    }
    item('legend-kind', function (ig) { el('path', {d: 'M5,-5l4.5,8h-9z', fill: '#bbb', stroke: '#000'}, ig); }, 'retransmission');
    item('legend-kind', function (ig) { el('path', {d: 'M1,-4l8,8m0,-8l-8,8', stroke: '#d62728', 'stroke-width': 2}, ig); }, 'copy lost');
    Object.keys(NAMES).forEach(function (t) {
      if (!c.markers.some(function (k) { return k[2] === t; })) return;
      item('legend-marker', function (ig) { el('line', {x1: 0, x2: 10, y1: 0, y2: 0, stroke: MARK[t], 'stroke-width': 2, 'stroke-dasharray': t === 'cnp' ? '' : '3,2'}, ig); }, NAMES[t]);
    });
    var info = document.getElementById('drawn-' + c.id);
    if (info) info.textContent = c.marks.length + ' packet marks drawn';
  });
  document.body.setAttribute('data-rendered', 'yes');
})();
)JS";

constexpr const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 18px 0 4px; }
.counts, .note { margin: 2px 0; color: #444; }
svg.timeline text.tick { font-size: 11px; fill: #555; } svg.timeline text.axis { font-size: 12px; fill: #333; }
svg.timeline text.legend-text { font-size: 12px; fill: #222; }
ol.story { font: 12px/1.35 ui-monospace, monospace; padding-left: 0; list-style: none; }
ol.story li { margin: 2px 0; } .fr { color: #777; display: inline-block; min-width: 9em; }
.tm { color: #777; display: inline-block; min-width: 7em; text-align: right; margin-right: 1em; }
.k { display: inline-block; min-width: 7em; font-weight: 600; }
.k-nak, .k-error_nak, .k-mrc_nack { color: #d62728; } .k-retransmit { color: #b35900; }
table.index { border-collapse: collapse; font-size: 13px; margin: 6px 0 4px; }
table.index td, table.index th { border: 1px solid #ddd; padding: 1px 8px; text-align: right; }
.k-rnr_nak { color: #6a3d9a; } .k-cnp { color: #e6550d; } .k-plane_down { color: #111; }
)CSS";

} // namespace

std::string story_html(const FlowStory& s, const StoryOptions& opts) {
    Json data;
    data["file"] = s.file;
    Json conns = Json::array();
    std::string body;
    std::size_t id = 0;
    for (const FlowConnection& c : s.connections) {
        ++id;
        if (!story_selects(c, opts)) continue;
        const Drawn d = select_marks(c, opts.max_marks);
        Json o;
        o["id"] = id;
        o["transport"] = c.transport;
        o["first_psn"] = c.first_psn;
        std::int64_t pmin = 0, pmax = 1;
        std::int64_t tmin = c.t_first_ns, tmax = c.t_last_ns;
        Json marks = Json::array();
        for (const FlowMark* m : d.marks) {
            marks.push_back({t_ms(m->t_ns), m->psn_off, m->plane, m->kind});
            pmin = std::min(pmin, m->psn_off);
            pmax = std::max(pmax, m->psn_off);
            tmin = std::min(tmin, m->t_ns);
            tmax = std::max(tmax, m->t_ns);
        }
        Json markers = Json::array();
        for (const FlowMarker& m : c.markers)
            markers.push_back({t_ms(m.t_ns), std::clamp(m.psn_off, pmin, pmax), m.type, m.label});
        o["t0"] = t_ms(tmin);
        o["t1"] = t_ms(tmax);
        o["p0"] = pmin;
        o["p1"] = pmax;
        o["planes"] = d.planes;
        // Lanes: every packet (not only the drawn ones) counted per plane per time slice.
        constexpr int kBins = 240;
        const double span = static_cast<double>(std::max<std::int64_t>(tmax - tmin, 1));
        std::map<int, std::map<int, int>> lanes;
        int binmax = 1;
        if (c.transport == "MRC") {
            for (const FlowMark& m : c.marks) {
                if (m.plane < 0) continue;
                const int b = std::min(
                    kBins - 1, static_cast<int>(static_cast<double>(m.t_ns - tmin) / span * kBins));
                binmax = std::max(binmax, ++lanes[m.plane][b]);
            }
        }
        Json lj = Json::object();
        for (const auto& [plane, bins] : lanes) {
            Json a = Json::array();
            for (const auto& [b, n] : bins)
                a.push_back({b, n});
            lj[std::to_string(plane)] = std::move(a);
        }
        o["lanes"] = std::move(lj);
        o["nbins"] = kBins;
        o["binmax"] = binmax;
        o["marks"] = std::move(marks);
        o["markers"] = std::move(markers);
        conns.push_back(std::move(o));

        body += "<section class=\"conn\" id=\"conn-" + std::to_string(id) + "\">\n<h2>" +
                html_escape(heading(c, id)) + "</h2>\n<p class=\"counts\">" +
                html_escape(counts_text(c)) + "</p>\n";
        if (!c.plane_packets.empty()) {
            std::string pl = "Per plane (MRC paths are UDP source ports ev_base + index):";
            for (std::size_t p = 0; p < c.plane_packets.size(); ++p) {
                pl += " plane " + std::to_string(p) + ": " + std::to_string(c.plane_packets[p]) +
                      " packets, " + std::to_string(c.plane_retx[p]) + " resent";
                if (p < c.plane_paths.size() && !c.plane_paths[p].empty())
                    pl += ", on " + paths_text(c.plane_paths[p]);
                pl += p + 1 < c.plane_packets.size() ? ";" : ".";
            }
            body += "<p class=\"counts\">" + html_escape(pl) + "</p>\n";
        }
        body += "<div class=\"tl\" id=\"timeline-" + std::to_string(id) + "\"></div>\n";
        body += "<p class=\"note\"><span id=\"drawn-" + std::to_string(id) + "\"></span>";
        if (d.step > 1) {
            body += " (of " + std::to_string(c.marks.size()) +
                    " packets: every retransmission and loss, and 1 in " + std::to_string(d.step) +
                    " of the in-order ones)";
        }
        body += ". Circles: packets sent once and acknowledged; triangles: retransmissions; red "
                "crosses: copies lost (";
        body += c.both_ends ? "sent and never received: both ends are in the capture"
                            : "presumed from what followed: a NAK or SACK reported them missing, "
                              "or the sender gave up on them";
        body += "); vertical lines: NAKs, RNR NAKs, CNPs and plane events.";
        if (c.transport == "MRC") {
            body += " Under the chart, one lane per plane: how many packets it sent in each slice "
                    "of time.";
        }
        body += "</p>\n<ol class=\"story\">\n";
        for (const FlowEvent& e : c.events) {
            char tm[32];
            std::snprintf(tm, sizeof tm, "%.3f ms", static_cast<double>(e.t_ns) / 1e6);
            body += "<li class=\"ev ev-" + std::string(to_string(e.kind)) +
                    "\"><span class=\"fr\">" + frames_text(e) + "</span><span class=\"tm\">" + tm +
                    "</span><span class=\"k k-" + to_string(e.kind) + "\">" + to_string(e.kind) +
                    "</span> " + html_escape(e.text) + "</li>\n";
        }
        body += "</ol>\n</section>\n";
    }
    data["connections"] = std::move(conns);
    // "</" must not appear inside the script element: escape the slash of any in the data.
    std::string json = data.dump();
    for (std::size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 2))
        json.replace(at, 2, "<\\/");
    std::string page =
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>droce-trace explain: " +
        html_escape(s.file) + "</title>\n<style>" + kStyle +
        "</style>\n</head>\n<body>\n<h1>droce-trace explain: " + html_escape(s.file) +
        "</h1>\n<p class=\"counts\">" + html_escape(capture_counts_text(s)) + ", " +
        std::to_string(s.connections.size()) +
        " connection(s). Time runs left to right, PSN upward: a straight rising "
        "line is a connection sending in order; a step back down is a resend.</p>\n";
    if (const std::string why = not_ethernet_text(s); !why.empty())
        page += "<p class=\"counts\">" + html_escape(why) + "</p>\n";
    if (s.capture_dropped > 0)
        page += "<p class=\"counts\">The capture itself dropped " +
                std::to_string(s.capture_dropped) +
                " frames (its ring was full): a gap below may be the capture's, not the "
                "network's.</p>\n";
    // An index first: a capture of a whole demo holds dozens of connections. NAKs by AETH
    // syndrome, never summed: a PSN sequence error NAK is answered by a resend, an error NAK
    // (invalid request, remote access, remote operational) fails the work request, an RNR NAK
    // asks for a wait; MRC NACKs have reasons of both kinds and a column of their own.
    page += "<table class=\"index\">\n<tr><th>connection</th><th>transport</th><th>requester "
            "QP</th><th>responder QP</th><th>packets</th><th>resent</th><th>lost</th>"
            "<th title=\"NAK, PSN sequence error: the requester resends from its PSN\">sequence "
            "NAKs</th><th title=\"NAK, invalid request, remote access or remote operational "
            "error: the work request fails\">error NAKs</th><th>RNR NAKs</th><th>MRC "
            "NACKs</th><th>CNPs</th><th>planes down</th></tr>\n";
    id = 0;
    for (const FlowConnection& c : s.connections) {
        ++id;
        if (!story_selects(c, opts)) continue;
        const auto cell = [](std::uint64_t v) { return "<td>" + std::to_string(v) + "</td>"; };
        page += "<tr><td><a href=\"#conn-" + std::to_string(id) + "\">" + std::to_string(id) +
                "</a></td><td>" + html_escape(c.transport) + "</td><td>" +
                (c.requester_qpn ? qpn_hex(*c.requester_qpn) : std::string("?")) + "</td><td>" +
                (c.transport != "?" ? qpn_hex(c.responder_qpn) : std::string("?")) + "</td>" +
                cell(c.requests) + cell(c.retransmissions) + cell(c.lost) + cell(c.naks) +
                cell(c.error_naks) + cell(c.rnr_naks) + cell(c.mrc_nacks) + cell(c.cnps) +
                cell(c.plane_downs) + "</tr>\n";
    }
    page += "</table>\n";
    page += body;
    page += "<script type=\"application/json\" id=\"flow-data\">" + json + "</script>\n<script>" +
            kScript + "</script>\n</body>\n</html>\n";
    return page;
}

} // namespace droce::trace
