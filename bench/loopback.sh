#!/usr/bin/env bash
# Loopback benchmark of nagare against iperf3, GStreamer and FFmpeg (issues 4
# and 14). Prints markdown tables; takes about 20 x SECONDS + 1 minute.
# Usage: bench/loopback.sh [SECONDS]   (default 60)
#        ONLY=whole bench/loopback.sh [SECONDS]   (the whole-8K table only)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in iperf3 gst-launch-1.0 ffmpeg stdbuf taskset /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing (apt-get install iperf3 gstreamer1.0-tools gstreamer1.0-plugins-good ffmpeg time)" >&2; exit 2; }
done
cargo build --release --locked >&2
exec python3 bench/loopback.py "$@"
