#!/usr/bin/env bash
# Issue 14 item 2: the whole 8K 30p 10-bit stream (7680x4320 uyvp, 19.9
# Gbit/s of active video) split into 8 stripes, sent by one
# `nagare send --stripes 8` process over loopback, received and
# reassembled by one `nagare recv --stripes 8`, and recorded, all on this
# machine. Prints a markdown table: packets late, achieved rate against
# nominal (sender: bytes over its first-to-last send; receiver: bytes over
# its first-to-last packet), frames complete and recorded, CPU seconds
# per Gbit of each process (and of the sending thread alone), and which
# resource ran out. Beside the receiver's CPU per Gbit, the same run's
# one-core memcpy rate (`nagare doctor`, measured just before the
# receiver starts) and what it means: how many cores the receiver needs
# for the nominal rate, and what one copy of the stream costs.
#
# Usage: bench/stripes.sh [SECONDS]   (default 5; frames = 30 x SECONDS)
# Environment:
#   SPLIT=2si|lines   how frames are striped (default 2si: the quad-link
#                     two-sample interleave, then bands; lines: 8 bands)
#   SOURCE=pattern|file
#                     pattern:bars (default; rendered and striped once,
#                     then cycled: no per-frame work on the send side) or
#                     two frames of noise from a file, looped (read, and
#                     for 2si gathered, on the reader thread every frame)
#   RECORD=PATH       where recv records (default: a file in /var/tmp
#                     written with --direct, O_DIRECT past the page cache,
#                     when the disk has room for every frame and 10 GB
#                     more; else a file in /dev/shm; else /dev/null)
#   DIRECT=0|1        record with --direct (default 1 for the /var/tmp
#                     file, 0 otherwise)
#   PACING="precise efficient"   the sender's --pacing, one run (and one
#                     table) each; default both (on two cores a spinning
#                     sender takes CPU the receiver needs)
#   PIN=1             pin the sender to CPU 0 and the receiver to CPU 1
# Send CPU is the whole process (GNU time): with SOURCE=pattern it includes
# the one-time render of the 8 cycled frames (about 1 CPU-s), which the
# sending thread's figure in brackets leaves out.
# Bounded: the sender stops after its frames, the receiver after its
# frames or 5 s without a packet. Not a pass/fail test.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
split=${SPLIT:-2si}
source=${SOURCE:-pattern}
pacings=${PACING:-precise efficient}
frames=$((secs * 30))
frame_bytes=$((7680 * 4320 * 5 / 2))
command -v /usr/bin/time >/dev/null || { echo "bench: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
cargo build --release --locked >&2
bin=target/release/nagare
dir=$(mktemp -d)
record=${RECORD:-}
cleanup() {
  rm -rf "$dir"
  [ -z "${RECORD:-}" ] && [ -n "$record" ] && [ "$record" != /dev/null ] && rm -f "$record"
  return 0
}
trap cleanup EXIT
direct=${DIRECT:-0}
if [ -z "$record" ]; then
  avail=$(($(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024))
  shm=$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1 || echo 0)
  disk=$(df --output=avail -B1 /var/tmp 2>/dev/null | tail -1 || echo 0)
  need=$((frames * frame_bytes))
  if [ $((need + 10 * 1024 * 1024 * 1024)) -lt "$disk" ]; then
    record=/var/tmp/nagare-stripes-$$.raw
    direct=${DIRECT:-1}
  # Leave 6 GB to the processes (ring, frame buffers) and everything else.
  elif [ $((need + 6 * 1024 * 1024 * 1024)) -lt "$avail" ] && [ "$need" -lt "$shm" ]; then
    record=/dev/shm/nagare-stripes-$$.raw
  else
    record=/dev/null
  fi
fi
direct_flag=()
[ "$direct" = 1 ] && direct_flag=(--direct)
case "$source" in
  pattern) input=pattern:bars; loop=() ;;
  # Two frames of noise, looped (stripes of noise leave no pattern to
  # hide a misplaced pair behind).
  file) head -c $((frame_bytes * 2)) /dev/urandom >"$dir/in.uyvp"; input=$dir/in.uyvp; loop=(--loop) ;;
  *) echo "bench: SOURCE is pattern or file, not '$source'" >&2; exit 2 ;;
