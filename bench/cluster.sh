#!/usr/bin/env bash
# Issue 10's cluster benchmark: 8 `nagare serve` nodes on 127.0.0.11-18
# (one pacing thread each) reading one shared media directory, driven by
# `nagare cluster start`, each sending one 2SI stripe of an 8K 30p 10-bit
# stream (7680x4320 uyvp, 20 Gbit/s of payload), and one
# `nagare recv --stripes 8` reassembling whole frames (no recording).
# Prints a markdown table: delivered rate (bytes received over the measured
# first-to-last packet time), frames complete/incomplete/lost, worst and
# mean stripe skew (first to last stripe of a frame handed out), and the
# nodes' late packets and underruns from `nagare cluster status`.
# Usage: bench/cluster.sh [SECONDS]   (default 5; frames = 30 x SECONDS)
# SIZE=1920x1080 FPS=25 bench/cluster.sh for a light run.
# Bounded: the receiver stops after its frames or 5 s without a packet;
# the controller is stopped with SIGTERM (halting every leg) and the nodes
# after it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
size=${SIZE:-7680x4320}
fps=${FPS:-30}
frames=$((secs * fps))
cargo build --release --locked >&2
bin=$PWD/target/release/nagare
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
w=${size%x*}
h=${size#*x}
mkdir "$dir/media"
# Two frames of noise (uyvp: 5 bytes per 2 pixels), looped.
head -c $((w * h * 5 / 2 * 2)) /dev/urandom >"$dir/media/clip.uyvp"
printf 'size = "%s"\npix_fmt = "uyvp"\nfps = "%s"\n' "$size" "$fps" >"$dir/media/clip.uyvp.toml"
port=$((20000 + RANDOM % 20000))
cat >"$dir/cluster.toml" <<EOF
name = "bench"
failover = "manual"
poll_ms = 500
dead_after_ms = 3000
[stream]
source = "clip.uyvp"
size = "$size"
pix_fmt = "uyvp"
fps = "$fps"
split = "2si"
stripes = 8
packet_size = 8800
EOF
for k in 0 1 2 3 4 5 6 7; do
  printf '[[destination]]\nto = "127.0.0.1:%d"\n' $((port + k)) >>"$dir/cluster.toml"
done
for k in 0 1 2 3 4 5 6 7; do
  ip=127.0.0.$((11 + k))
  "$bin" serve --pacers 1 --ring-frames 2 --media "$dir/media" --http "$ip:0" --rtsp "$ip:0" \
    >"$dir/serve$k.out" 2>"$dir/serve$k.err" &
  pids+=($!)
done
for k in 0 1 2 3 4 5 6 7; do
  for _ in $(seq 100); do
    grep -q "http listening on" "$dir/serve$k.err" 2>/dev/null && break
    sleep 0.1
  done
  url=$(sed -n 's/.*http listening on //p' "$dir/serve$k.err")
  printf '[[node]]\nname = "n%d"\nurl = "http://%s"\nstripes = [%d]\n' "$k" "$url" "$k" >>"$dir/cluster.toml"
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
"$bin" recv --listen "127.0.0.1:$port" --stripes 8 --split 2si --size "$size" \
  --pix-fmt uyvp --fps "$fps" --frames "$frames" --timeout 5 --json \
  >"$dir/recv.json" 2>"$dir/recv.err" &
rpid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$dir/recv.err" 2>/dev/null && break
  sleep 0.1
done
"$bin" cluster --config "$dir/cluster.toml" start --json >"$dir/start.json" 2>"$dir/start.err" &
cpid=$!
pids+=("$cpid")
wait "$rpid" || true
"$bin" cluster --config "$dir/cluster.toml" status --json >"$dir/status.json" 2>/dev/null || true
kill -TERM "$cpid" 2>/dev/null || true
wait "$cpid" 2>/dev/null || true
echo "load average before: $load" >&2
python3 - "$dir/recv.json" "$dir/status.json" "$frames" "$size" "$fps" <<'EOF'
import json, sys
recv = json.load(open(sys.argv[1]))
status = json.load(open(sys.argv[2]))
frames = int(sys.argv[3])
legs = [l for n in status["nodes"] for l in n["legs"]]
late = sum(l["late"] for l in legs)
under = sum(l["underruns"] for l in legs)
offset = max((abs(n.get("clock_offset_ns") or 0) for n in status["nodes"]), default=0)
print(f"8 serve nodes, 8 stripes (2si) of {sys.argv[4]} uyvp {sys.argv[5]}p, packet 8800, loopback")
print("| frames asked | complete | incomplete | lost | delivered | worst skew µs | mean skew µs | late packets | underruns | kernel drops | max clock offset µs |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
drops = sum(s["kernel_drops"] for s in recv["per_stripe"])
print(f"| {frames} | {recv['frames_complete']} | {recv['frames_incomplete']['count']} "
      f"| {recv['frames_lost']['count']} | {recv['rate_bps'] / 1e9:.2f} Gbit/s "
      f"| {recv['skew_us_max']:.0f} | {recv['skew_us_mean']:.0f} | {late} | {under} | {drops} | {offset / 1e3:.0f} |")
EOF
