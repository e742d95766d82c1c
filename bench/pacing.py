#!/usr/bin/env python3
"""Pacing cost: CPU seconds per Gbit of one paced 3.2 Gbit/s stream
(an 8K stripe: 7680x540 uyvy422 at 48 fps, 8800-byte packets) from
nagare with --pacing precise and efficient, against iperf3 sending the
same rate over UDP and unpaced over TCP, all on loopback in one run.

Every rate is bytes received over the receiver's measured first-to-last
time. The efficient pacer sleeps only and sends W trains of 3/4 CMAX
(12 packets here, one sendmmsg of two GSO super-datagrams); the last
column is the sender's own ST 2110-21 judgement of what left (a
perfect-clock receiver), so a pacer that saves CPU by leaving the W
type shows it. Sender CPU is the whole sending process's user+system time (GNU
time), so nagare's reader thread counts too; the sending thread alone is
shown separately from nagare's own report.

Usage: bench/pacing.sh [SECONDS]   (default 20 s per row)
Not a pass/fail test: timings on a shared 2-core VM are noisy.
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAGARE = os.path.join(ROOT, "target", "release", "nagare")
SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
W, H, PIX, FPS, PKT = 7680, 540, "uyvy422", 48, 8800
RATE = W * H * 2 * 8 * FPS
PORT = 47100


def timed(cmd):
    """Starts cmd under GNU time, its output captured."""
    tf = tempfile.NamedTemporaryFile(delete=False, suffix=".time")
    tf.close()
    p = subprocess.Popen(["/usr/bin/time", "-f", "%U %S", "-o", tf.name] + cmd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.timefile = tf.name
    return p


def finish(p, timeout):
    out, err = p.communicate(timeout=timeout)
    try:
        with open(p.timefile) as f:
            user, system = f.read().split()[-2:]
        cpu = float(user) + float(system)
    except (OSError, ValueError):
        cpu = float("nan")
    os.unlink(p.timefile)
    return out, err, cpu


def w_verdict(judged):
    """'W kept, Cinst max N' from an AnalyzeReport."""
    if not (judged or {}).get("verdict"):
        return "–"
    cinst = judged.get("cinst") or {}
    kept = judged.get("declared_met")
    if kept is None:  # a receiver told no type: judge as W
        kept = str(judged["verdict"]["compliance"]).lower() in ("narrow", "narrowlinear", "narrow_linear", "wide")
    broken = judged.get("broken_total", 0)
    return (f"{'W kept' if kept else 'W NOT kept'} ({broken} frames broke), "
            f"Cinst max {cinst.get('max', float('nan')):.0f}")


def nagare_row(pacing, extra=(), label="defaults: placed, real-time where allowed"):
    """Two separate processes, as a user starts them; `extra` goes to the
    sender, and its --cpu to the receiver too."""
    recv_extra = extra[:2] if extra[:1] == ("--cpu",) else ()
    frames = int(SECONDS * FPS)
    stream = ["--to", f"127.0.0.1:{PORT}", "--size", f"{W}x{H}", "--pix-fmt", PIX,
              "--fps", str(FPS), "--packet-size", str(PKT)]
    # The receiver judges from the SDP the sender writes: its TP and, for
    # W, the TRoffset it declares (TROFF).
    sdp = f"/tmp/nagare-bench-pacing-{os.getpid()}.sdp"
    subprocess.run([NAGARE, "send", "pattern:bars", *stream, "--frames", "0", "--sdp", sdp,
                    *extra], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recv = subprocess.Popen(
        [NAGARE, "recv", "--sdp", sdp, "--frames", str(frames),
         "--timeout", "5", "--analyze", "--json", *recv_extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # the receiver binds before the sender's first frame (20 ms lead)
    send = timed([NAGARE, "send", "pattern:bars", *stream, "--frames", str(frames),
                  "--pacing", pacing, "--json", *extra])
    out, _, cpu = finish(send, SECONDS * 3 + 30)
    r_out, _ = recv.communicate(timeout=30)
    s, r = json.loads(out), json.loads(r_out)
    got_bits = r["bytes"] * 8
    total = s["packets_sent"] or 1
    verdict = (f"sender: {w_verdict(s.get('st2110_21'))}; "
               f"recv --analyze: {w_verdict(r.get('analysis'))}")
    return {
        "tool": f"nagare send --pacing {pacing} ({label})",
        "rate": got_bits / r["seconds"] / 1e9 if r["seconds"] else 0.0,
        "lost": r["packets_lost"],
        "cpu_gbit": cpu / (got_bits / 1e9) if got_bits else float("nan"),
        "thread_gbit": s["send_cpu_seconds"] / (s["bytes_sent"] * 8 / 1e9),
        "late": 100.0 * s["packets_late"] / total,
        "p99": s["lateness_us"]["p99"],
        "max": s["lateness_us"]["max"],
        "trains": total / max(s["lateness_us"]["count"], 1),
        "verdict": verdict,
    }


def iperf_row(udp, rate=RATE):
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(PORT), "-J"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # iperf3 -s binds its TCP control port
    cmd = ["iperf3", "-c", "127.0.0.1", "-p", str(PORT), "-t", str(SECONDS), "-J"]
    # 8 MB socket buffers, as nagare recv asks for; iperf3's default
    # loses most of a 3.2 Gbit/s UDP stream on loopback.
    cmd += ["-w", "8M"]
    cmd += ["-u", "-l", str(PKT), "-b", str(rate)] if udp else []
    client = timed(cmd)
    _, _, cpu = finish(client, SECONDS * 3 + 30)
    s_out, _ = server.communicate(timeout=30)
    end = json.loads(s_out)["end"]
    summ = end["sum_received"]
    got_bits = summ["bytes"] * 8
    secs = summ["seconds"]
    return {
        "tool": "iperf3 TCP (unpaced)" if not udp else
                f"iperf3 -u -l 8800 -b {'0 (unpaced)' if rate == 0 else '3.2G'}",
        "rate": got_bits / secs / 1e9 if secs else 0.0,
        "lost": end["sum"].get("lost_packets", 0) if udp else 0,
        "cpu_gbit": cpu / (got_bits / 1e9) if got_bits else float("nan"),
        "thread_gbit": float("nan"),
        "late": float("nan"),
        "p99": float("nan"),
        "max": float("nan"),
        "trains": float("nan"),
        "verdict": "–",
    }


def main():
    if not os.path.exists(NAGARE):
        sys.exit("bench: build first (bench/pacing.sh does)")
    unplaced = ("--cpu", "none")
    rows = [nagare_row("precise"), nagare_row("efficient"),
            nagare_row("precise", unplaced + ("--no-realtime",), "not placed, normal priority"),
            iperf_row(True), iperf_row(True, 0), iperf_row(False)]
    load = os.getloadavg()[0]
    print(f"\nPacing cost, one 3.2 Gbit/s stream on loopback, {SECONDS:.0f} s per row; "
          f"{platform.node()}, {os.cpu_count()} CPUs, load {load:.1f} at the end\n")
    print("| sender | received Gbit/s | lost | sender CPU-s/Gbit | sending thread CPU-s/Gbit "
          "| late >100 µs | lateness p99 µs | max µs | packets/train | ST 2110-21 (sender's perfect-clock self-check; the receiver's kernel stamps) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tool']} | {r['rate']:.2f} | {r['lost']} | {r['cpu_gbit']:.3f} | "
              f"{r['thread_gbit']:.3f} | {r['late']:.1f}% | {r['p99']:.0f} | {r['max']:.0f} "
              f"| {r['trains']:.1f} | {r['verdict']} |"
              .replace("nan%", "–").replace("nan", "–"))


if __name__ == "__main__":
    main()