esac
pin_send=() pin_recv=()
if [ "${PIN:-0}" = 1 ]; then pin_send=(taskset -c 0) pin_recv=(taskset -c 1); fi
for pacing in $pacings; do
case "$pacing" in
  precise | efficient) ;;
  *) echo "bench: PACING holds precise and/or efficient, not '$pacing'" >&2; exit 2 ;;
esac
port=$((20000 + RANDOM % 20000))
load=$(cut -d' ' -f1-3 /proc/loadavg)
# Whole-machine CPU ticks (busy, total) over the run: what else ran.
ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }
# One core's memcpy rate, measured now (doctor: 256 MiB three times,
# the best): the price of each copy the receiver makes.
copy_bps=$({ "$bin" doctor --rate 20G --timer-seconds 0 --json 2>/dev/null || true; } |
  python3 -c 'import json, sys; print(json.load(sys.stdin).get("copy_bytes_per_second", 0))' 2>/dev/null || echo 0)
ticks_before=$(ticks)
/usr/bin/time -f "%U %S %e" -o "$dir/recv.time" "${pin_recv[@]}" "$bin" recv \
  --listen "127.0.0.1:$port" --stripes 8 --split "$split" --size 7680x4320 \
  --pix-fmt uyvp --fps 30 --frames "$frames" --timeout 5 --json -o "$record" "${direct_flag[@]}" \
  >"$dir/recv.json" 2>"$dir/recv.err" &
rpid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$dir/recv.err" 2>/dev/null && break
  sleep 0.1
done
/usr/bin/time -f "%U %S %e" -o "$dir/send.time" "${pin_send[@]}" "$bin" send "$input" "${loop[@]}" \
  --frames "$frames" --to "127.0.0.1:$port" --size 7680x4320 --pix-fmt uyvp --fps 30 \
  --split "$split" --stripes 8 --packet-size 8800 --pacing "$pacing" --json \
  >"$dir/send.json" 2>"$dir/send.err" || true
wait "$rpid" || true
ticks_after=$(ticks)
recorded=$(stat -c %s "$record" 2>/dev/null || echo 0)
[ "$record" = /dev/null ] && recorded=-1
echo "load average before: $load" >&2
python3 - "$dir" "$frames" "$split" "$source" "$record" "$recorded" "$frame_bytes" "$pacing" "${PIN:-0}" "$ticks_before" "$ticks_after" "$direct" "$copy_bps" <<'EOF'
import json, os, platform, sys
d, frames, split, source, record, recorded, frame_bytes, pacing, pin, t0, t1, direct, copy_bps = sys.argv[1:]
copy_bps = float(copy_bps or 0)
(b0, a0), (b1, a1) = (map(int, t.split()) for t in (t0, t1))
machine_busy = (b1 - b0) / max(a1 - a0, 1)
frames, recorded, frame_bytes = int(frames), int(recorded), int(frame_bytes)
def load(name):
    try:
        return json.load(open(os.path.join(d, name)))
    except (OSError, ValueError):
        sys.exit(f"bench: no {name}: " + open(os.path.join(d, name.replace('json', 'err'))).read()[-2000:])
def cpu(name):
    u, s, wall = open(os.path.join(d, name)).read().split()[-3:]
    return float(u) + float(s), float(wall)
send, recv = load("send.json"), load("recv.json")
send_cpu, send_wall = cpu("send.time")
recv_cpu, recv_wall = cpu("recv.time")
fps = 30
# Nominal: the stream's packets per frame at the average packet size,
# 30 times a second (exact whatever frames were skipped or cut short).
stripes = send["stripes"]
per_packet = send["bytes_sent"] / max(send["packets_sent"], 1)
nominal = per_packet * send["packets_per_frame"] * stripes * 8 * fps
late = 100.0 * send["packets_late"] / max(send["packets_sent"], 1)
send_gbit = send["bytes_sent"] * 8 / 1e9
recv_gbit = recv["bytes"] * 8 / 1e9
recv_packets = sum(s["packets_received"] for s in recv["per_stripe"])
recv_nominal = recv["bytes"] / max(recv_packets, 1) * send["packets_per_frame"] * stripes * 8 * fps
drops = sum(s["kernel_drops"] for s in recv["per_stripe"])
cores = os.cpu_count() or 1
span = max(send["seconds"], 1e-9)
busy = (send_cpu + recv_cpu) / max(send_wall, recv_wall, 1e-9)
thread_busy = send["send_cpu_seconds"] / span
if recorded >= 0:
    written = f"{recv['frames_written']} ({recorded / frame_bytes:.0f} in {record}{', O_DIRECT' if direct == '1' else ''})"
