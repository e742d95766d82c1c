#!/usr/bin/env bash
# Benchmark of `nagare tree` (seed 004, SOLAR-CATS), printed as markdown.
#
# 1. Screen codec on a 1440x900x24 Xvfb desktop with scripted activity
#    (a window moving, text scrolling, text being typed, a video region):
#    fps, CPU and bandwidth of the source, next to seed 004's best
#    configuration (LZ-Native+VNC), raw frames and JPEG (cjpeg -quality 75).
# 2. A tree of PEERS peer processes over loopback: end-to-end latency by
#    depth (so per hop), frames delivered to every peer, frames lost and
#    recovery time after killing the inner node in slot 1.
# 3. CPU cost per peer of an incompressible stream (noise, every link
#    Noise-encrypted): CPU seconds per second of stream and per Gbit
#    received plus relayed, for the source and each of CPU_PEERS peers
#    (default 6), from each process's own user+system time (getrusage:
#    the utime+stime of /proc/<pid>/stat) in its --report.
#
# Needs: Xvfb, xterm, xdotool, cjpeg (Debian: xvfb xterm xdotool
# libjpeg-turbo-progs), python3. Not a test: nothing here passes or fails.
# Usage: [NAGARE=binary] bench/tree.sh [--cpu-only] [PEERS] [SECONDS]
#   --cpu-only: part 3 alone (needs only python3), SECONDS of stream.
set -euo pipefail

