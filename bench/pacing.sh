#!/usr/bin/env bash
# Pacing cost of one 3.2 Gbit/s stream: nagare (precise, efficient) vs
# iperf3 (UDP at the same rate, TCP unpaced). Prints a markdown table.
# Usage: bench/pacing.sh [SECONDS]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in iperf3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing (apt-get install iperf3 time)" >&2; exit 2; }
done
cargo build --release --locked >&2
exec python3 bench/pacing.py "$@"
