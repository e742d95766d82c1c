#!/usr/bin/env python3
"""End-to-end loopback benchmark of issue 4's targets, side by side with
iperf3 and GStreamer, printed as a markdown table.

Workloads (8800-byte packets, loopback only):
  1. one 3.2 Gbit/s stream (an 8K stripe: 7680x540 uyvy422 at 48 fps)
  2. eight such streams at once (the whole 8K frame), as 8 sender and 8
     receiver processes, and as one sender process with --stripes 8
  3. a rate sweep of one stream (48, 96, 144, 192 fps) for the highest
     lossless rate
  4. the whole 8K 30p 4:2:2 10-bit frame (7680x4320, 19.9 Gbit/s of video)
     on this one VM, for every tool that can attempt it
and the same through `iperf3 -u -l 8800 -b RATE`, through GStreamer
(rtpvrawpay -> udpsink / udpsrc -> rtpvrawdepay) and through FFmpeg's RTP
muxer (received by `nagare recv`, which counts its bytes and times).
UltraGrid is not in this run: it is neither packaged in Debian 12 nor
buildable from crates, and this machine reaches only package registries.

Usage: bench/loopback.sh [SECONDS]   (default 60 s per workload)
Nothing here is a pass/fail test: timings on shared VMs are noisy.
"""

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAGARE = os.environ.get("NAGARE", os.path.join(ROOT, "target", "release", "nagare"))
SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else float(os.environ.get("DURATION", 60))
W, H, PIX, FPS, PKT = 7680, 540, "uyvy422", 48, 8800
FRAME = W * H * 2
RATE = FRAME * 8 * FPS  # 3.185 Gbit/s of video payload
BASE = 47000


def timed(cmd, **kw):
    """Starts cmd under GNU time so its CPU seconds can be read."""
    tf = tempfile.NamedTemporaryFile(delete=False, suffix=".time")
    tf.close()
    full = ["/usr/bin/time", "-f", "%U %S", "-o", tf.name] + cmd
    # A session of its own, so a signal reaches the tool and not only time.
    p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, **kw)
    p.timefile = tf.name
    return p


def finish(p, timeout=None):
    out, err = p.communicate(timeout=timeout)
    try:
        with open(p.timefile) as f:
            fields = f.read().split()
        cpu = float(fields[-2]) + float(fields[-1])
    except (OSError, ValueError, IndexError):
        cpu = float("nan")
    os.unlink(p.timefile)
    return out, err, cpu


# The whole-8K section's second pass pins every tool the same way: senders
# on CPU 0, receivers on CPU 1 (on two cores, a receiver's threads sharing
# the sender's core is what makes a sender late).
PIN = False


def on(role, cmd):
    """cmd, pinned by role when PIN is set."""
    if not PIN:
        return cmd
    return ["taskset", "-c", "0" if role == "send" else "1"] + cmd