else:
    written = f"{recv['frames_written']} (to /dev/null)"
# Which resource ran out, in the order that explains the rest.
out = []
if send["underruns"]:
    out.append(f"frame source: {send['underruns']} slots with no frame ready (reader too slow)")
if machine_busy > 0.9:
    out.append(f"CPU: the machine was {machine_busy:.0%} busy, send+recv {busy:.2f} of {cores} cores")
elif late > 1 and thread_busy > 0.9:
    out.append(f"sending thread: {thread_busy:.0%} of one core")
wait = recv.get("writer_wait_seconds", 0.0)
if wait > 0.05 * max(recv["seconds"], 1e-9):
    out.append(f"recording: reassembly waited {wait:.2f} s for the writer (the output is slower than the stream)")
if drops:
    out.append(f"receive socket buffers: {drops} datagrams dropped by the kernel")
behind = late > 1 or send["rate_bps"] < 0.99 * nominal
if behind and not out:
    if machine_busy > 0.8:
        out.append(f"CPU: send+recv used {busy:.2f} of {cores} cores, the machine was {machine_busy:.0%} busy")
    else:
        out.append(f"sender fell behind with CPU to spare (sending thread {thread_busy:.0%} of a core)")
if recv["frames_complete"] < frames and not out:
    out.append("receiver (frames incomplete or lost, no drops counted)")
verdict = "; ".join(out) if out else "none: on schedule, every frame whole"
print(f"\n8 stripes ({split}) of 7680x4320 uyvp 30p, packet 8800, loopback, source {source}, "
      f"--pacing {pacing}{', pinned' if pin == '1' else ''}; {platform.node()}, {cores} CPUs\n")
print("| frames asked | sent | complete | incomplete | lost | recorded | packets late | sender rate / nominal "
      "| received rate / nominal | send CPU-s/Gbit (thread) | recv CPU-s/Gbit | core memcpy GB/s | worst skew µs | kernel drops | ran out |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
busy_note = f"machine CPU {machine_busy:.0%} busy over the run, send+recv {busy:.2f} of {cores} cores"
print(f"| {frames} | {send['frames_sent']} | {recv['frames_complete']} | {recv['frames_incomplete']['count']} "
      f"| {recv['frames_lost']['count']} | {written} | {late:.2f}% (p99 {send['lateness_us']['p99']:.0f} µs) "
      f"| {send['rate_bps'] / 1e9:.2f} / {nominal / 1e9:.2f} Gbit/s ({100 * send['rate_bps'] / nominal:.1f}%) "
      f"| {recv['rate_bps'] / 1e9:.2f} / {recv_nominal / 1e9:.2f} Gbit/s ({100 * recv['rate_bps'] / max(recv_nominal, 1):.1f}%) "
      f"| {send_cpu / max(send_gbit, 1e-9):.3f} ({send['send_cpu_seconds'] / max(send_gbit, 1e-9):.3f}) "
      f"| {recv_cpu / max(recv_gbit, 1e-9):.3f} | {copy_bps / 1e9:.1f} | {recv['skew_us_max']:.0f} | {drops} | {verdict} |")
print(f"\n{busy_note}")
# The receiver's CPU against the core's copy rate, from this run.
recv_per_gbit = recv_cpu / max(recv_gbit, 1e-9)
if copy_bps > 0:
    copy_per_gbit = 1e9 / 8 / copy_bps
    print(f"\nthe receiver needs {recv_per_gbit * nominal / 1e9:.2f} cores for the nominal rate "
          f"({recv_per_gbit:.3f} CPU-s/Gbit x {nominal / 1e9:.2f} Gbit/s); one copy costs "
          f"{copy_per_gbit:.4f} CPU-s/Gbit at this core's memcpy rate ({copy_bps / 1e9:.1f} GB/s), "
          f"so the receiver spends {recv_per_gbit / copy_per_gbit:.1f} copies' worth of CPU per byte")
else:
    print("\nno memcpy rate: nagare doctor gave none")
EOF
done
