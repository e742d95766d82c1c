#!/usr/bin/env bash
# nagare probe vs iperf3 -u on loopback, same rates and packet sizes, one
# run: prints a markdown table of achieved rate, loss and jitter.
# Not a test: numbers depend on the machine and its load.
#
#   bench/probe.sh                 # sizes 1400 8800, 1M up to 20G
#   SIZES="8800" DURATION=3 bench/probe.sh
#
# Every run is bounded (DURATION seconds); the ladder stops once neither
# tool reaches 90% of the set rate at two rates in a row, or at the top
# of RATES.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-2}
SIZES=${SIZES:-"1400 8800"}
RATES=${RATES:-"1M 10M 100M 500M 1G 2G 3.2G 5G 8G 12G 20G"}
NAGARE=${NAGARE:-target/release/nagare}
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 missing (parses JSON)" >&2; exit 2; }
[ -x "$NAGARE" ] || cargo build --release -j 2 >&2

tmp=$(mktemp -d)
cleanup() { kill "$np" "$ip" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

"$NAGARE" probe server --listen 127.0.0.1:0 2>"$tmp/np.err" & np=$!
for _ in $(seq 50); do grep -q 'port' "$tmp/np.err" 2>/dev/null && break; sleep 0.1; done
nport=$(grep -o 'port [0-9]*' "$tmp/np.err" | awk '{print $2}')
iport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
iperf3 -s -B 127.0.0.1 -p "$iport" >/dev/null 2>&1 & ip=$!
sleep 0.5

to_bps() { python3 -c "import sys; s=sys.argv[1]; m={'k':1e3,'M':1e6,'G':1e9}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))" "$1"; }

echo "| size B | set Mbit/s | nagare sent Mbit/s | nagare recv Mbit/s | nagare loss % | nagare jitter ms (RFC 3550) | nagare PDV p99 ms | iperf3 sent Mbit/s | iperf3 recv Mbit/s | iperf3 loss % | iperf3 jitter ms |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for size in $SIZES; do
  misses=0
  for rate in $RATES; do
    bps=$(to_bps "$rate")
    "$NAGARE" probe client "127.0.0.1:$nport" --rate "$rate" --packet-size "$size" \
      --duration "$DURATION" --json >"$tmp/n.json" 2>"$tmp/n.err" || true
    iperf3 -c 127.0.0.1 -p "$iport" -u -b "$rate" -l "$size" -t "$DURATION" --json \
      >"$tmp/i.json" 2>/dev/null || true
    row=$(python3 - "$tmp/n.json" "$tmp/i.json" "$bps" "$size" <<'PY'
import json, sys
n_path, i_path, bps, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
n, i = load(n_path), load(i_path)
cells = [size, f"{bps/1e6:.1f}"]
ok = False
if n and "sent" in n:
    cells += [f"{n['sender_achieved_bps']/1e6:.1f}", f"{n['effective_bandwidth_bps']/1e6:.1f}",
              f"{n['loss_rate']*100:.3f}", f"{n['jitter_rfc3550_ms']:.4f}", f"{n['pdv_ms']['p99']:.3f}"]
    ok |= n['effective_bandwidth_bps'] >= 0.9 * bps and n['loss_rate'] < 0.1
else:
    cells += ["error"] * 5
try:
    end = i["end"]
    sent = end.get("sum_sent", end["sum"])
    recv = end.get("sum_received", end["sum"])
    lost = end["sum"]["lost_percent"]
    rx_bps = recv["bits_per_second"] * (1 - lost / 100) if "sum_received" not in end else recv["bits_per_second"]
    cells += [f"{sent['bits_per_second']/1e6:.1f}", f"{rx_bps/1e6:.1f}", f"{lost:.3f}",
              f"{end['sum']['jitter_ms']:.4f}"]
    ok |= rx_bps >= 0.9 * bps and lost < 10
except Exception:
    cells += ["error"] * 4
print(("OK " if ok else "NO ") + "| " + " | ".join(cells) + " |")
PY
)
    echo "${row#* }"
    # Two rates in a row that neither tool reaches end the ladder (one
    # can be a hiccup of a loaded machine).
    case "$row" in NO*) misses=$((misses + 1)) ;; *) misses=0 ;; esac
    [ "$misses" -ge 2 ] && break
  done
done