def nagare_streams(n, fps, seconds, stripes=False, realtime=False, pix=PIX, whole=False):
    """n sender/receiver pairs, or with stripes one sender of n stripes;
    realtime runs the sending and receiving threads with SCHED_FIFO; whole
    sends the stripes to one `recv --stripes n` that rebuilds each whole
    frame and writes it out (to /dev/null: 2.5 GB/s fits no disk here)."""
    frames = int(fps * seconds)
    rt = ["--realtime"] if realtime else []
    if whole:
        recvs = [timed(on("recv", [NAGARE, "recv", "--listen", f"127.0.0.1:{BASE}", "--stripes", str(n),
                                   "--size", f"{W}x{H * n}", "--pix-fmt", pix, "--fps", str(fps),
                                   "--frames", str(frames), "--timeout", "5", "--json", "-o", "/dev/null"]
                                  + rt))]
    else:
        recvs = nagare_receivers(n, BASE, W, H, pix, fps, frames, rt)
    time.sleep(0.5)
    if stripes:
        sends = [timed(on("send", [NAGARE, "send", "pattern:bars", "--to", f"127.0.0.1:{BASE}",
                                   "--size", f"{W}x{H * n}", "--stripes", str(n), "--pix-fmt", pix,
                                   "--fps", str(fps), "--frames", str(frames), "--packet-size", str(PKT),
                                   "--json"] + rt))]
    else:
        sends = [timed([NAGARE, "send", "pattern:bars", "--to", f"127.0.0.1:{BASE + k}", "--size", f"{W}x{H}",
                        "--pix-fmt", pix, "--fps", str(fps), "--frames", str(frames), "--packet-size", str(PKT),
                        "--json"] + rt) for k in range(n)]
    sent, recv = [], []
    for p in sends:
        out, err, cpu = finish(p)
        d = json.loads(out)
        d["cpu"] = cpu
        sent.append(d)
    for p in recvs:
        out, err, cpu = finish(p)
        d = json.loads(out)
        d["cpu"] = cpu
        recv.append(d)
    packets = sum(s["packets_sent"] for s in sent)
    # A stripes receiver reports losses per stripe and has no jitter figure.
    lost = sum(r["packets_lost"] if "packets_lost" in r else sum(x["packets_lost"] for x in r["per_stripe"])
               for r in recv)
    missing_frames = sum(r["frames_lost"]["count"] + r["frames_incomplete"]["count"] for r in recv)
    # Bytes the receivers counted over the measured first-to-last packet
    # time; concurrent receivers share one span, the longest of theirs.
    rate = received_rate(sum(r["bytes"] for r in recv), max(r["seconds"] for r in recv))
    cpu_s = sum(s["cpu"] for s in sent)
    cpu_r = sum(r["cpu"] for r in recv)
    gbit = sum(s["bytes_sent"] for s in sent) * 8 / 1e9
    label = f"nagare (1 process, {n} stripes" if stripes else f"nagare ({n} stream{'s' if n > 1 else ''}"
    label += ", one recv rebuilding frames" if whole else ""
    label += ", realtime)" if realtime else ")"
    return {
        "tool": label,
        "rate": rate,
        "packets": packets,
        "lost": lost,
        "loss_pct": 100.0 * lost / max(packets, 1),
        "frames_bad": missing_frames,
        "late": sum(s["packets_late"] for s in sent),
        "p99_us": max(s["lateness_us"]["p99"] for s in sent),
        "max_us": max(s["lateness_us"]["max"] for s in sent),
        "cpu_send_per_gbit": cpu_s / max(gbit, 1e-9),
        "cpu_recv_per_gbit": cpu_r / max(gbit, 1e-9),
        "jitter_ms": max((r["jitter_ms"] for r in recv if "jitter_ms" in r), default=None),
    }


def nagare_receivers(n, port0, w, h, pix, fps, frames, extra=()):
    """n `nagare recv` processes on consecutive ports that count bytes and
    whole frames, each over its measured first-to-last packet time."""
    return [timed(on("recv", [NAGARE, "recv", "--listen", f"127.0.0.1:{port0 + k}", "--size", f"{w}x{h}",
                              "--pix-fmt", pix, "--fps", str(fps), "--frames", str(frames),
                              "--timeout", "5", "--json"] + list(extra))) for k in range(n)]


def ffmpeg_streams(n, seconds, fps=FPS, ten_bit=False):
    """n FFmpeg RTP muxers (-re: paced by frame, not by packet) at the same
    size and rate as nagare's rows, each received by `nagare recv`. 10-bit
    goes through FFmpeg's bitpacked encoder, the RFC 4175 pgroup layout."""
    frames = int(fps * seconds)
    port0 = BASE + 300
    recvs = nagare_receivers(n, port0, W, H, "uyvp" if ten_bit else PIX, fps, frames)
    time.sleep(0.5)
    codec = ["-pix_fmt", "yuv422p10", "-c:v", "bitpacked"] if ten_bit else ["-pix_fmt", PIX, "-c:v", "rawvideo"]
    sends = [timed(on("send", ["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-f", "lavfi",
                               "-i", f"color=c=black:size={W}x{H}:rate={fps}", "-frames:v", str(frames)]
                      + codec + ["-f", "rtp", f"rtp://127.0.0.1:{port0 + k}?pkt_size={PKT}"]))
             for k in range(n)]
    cpu_s = sum(finish(p)[2] for p in sends)
    recv = []
    for p in recvs:
        out, _, cpu = finish(p, timeout=60)
        try:
            d = json.loads(out)
        except ValueError:
            d = {"bytes": 0, "seconds": 0.0, "packets_received": 0, "packets_lost": 0,
                 "frames_complete": 0, "jitter_ms": None}
        d["cpu"] = cpu
        recv.append(d)
    received = sum(r["bytes"] for r in recv)
    gbit = received * 8 / 1e9
    packets = sum(r["packets_received"] + r["packets_lost"] for r in recv)
    lost = sum(r["packets_lost"] for r in recv)
    return {
        "tool": f"FFmpeg RTP muxer ({n} stream{'s' if n > 1 else ''}{', 10-bit' if ten_bit else ''})",
        "rate": received_rate(received, max(r["seconds"] for r in recv)),
        "packets": packets,
        "lost": lost,
        "loss_pct": 100.0 * lost / max(packets, 1),
        "frames_bad": frames * n - sum(r["frames_complete"] for r in recv),
        "late": None,
        "p99_us": None,
        "max_us": None,
        "cpu_send_per_gbit": cpu_s / max(gbit, 1e-9),
        "cpu_recv_per_gbit": sum(r["cpu"] for r in recv) / max(gbit, 1e-9),
        "jitter_ms": max((r["jitter_ms"] for r in recv if r.get("jitter_ms") is not None), default=None),
    }


