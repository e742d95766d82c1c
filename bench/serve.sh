#!/usr/bin/env bash
# How many concurrent 6 Mbit/s MPEG-TS flows one server carries on this
# machine (issue 9): nagare serve (push streams through its API, and RTSP
# clients) against GStreamer's RTSP server, with seed 001's prediction.
# A flow counts as carried while every flow loses nothing and its
# inter-packet jitter p99 stays at or below 250 µs (seed 002's figure).
# Prints a table; a benchmark, not a test. Bounded: each step runs
# WARMUP + DURATION seconds, the ramp stops at the first lossy step.
#
#   bench/serve.sh                 # RAMP=50:500:50 DURATION=3
#   RAMP=10:100:10 DURATION=2 bench/serve.sh
#   SERVE_FLAGS=--realtime LOADTEST_FLAGS=--realtime bench/serve.sh   # as root, on a busy host
set -euo pipefail
cd "$(dirname "$0")/.."
RAMP=${RAMP:-50:500:50}
GST_RAMP=${GST_RAMP:-$RAMP}
DURATION=${DURATION:-3}
NAGARE=${NAGARE:-target/release/nagare}
[ -x "$NAGARE" ] || cargo build --release --quiet
# GStreamer's side needs Debian's Python bindings: say so before the ramps
# run, not after them.
if ! /usr/bin/python3 -c 'import gi; gi.require_version("Gst", "1.0"); gi.require_version("GstRtspServer", "1.0")' 2>/dev/null; then
  echo "bench/serve.sh: GStreamer's RTSP server (the comparison) needs Debian's python3-gi, gir1.2-gstreamer-1.0 and gir1.2-gst-rtsp-server-1.0: apt-get install python3-gi gir1.2-gstreamer-1.0 gir1.2-gst-rtsp-server-1.0" >&2
  exit 2
fi

tmp=$(mktemp -d)
pids=()
# On a failure, say why before the logs go: under set -e a failing step
# would otherwise end the script with no output at all.
cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "bench/serve.sh: failed (exit $status); the logs:" >&2
    tail -n 20 "$tmp"/*.log >&2 2>/dev/null || true
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# 40 s of MPEG-2 video in a 6 Mbit/s constant-rate multiplex: longer than
# starting a few hundred RTSP clients takes, since GStreamer's server does
# not loop (nagare's RTSP clients ask for ?loop=1, push streams loop).
ffmpeg -loglevel error -f lavfi -i testsrc=size=640x360:rate=25 -t 40 \
    -c:v mpeg2video -b:v 4M -f mpegts -muxrate 6000000 -y "$tmp/clip.ts"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RTSP=$(port); HTTP=$(port); GST=$(port)
"$NAGARE" serve --media "$tmp" --rtsp 127.0.0.1:$RTSP --http 127.0.0.1:$HTTP \
    --max-load 1.0 ${SERVE_FLAGS:-} 2>"$tmp/serve.log" &
pids+=($!); SERVE_PID=$!
# Debian's python3-gi and gir1.2-gst-rtsp-server-1.0, not a pyenv python.
/usr/bin/python3 bench/gst_rtsp_server.py "$tmp/clip.ts" "$GST" >"$tmp/gst.log" 2>&1 &
pids+=($!); GST_PID=$!
for _ in $(seq 100); do
  grep -q "http listening" "$tmp/serve.log" && grep -q listening "$tmp/gst.log" && break
  sleep 0.1
done

lt() { "$NAGARE" loadtest "$@" --duration "$DURATION" ${LOADTEST_FLAGS:-} --json 2>>"$tmp/loadtest.log"; }
lt "http://127.0.0.1:$HTTP" --source clip.ts --ramp "$RAMP" >"$tmp/push.json"
lt "rtsp://127.0.0.1:$RTSP/clip.ts?loop=1" --metrics "http://127.0.0.1:$HTTP" --ramp "$RAMP" >"$tmp/rtsp.json"
lt "rtsp://127.0.0.1:$GST/clip" --pid "$GST_PID" --ramp "$GST_RAMP" >"$tmp/gst.json"
cat "$tmp/loadtest.log" >&2

python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
rows = [("nagare serve, API push", "push.json"), ("nagare serve, RTSP/UDP", "rtsp.json"),
        ("GStreamer rtsp-server, RTSP/UDP", "gst.json")]
print(f"{'server':34} {'clean flows':>11} {'<=1% drop':>9} {'p99 jitter at clean (µs)':>25} {'CPU/flow':>9} {'max tried':>9}")
for name, f in rows:
    r = json.load(open(f"{tmp}/{f}"))
    steps = r["steps"]
    clean = r["clean_ceiling"]
    at = next((s for s in steps if s["streams"] == clean), None)
    last = steps[-1] if steps else None
    pick = at or last
    cpu = pick and pick.get("cpu_per_stream_pct")
    print(f"{name:34} {clean or 0:>11} {r['ceiling'] or 0:>9} "
          f"{(at['jitter_p99_us_worst'] if at else float('nan')):>25.0f} "
          f"{(f'{cpu:.2f}%' if cpu is not None else '-'):>9} {last['streams'] if last else 0:>9}")
print(f"{'seed 001 prediction (CPU per stream)':34} {37.5:>11}")
PY