CPU_ONLY=0
if [ "${1:-}" = "--cpu-only" ]; then CPU_ONLY=1; shift; fi
PEERS=${1:-100}
SECS=${2:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# NAGARE=path/to/nagare skips the release build (a smoke run on a busy
# machine); numbers for the record come from the release build.
if [ -z "${NAGARE:-}" ]; then
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
    NAGARE="$ROOT/target/release/nagare"
fi
WORK=$(mktemp -d /tmp/nagare-tree-bench.XXXXXX)
KEY=00112233445566778899aabbccddeeff
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

addr_of() { # wait for a source's "listening ADDR" line
    for _ in $(seq 100); do
        a=$(sed -n 's/^listening //p' "$1" 2>/dev/null | head -1)
        [ -n "$a" ] && { echo "$a"; return; }
        sleep 0.05
    done
    echo "source did not start: $(cat "$1")" >&2; exit 1
}

cpu_section() { # part 3: CPU per peer over encrypted links
    local peers=${CPU_PEERS:-6} fps=30 w=640 h=360
    local frames=$(( fps * SECS ))
    # Noise does not compress: the tree carries the raw rate (166 Mbit/s).
    python3 -c "import os, sys; sys.stdout.buffer.write(os.urandom($w * $h * 3 * $frames))" \
        > "$WORK/noise.rgb"
    "$NAGARE" tree source "$WORK/noise.rgb" --size ${w}x${h} --fps $fps --key $KEY \
        --listen 127.0.0.1:0 --wait-peers "$peers" --report "$WORK/cpu-src.json" \
        > "$WORK/cpu-src.out" 2>/dev/null &
    local src=$! a pids=()
    PIDS+=($src)
    a=$(addr_of "$WORK/cpu-src.out")
    for i in $(seq 1 "$peers"); do
        "$NAGARE" tree join "$a" --key $KEY --listen 127.0.0.1:0 --timeout 60 \
            --report "$WORK/cpu$i.json" > "$WORK/cpu$i.out" 2>/dev/null &
        pids+=($!)
        PIDS+=($!)
        # One at a time, so peer i sits in slot i.
        for _ in $(seq 200); do grep -q '^placed' "$WORK/cpu$i.out" 2>/dev/null && break; sleep 0.02; done
    done
    wait "$src" || true
    for p in "${pids[@]}"; do wait "$p" || true; done
    rm -f "$WORK/noise.rgb"
    python3 - "$WORK" "$peers" <<'EOF'
import json, os, sys
work, peers = sys.argv[1], int(sys.argv[2])
load = lambda f: json.load(open(os.path.join(work, f)))
src = load("cpu-src.json")
reps = {}
for i in range(1, peers + 1):
    try:
        reps[i] = load(f"cpu{i}.json")
    except Exception:
        pass
secs = src["seconds"]
slots = {r["slot"] for r in reps.values()}
kids = lambda slot: sum(1 for c in (2 * slot + 1, 2 * slot + 2) if c in slots)
print(f"### CPU per peer, {src['width']}x{src['height']} noise at {src['fps']:.1f} fps over "
      f"encrypted links (Noise NNpsk0 ChaChaPoly), {peers} peers, {secs:.1f} s\n")
print("| process | slot | depth | children | Mbit/s in | CPU-s per s of stream | CPU-s per Gbit in+out |")
print("|---|---:|---:|---:|---:|---:|---:|")
sent_gbit = src["bytes"] * 8 * kids(0) / 1e9
print(f"| source (capture+encode+seal) | 0 | 0 | {kids(0)} | - | {src['cpu_seconds'] / secs:.3f} | "
      f"{src['cpu_seconds'] / max(sent_gbit, 1e-9):.2f} |")
for i, r in sorted(reps.items(), key=lambda x: x[1]["slot"]):
    k = kids(r["slot"])
    gbit = r["bytes_received"] * 8 * (1 + k) / 1e9
    print(f"| peer {i} (open+decode+seal) | {r['slot']} | {r['depth']} | {k} | "
          f"{r['bytes_received'] * 8 / secs / 1e6:.1f} | {r['cpu_seconds'] / secs:.3f} | "
          f"{r['cpu_seconds'] / max(gbit, 1e-9):.2f} |")
missing = peers - len(reps)
if missing:
    print(f"\n{missing} peer(s) wrote no report.")
print("\nCPU is each process's own user+system time over its whole run (joining and waiting included);"
      " the source's also covers reading the file and encoding.")
EOF
}

if [ "$CPU_ONLY" = 1 ]; then
    cpu_section
    exit 0
fi

for tool in Xvfb xterm xdotool cjpeg python3; do
    command -v "$tool" >/dev/null || { echo "bench/tree.sh needs $tool" >&2; exit 1; }
done

# --- desktop under Xvfb ----------------------------------------------------
exec 3> "$WORK/display"
Xvfb -displayfd 3 -nolisten tcp -screen 0 1440x900x24 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/display" ] && break; sleep 0.05; done
export DISPLAY=":$(cat "$WORK/display")"

# A video region: a 480x270 pattern shown by a tree peer's window.
"$NAGARE" tree source pattern:bars --size 480x270 --fps 25 --listen 127.0.0.1:0 \
    --key $KEY > "$WORK/video.out" 2>/dev/null &
PIDS+=($!)
VADDR=$(addr_of "$WORK/video.out")
"$NAGARE" tree join "$VADDR" --key $KEY --view --listen 127.0.0.1:0 --timeout 600 \
    >/dev/null 2>&1 &
PIDS+=($!)
# Scrolling text and typing.
xterm -geometry 110x35+500+40 -T scroll -e sh -c \
    'while :; do ls -l /usr/lib /usr/share/doc; done' 2>/dev/null &
PIDS+=($!)
xterm -geometry 80x18+60+480 -T typing -e sh -c \
    'while :; do for w in the quick brown fox jumps over the lazy dog; do printf "%s " $w; sleep 0.15; done; echo; done' \
    2>/dev/null &
PIDS+=($!)
sleep 1
# Window moves: the typing window wanders around.
(
    W=$(xdotool search --name typing | head -1)
    i=0
    while :; do
        i=$(( (i + 1) % 20 ))
        xdotool windowmove "$W" $((60 + i * 30)) $((480 - i * 10)) 2>/dev/null || true
        sleep 0.25
    done
) &
PIDS+=($!)
sleep 1

codec_run() { # fps -> JSON report of the source
    local fps=$1 frames=$(( $1 * SECS ))
    "$NAGARE" tree source --capture "x11:$DISPLAY" --fps "$fps" --frames "$frames" \
        --listen 127.0.0.1:0 --key $KEY --wait-peers 1 --report "$WORK/codec$fps.json" \
        > "$WORK/codec$fps.out" 2>/dev/null &
    local src=$!
    local a; a=$(addr_of "$WORK/codec$fps.out")
    "$NAGARE" tree join "$a" --key $KEY --listen 127.0.0.1:0 >/dev/null 2>&1
    wait $src
}
codec_run 12
codec_run 60

# JPEG reference: 8 frames of the same desktop through cjpeg.
"$NAGARE" tree source --capture "x11:$DISPLAY" --fps 4 --frames 8 --listen 127.0.0.1:0 \
    --key $KEY --wait-peers 1 > "$WORK/jpeg.out" 2>/dev/null &
SRC=$!
JADDR=$(addr_of "$WORK/jpeg.out")
"$NAGARE" tree join "$JADDR" --key $KEY --listen 127.0.0.1:0 --output "$WORK/frames.rgb" \
    >/dev/null 2>&1
wait $SRC
python3 - "$WORK" <<'EOF'
import os, subprocess, sys, time, json
work = sys.argv[1]
w, h = 1440, 900
n = w * h * 3
data = open(os.path.join(work, "frames.rgb"), "rb").read()
sizes, secs = [], 0.0
for i in range(len(data) // n):
    ppm = b"P6\n%d %d\n255\n" % (w, h) + data[i * n:(i + 1) * n]
    t = time.process_time(); t0 = time.time()
    out = subprocess.run(["cjpeg", "-quality", "75"], input=ppm, capture_output=True).stdout
    secs += time.time() - t0
    sizes.append(len(out))
json.dump({"bytes": sum(sizes) / len(sizes), "secs": secs / len(sizes)},
          open(os.path.join(work, "jpeg.json"), "w"))
EOF
for p in "${PIDS[@]:1}"; do kill "$p" 2>/dev/null || true; done

# --- a tree of $PEERS peers over loopback --------------------------------------
TFPS=10
TFRAMES=$(( TFPS * 25 ))
"$NAGARE" tree source pattern:bars --size 640x360 --fps $TFPS --frames $TFRAMES \
    --listen 127.0.0.1:0 --key $KEY --wait-peers "$PEERS" --report "$WORK/tree-src.json" \
    > "$WORK/tree-src.out" 2>/dev/null &
TSRC=$!
TADDR=$(addr_of "$WORK/tree-src.out")
declare -A PEERPID
for i in $(seq 1 "$PEERS"); do
    "$NAGARE" tree join "$TADDR" --key $KEY --listen 127.0.0.1:0 --timeout 60 \
        --report "$WORK/peer$i.json" > "$WORK/peer$i.out" 2>/dev/null &
    PEERPID[$i]=$!
    sleep 0.02
done
# Kill the peer in slot 1 (root of half the tree) 10 s into the stream.
for _ in $(seq 600); do [ "$(grep -l 'slot 1 depth' "$WORK"/peer*.out 2>/dev/null | head -1)" ] && break; sleep 0.05; done
VICTIM=$(grep -l '^placed peer [0-9]* slot 1 depth' "$WORK"/peer*.out | head -1 | sed 's/.*peer\([0-9]*\)\.out/\1/')
for _ in $(seq 600); do
    [ "$(wc -l < "$WORK/tree-src.out")" -ge $((3 + 2 * PEERS)) ] && break; sleep 0.05
done
sleep 10
kill -9 "${PEERPID[$VICTIM]}"
wait $TSRC || true
for i in $(seq 1 "$PEERS"); do wait "${PEERPID[$i]}" 2>/dev/null || true; done

python3 - "$WORK" "$PEERS" "$VICTIM" "$TFRAMES" "$SECS" <<'EOF'
import json, os, sys, statistics as st
work, peers, victim, frames, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
load = lambda f: json.load(open(os.path.join(work, f)))
c12, c60, jp = load("codec12.json"), load("codec60.json"), load("jpeg.json")
raw_mbit = 1440 * 900 * 24 * 11.6 / 1e6

print("### Screen codec, 1440x900x24 Xvfb desktop with scripted activity\n")
print("| method | fps | CPU (source, one core) | bandwidth |")
print("|---|---:|---:|---:|")
print("| seed 004 LZ-Native+VNC (Java, 2010 PC) | 11.6 | 42% | 10 Mbit/s |")
for name, r in (("nagare tree, --fps 12", c12), ("nagare tree, --fps 60 (as fast as it goes)", c60)):
    print(f"| {name} | {r['fps']:.1f} | {100 * r['cpu_seconds'] / r['seconds']:.0f}% | {r['mbit_per_s']:.2f} Mbit/s |")
print(f"| raw RGB24 at 11.6 fps | 11.6 | - | {raw_mbit:.0f} Mbit/s |")
jfps = 1 / jp["secs"]
print(f"| JPEG q75 (cjpeg) at 11.6 fps | {min(11.6, jfps):.1f} (max {jfps:.0f}) | {100 * 11.6 * jp['secs']:.0f}% | {jp['bytes'] * 8 * 11.6 / 1e6:.1f} Mbit/s |")
print(f"\nnagare at --fps 12: {c12['raw_bytes'] / max(1, c12['bytes']):.0f}:1 against raw, "
      f"capture {c12['capture_ms_mean']:.1f} ms + encode {c12['encode_ms_mean']:.1f} ms a frame, "
      f"{c12['key_frames']} key frames, {c12['tiles'] / max(1, c12['frames']):.0f} of 345 tiles changed a frame on average.\n")

reps = {}
for i in range(1, peers + 1):
    try:
        reps[i] = load(f"peer{i}.json")
    except Exception:
        reps[i] = None
alive = {i: r for i, r in reps.items() if str(i) != victim}
print(f"### Tree of {peers} peer processes on loopback (640x360 pattern, 10 fps, {frames} frames; peer in slot 1 killed after ~10 s)\n")
by_depth = {}
for r in alive.values():
    if r and r["latency_us"]["count"]:
        by_depth.setdefault(r["depth"], []).append(r["latency_us"]["p50"] / 1000)
print("| depth | peers | end-to-end latency p50 (median over peers) | worst peer p50 |")
print("|---:|---:|---:|---:|")
prev = None
for d in sorted(by_depth):
    v = by_depth[d]
    print(f"| {d} | {len(v)} | {st.median(v):.2f} ms | {max(v):.2f} ms |")
ds = sorted(by_depth)
if len(ds) > 1:
    hop = (st.median(by_depth[ds[-1]]) - st.median(by_depth[ds[0]])) / (ds[-1] - ds[0])
    print(f"\nPer hop: {hop:.2f} ms (slope of the median from depth {ds[0]} to {ds[-1]}).")
missing = [i for i, r in alive.items() if not r]
complete = [i for i, r in alive.items() if r and r["ended"] and r["last"] == frames - 1]
lost = sum(r["lost"] for r in alive.values() if r)
rec = [x for r in alive.values() if r for x in r["recoveries_ms"]]
print(f"\nSurvivors that reached the last frame: {len(complete)} of {len(alive)}"
      f"{' (no report: ' + str(missing) + ')' if missing else ''}; "
      f"frames lost (summed over peers): {lost}; "
      f"peers that re-attached: {sum(1 for r in alive.values() if r and r['reattaches'])}; "
      f"recovery (parent lost -> next whole frame): "
      + (f"median {st.median(rec):.0f} ms, max {max(rec):.0f} ms" if rec else "none measured"))
EOF

cpu_section