def received_rate(byte_count, span_s):
    """The one rate definition of this table: bytes the receiver counted,
    over the receiver's measured time from first to last arrival."""
    return byte_count * 8 / span_s if span_s > 0 else 0.0


def iperf_received(server_json):
    """Bytes the iperf3 server received and the span they came in: from
    the start of its first interval with data to the end of its last
    (iperf3 has no per-packet times; 0.1 s intervals bound the error)."""
    try:
        ivs = [i["sum"] for i in json.loads(server_json)["intervals"]]
    except (ValueError, KeyError, TypeError):
        return 0, 0.0
    busy = [i for i in ivs if i.get("bytes", 0) > 0]
    if not busy:
        return 0, 0.0
    return sum(i["bytes"] for i in busy), busy[-1]["end"] - busy[0]["start"]


def iperf_streams(n, seconds, rate=RATE, label=""):
    # The servers (receivers) report what arrived, in 0.1 s intervals.
    servers = [subprocess.Popen(on("recv", ["iperf3", "-s", "-1", "-J", "-i", "0.1", "-p", str(BASE + 100 + k),
                                            "-B", "127.0.0.1"]),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
               for k in range(n)]
    time.sleep(0.5)
    clients = [timed(on("send", ["iperf3", "-u", "-c", "127.0.0.1", "-p", str(BASE + 100 + k), "-l", str(PKT),
                                 "-b", str(int(rate)), "-t", str(int(seconds)), "-J"])) for k in range(n)]
    res = []
    for p in clients:
        out, err, cpu = finish(p)
        try:
            d = json.loads(out)
            s = d["end"]["sum"]
            res.append((s, d["end"].get("cpu_utilization_percent", {}), cpu))
        except (ValueError, KeyError):
            res.append(None)
    got = []
    for s in servers:
        try:
            out, _ = s.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            s.kill()
            out, _ = s.communicate()
        got.append(iperf_received(out))
    ok = [r for r in res if r]
    packets = sum(r[0]["packets"] for r in ok)
    lost = sum(r[0]["lost_packets"] for r in ok)
    rate = received_rate(sum(b for b, _ in got), max((t for _, t in got), default=0.0))
    gbit = sum(r[0]["bytes"] for r in ok) * 8 / 1e9
    # iperf3 reports its own and the remote side's CPU in percent of the run.
    cpu_s = sum(r[2] for r in ok)
    cpu_r = sum(r[1].get("remote_total", 0) / 100 * seconds for r in ok)
    return {
        "tool": f"iperf3 -u ({n} stream{'s' if n > 1 else ''}{label})",
        "rate": rate,
        "packets": packets,
        "lost": lost,
        "loss_pct": 100.0 * lost / max(packets, 1),
        "frames_bad": None,
        "late": None,
        "p99_us": None,
        "max_us": None,
        "cpu_send_per_gbit": cpu_s / max(gbit, 1e-9),
        "cpu_recv_per_gbit": cpu_r / max(gbit, 1e-9),
        "jitter_ms": max(r[0]["jitter_ms"] for r in ok) if ok else None,
    }


def stamp_lines(p, pattern, stamps):
    """Reads p's stdout as it comes, noting when each line matching
    pattern arrived (stdbuf -oL keeps gst-launch from holding lines back)."""
    for line in p.stdout:
        if re.search(pattern, line):
            stamps.append(time.monotonic())


def gst_streams(n, seconds, fps=FPS, ten_bit=False):
    frames = int(fps * seconds)
    depth, fmt_name = (10, "UYVP") if ten_bit else (8, "UYVY")
    frame_bytes = W * H * depth // 4
    caps = (f"application/x-rtp,media=video,clock-rate=90000,encoding-name=RAW,sampling=YCbCr-4:2:2,"
            f"depth=(string){depth},width=(string){W},height=(string){H},payload=96")
    recvs = [timed(on("recv", ["stdbuf", "-oL", "gst-launch-1.0", "-e", "-v", "udpsrc", f"port={BASE + 200 + k}",
                               "address=127.0.0.1", "buffer-size=268435456", f"caps={caps}", "!",
                               "rtpvrawdepay", "!", "fakesink", "silent=false", "sync=false"]))
             for k in range(n)]
    # When each depayloaded frame reached the sink, per receiver.
    stamps = [[] for _ in recvs]
    readers = [threading.Thread(target=stamp_lines, args=(p, r"chain\s+\*+", st), daemon=True)
               for p, st in zip(recvs, stamps)]
    for t in readers:
        t.start()
    time.sleep(1.0)
    sends = [timed(on("send", ["gst-launch-1.0", "-q", "videotestsrc", "is-live=true", "pattern=black",
                               f"num-buffers={frames}", "!",
                               f"video/x-raw,format={fmt_name},width={W},height={H},framerate={fps}/1", "!",
                               "rtpvrawpay", f"mtu={PKT + 28}", "!", "udpsink", "host=127.0.0.1",
                               f"port={BASE + 200 + k}", "buffer-size=67108864"])) for k in range(n)]
    cpu_s = 0.0
    for p in sends:
        _, _, cpu = finish(p)
        cpu_s += cpu
    time.sleep(1.0)
    cpu_r = 0.0
    for p in recvs:
        os.killpg(p.pid, 2)  # SIGINT: gst-launch -e sends EOS and exits
        p.wait(timeout=30)
        for t in readers:
            t.join(timeout=5)
        _, _, cpu = finish(p, timeout=30)
        cpu_r += cpu
    got = sum(len(st) for st in stamps)
    want = frames * n
    gbit = want * frame_bytes * 8 / 1e9
    # Frames after each receiver's first, over its first-to-last time: the
    # first frame's bytes came before its stamp.
    after_first = sum(max(len(st) - 1, 0) for st in stamps) * frame_bytes
    span = max((st[-1] - st[0] for st in stamps if len(st) > 1), default=0.0)
    return {
        "tool": f"GStreamer ({n} stream{'s' if n > 1 else ''}{', 10-bit' if ten_bit else ''})",
        "rate": received_rate(after_first, span),
        "packets": None,
        "lost": None,
        "loss_pct": None,
        "frames_bad": want - got,
        "late": None,
        "p99_us": None,
        "max_us": None,
        "cpu_send_per_gbit": cpu_s / max(gbit, 1e-9),
        "cpu_recv_per_gbit": cpu_r / max(gbit, 1e-9),
        "jitter_ms": None,
    }


def fmt(v, f="{:.2f}"):
    return "–" if v is None else f.format(v)


def main():
    if not os.path.exists(NAGARE):
        sys.exit("build first: cargo build --release")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"Machine: {os.cpu_count()} cores ({cpu}), {platform.release()}, "
          f"{SECONDS:.0f} s per workload, {PKT}-byte packets, loopback", flush=True)
    if os.environ.get("ONLY") == "whole":
        print(f"Whole 8K 30p 4:2:2 10-bit (7680x4320 uyvp, {WHOLE_RATE / 1e9:.2f} Gbit/s of video), one VM:")
        print_rows(whole_8k(SECONDS))
        return
    rows = []
    for n in (1, 8):
        rows.append(nagare_streams(n, FPS, SECONDS))
        print(f"  done: {rows[-1]['tool']}", file=sys.stderr, flush=True)
        rows.append(iperf_streams(n, SECONDS))
        print(f"  done: {rows[-1]['tool']}", file=sys.stderr, flush=True)
        rows.append(gst_streams(n, SECONDS))
        print(f"  done: {rows[-1]['tool']}", file=sys.stderr, flush=True)
        rows.append(ffmpeg_streams(n, SECONDS))
        print(f"  done: {rows[-1]['tool']}", file=sys.stderr, flush=True)
        if n > 1:
            rows.append(nagare_streams(n, FPS, SECONDS, stripes=True))
            print(f"  done: {rows[-1]['tool']}", file=sys.stderr, flush=True)
    if os.geteuid() == 0:
        # SCHED_FIFO needs root: the same workloads with the pacing thread
        # protected from the scheduler.
        rows.append(nagare_streams(1, FPS, SECONDS, realtime=True))
        rows.append(nagare_streams(8, FPS, SECONDS, stripes=True, realtime=True))
    print_rows(rows)
    whole = whole_8k(SECONDS)
    print()
    print(f"Whole 8K 30p 4:2:2 10-bit (7680x4320 uyvp, {WHOLE_RATE / 1e9:.2f} Gbit/s of video), one VM:")
    print_rows(whole)
    one = {r["tool"].split(" (")[0]: r for r in rows if r["tool"].endswith("(1 stream)")}
    if "nagare" in one and "iperf3 -u" in one:
        n, i = one["nagare"], one["iperf3 -u"]
        print()
        print(f"Ratios, one stream: nagare/iperf3 received rate {n['rate'] / max(i['rate'], 1):.2f}, "
              f"loss {n['loss_pct']:.3f}% vs {i['loss_pct']:.3f}%, send CPU per Gbit "
              f"{n['cpu_send_per_gbit'] / max(i['cpu_send_per_gbit'], 1e-9):.2f}x")
    print()
    print(f"Rate sweep, one nagare stream ({min(SECONDS, 10):g} s each):")
    print("| fps | offered | received | packets lost | bad frames | pacing p99 µs |")
    print("|---|---|---|---|---|---|")
    best = 0.0
    for fps in (48, 96, 144, 192):
        r = nagare_streams(1, fps, min(SECONDS, 10))
        offered = FRAME * 8 * fps
        if r["lost"] == 0 and r["frames_bad"] == 0:
            best = max(best, r["rate"])
        print(f"| {fps} | {offered / 1e9:.2f} Gbit/s | {r['rate'] / 1e9:.2f} Gbit/s | {r['lost']} | "
              f"{r['frames_bad']} | {r['p99_us']:.1f} |", flush=True)
    print(f"\nHighest lossless rate of one stream: {best / 1e9:.2f} Gbit/s")
    print("\nNotes: 'bad frames' for GStreamer counts frames that never left rtpvrawdepay; it does not")
    print("flag frames with packets missing, so its count is a lower bound. iperf3's receive CPU is its")
    print("own remote_total percentage. Every rate is bytes the receivers counted over their measured")
    print("first-to-last time: nagare's from its receivers' byte counts and packet times, iperf3's from")
    print("its server's 0.1 s intervals with data, GStreamer's from when each frame reached the sink,")
    print("FFmpeg's from the `nagare recv` that received it. FFmpeg and GStreamer pace by frame (-re,")
    print("is-live), not by packet. UltraGrid: not packaged in Debian 12, not buildable from crates.")



