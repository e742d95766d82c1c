#!/usr/bin/env bash
# Issue 10's stripe benchmark: one 8K 30p 10-bit stream (7680x4320 uyvp,
# 20 Gbit/s of payload) split by 2SI into 8 stripes of 3840x1080, sent by
# one `nagare send --stripes 8` process over loopback to one
# `nagare recv --stripes 8` that reassembles whole frames (no recording).
# Prints a markdown table: delivered rate (bytes received over the measured
# first-to-last packet time), frames complete/incomplete/lost, worst and
# mean stripe skew (from the first stripe of a frame handed out to the
# last), sender lateness and kernel drops.
# Usage: bench/stripes.sh [SECONDS]   (default 5; frames = 30 x SECONDS)
# SPLIT=lines bench/stripes.sh compares with 8 horizontal bands (sent
# zero-copy from the frame as read; 2SI stripes are gathered on the
# reader thread and scattered again by the receiver).
# Bounded: the sender stops after its frames, the receiver after its
# frames or 5 s without a packet.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
split=${SPLIT:-2si}
frames=$((secs * 30))
cargo build --release --locked >&2
bin=target/release/nagare
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Two frames of noise, looped (stripes of noise leave no pattern to hide
# a misplaced pair behind). 2 x 82944000 bytes.
head -c $((7680 * 4320 * 5 / 2 * 2)) /dev/urandom >"$dir/in.uyvp"
port=$((20000 + RANDOM % 20000))
load=$(cut -d' ' -f1-3 /proc/loadavg)
"$bin" recv --listen "127.0.0.1:$port" --stripes 8 --split "$split" --size 7680x4320 \
  --pix-fmt uyvp --fps 30 --frames "$frames" --timeout 5 --json \
  >"$dir/recv.json" 2>"$dir/recv.err" &
rpid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$dir/recv.err" 2>/dev/null && break
  sleep 0.1
done
"$bin" send "$dir/in.uyvp" --loop --frames "$frames" --to "127.0.0.1:$port" \
  --size 7680x4320 --pix-fmt uyvp --fps 30 --split "$split" --stripes 8 \
  --packet-size 8800 --json >"$dir/send.json" 2>"$dir/send.err" || true
wait "$rpid" || true
echo "load average before: $load" >&2
python3 - "$dir/send.json" "$dir/recv.json" "$frames" "$split" <<'EOF'
import json, sys
send = json.load(open(sys.argv[1]))
recv = json.load(open(sys.argv[2]))
frames = int(sys.argv[3])
print(f"8 stripes ({sys.argv[4]}) of 7680x4320 uyvp 30p, packet 8800, loopback")
drops = sum(s["kernel_drops"] for s in recv["per_stripe"])
print("| frames asked | sent | complete | incomplete | lost | delivered | sender rate | worst skew µs | mean skew µs | late packets | underruns | kernel drops | recv threads |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| {frames} | {send['frames_sent']} | {recv['frames_complete']} | {recv['frames_incomplete']['count']} "
      f"| {recv['frames_lost']['count']} | {recv['rate_bps'] / 1e9:.2f} Gbit/s | {send['rate_bps'] / 1e9:.2f} Gbit/s "
      f"| {recv['skew_us_max']:.0f} | {recv['skew_us_mean']:.0f} | {send['packets_late']} | {send['underruns']} "
      f"| {drops} | {recv['threads']} |")
EOF
