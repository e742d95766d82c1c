#!/usr/bin/env bash
# ST 2110-21 pacing of nagare send (--tp n, nl, w; with and without
# --realtime), GStreamer's rtpvrawpay and FFmpeg's RTP muxer, each judged
# live by `nagare analyze` on loopback (kernel receive stamps): prints a
# markdown table of verdict, Cinst peak and VRX peak per sender.
# Not a test: numbers depend on the machine and its load.
#
#   bench/st2110.sh                       # 1080p59.94 and 2160p50, 3 s each
#   SECONDS_EACH=2 FORMATS="1920x1080@60000/1001" bench/st2110.sh
#
# All streams are 8-bit 4:2:2 (uyvy422 / UYVY), 1220-byte packets where the
# sender lets us choose. Every run is bounded in frames and seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${SECONDS_EACH:-3}
FORMATS=${FORMATS:-"1920x1080@60000/1001 3840x2160@50"}
NAGARE=${NAGARE:-target/release/nagare}
command -v python3 >/dev/null || { echo "python3 missing (parses JSON)" >&2; exit 2; }
[ -x "$NAGARE" ] || cargo build --release -j 2 >&2

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One row: start the analyser, run the sender command (with PORT in it),
# wait for the analyser, print the figures.
row() {
  local name=$1 size=$2 fps=$3 frames=$4; shift 4
  local p; p=$(port)
  "$NAGARE" analyze --listen "127.0.0.1:$p" --size "$size" --pix-fmt uyvy422 --fps "$fps" \
    --frames "$frames" --timeout 3 --json >"$tmp/a.json" 2>"$tmp/a.err" & local ap=$!
  pids+=("$ap")
  for _ in $(seq 50); do grep -q 'listening' "$tmp/a.err" 2>/dev/null && break; sleep 0.1; done
  local cmd=("${@//PORT/$p}")
  timeout $((SECONDS_EACH * 4 + 10)) "${cmd[@]}" >"$tmp/s.out" 2>"$tmp/s.err" || true
  wait "$ap" || true
  python3 - "$tmp/a.json" "$name" "$size" "$fps" <<'PY'
import json, sys
path, sender, size, fps = sys.argv[1:5]
try:
    r = json.load(open(path))
    a = r.get("analysis", r)
except Exception:
    print(f"| {size}@{fps} | {sender} | error | | | | | |")
    sys.exit()
v = a.get("verdict")
m = a.get("model") or {}
lim = m.get("limits", {})
if not v:
    print(f"| {size}@{fps} | {sender} | no verdict ({a.get('error')}) | | | | | |")
    sys.exit()
vrx = v["vrx"]
name = {"Narrow": "N", "NarrowLinear": "NL", "Wide": "W", "NotCompliant": "not compliant"}
fv = a["frame_verdicts"]
print(f"| {size}@{fps} | {sender} | {name[v['compliance']]} ({v['schedule']}) | {v['cinst_peak']} "
      f"| {vrx['peak']} / {vrx['min']} | {m.get('packets')} | CMAX {lim.get('cmax_n')}/{lim.get('cmax_nl')}/{lim.get('cmax_w')}, "
      f"VRX_FULL {lim.get('vrx_full_n')}/{lim.get('vrx_full_w')} "
      f"| {fv['n']}/{fv['nl']}/{fv['w']}/{fv['not_compliant']} of {a['frames']} |")
PY
}

echo "| format | sender | verdict | Cinst peak | VRX peak / min | Npackets | limits (N/NL/W) | frames N/NL/W/not |"
echo "|---|---|---|---:|---:|---:|---|---|"
for f in $FORMATS; do
  size=${f%@*}; fps=${f#*@}
  w=${size%x*}; h=${size#*x}
  frames=$(python3 -c "from fractions import Fraction as F; print(int(F('$fps') * $SECONDS_EACH))")
  for tp in n nl w; do
    for rt in "" "--realtime"; do
      row "nagare --tp $tp ${rt}" "$size" "$fps" "$frames" \
        "$NAGARE" send pattern:bars --to 127.0.0.1:PORT --size "$size" --pix-fmt uyvy422 \
        --fps "$fps" --packet-size 1220 --tp "$tp" --frames "$((frames + 1))" $rt
    done
  done
  if command -v gst-launch-1.0 >/dev/null; then
    gfps=$fps; [[ $gfps == */* ]] || gfps="$gfps/1"
    row "GStreamer rtpvrawpay" "$size" "$fps" "$frames" \
      gst-launch-1.0 -q videotestsrc is-live=true num-buffers=$((frames + 1)) \
      ! "video/x-raw,format=UYVY,width=$w,height=$h,framerate=$gfps" \
      ! rtpvrawpay mtu=1232 ! udpsink host=127.0.0.1 port=PORT
  fi
  if command -v ffmpeg >/dev/null; then
    row "FFmpeg RTP muxer" "$size" "$fps" "$frames" \
      ffmpeg -loglevel error -re -f lavfi -i "testsrc2=size=$size:rate=$fps" \
      -frames:v $((frames + 1)) -pix_fmt uyvy422 -c:v rawvideo -f rtp rtp://127.0.0.1:PORT
  fi
done