def print_rows(rows):
    print()
    print("| tool | received rate | packets | lost | loss % | bad frames | sender late pkts | "
          "pacing p99 µs | pacing max µs | jitter ms | CPU s/Gbit send | CPU s/Gbit recv |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tool']} | {r['rate'] / 1e9:.2f} Gbit/s | {fmt(r['packets'], '{}')} | "
              f"{fmt(r['lost'], '{}')} | {fmt(r['loss_pct'], '{:.3f}')} | {fmt(r['frames_bad'], '{}')} | "
              f"{fmt(r['late'], '{}')} | {fmt(r['p99_us'], '{:.1f}')} | {fmt(r['max_us'], '{:.1f}')} | "
              f"{fmt(r['jitter_ms'], '{:.3f}')} | {r['cpu_send_per_gbit']:.3f} | {r['cpu_recv_per_gbit']:.3f} |")


WHOLE_RATE = 7680 * 4320 * 10 // 4 * 8 * 30  # bits/s of 8K30p 4:2:2 10-bit video


def whole_8k(seconds):
    """Every tool that can attempt it carries the whole 8K 30p 10-bit
    frame as 8 stripes of 7680x540: nagare as one sender process to one
    receiver rebuilding and writing whole frames, GStreamer and FFmpeg as 8
    pipelines each (neither can split a frame or rebuild one), iperf3 as 8
    UDP streams at an eighth of the rate each. Each runs twice: as the
    scheduler places it, then pinned (senders CPU 0, receivers CPU 1)."""
    global PIN
    rows = []
    for pin in (False, True):
        PIN = pin
        for row in (lambda: nagare_streams(8, 30, seconds, stripes=True, pix="uyvp", whole=True),
                    lambda: iperf_streams(8, seconds, rate=WHOLE_RATE / 8, label=", 2.49 Gbit/s each"),
                    lambda: gst_streams(8, seconds, fps=30, ten_bit=True),
                    lambda: ffmpeg_streams(8, seconds, fps=30, ten_bit=True)):
            rows.append(row())
            if pin:
                rows[-1]["tool"] += " [pinned: senders CPU 0, receivers CPU 1]"
            elif "nagare" in rows[-1]["tool"]:
                # nagare places its own threads: the pacer alone on the
                # highest CPU, the receiver off it (docs/pacing.md).
                rows[-1]["tool"] += " [defaults, unpinned]"
            print(f"  done: {rows[-1]['tool']}", file=sys.stderr, flush=True)
    PIN = False
    return rows

if __name__ == "__main__":
    main()
