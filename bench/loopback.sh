#!/usr/bin/env bash
# Loopback benchmark of nagare against iperf3 and GStreamer (issue 4's
# targets). Prints markdown tables; takes about 8 x SECONDS + 1 minute.
# Usage: bench/loopback.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in iperf3 gst-launch-1.0 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing (apt-get install iperf3 gstreamer1.0-tools gstreamer1.0-plugins-good time)" >&2; exit 2; }
done
cargo build --release --locked >&2
exec python3 bench/loopback.py "$@"
