#!/usr/bin/env bash
# Builds the cargo-fuzz targets of nagare-proto and runs each for SECONDS
# (default 60), one after another so a 2-core machine stays usable: every
# target, or only the TARGETs named.
#
#   fuzz/run.sh [SECONDS [TARGET...]]
#
# Works on the stable toolchain: RUSTC_BOOTSTRAP=1 lets stable rustc take
# the nightly-only flags cargo-fuzz passes (-Zsanitizer=address, ...).
# SANITIZER=none fuzz/run.sh skips AddressSanitizer (several times the
# speed; nagare-proto forbids unsafe code, so ASan mostly guards the
# harness).
# Inputs found go to fuzz/corpus/<target> (untracked) starting from the
# committed seeds in fuzz/seeds/<target> and the minimised corpus
# fuzz/nightly.sh keeps in fuzz/kept/<target>; crashes go to
# fuzz/artifacts/<target>/ and make the script exit non-zero at the end.
# Not meant for CI: it runs for minutes and needs cargo-fuzz installed.
set -uo pipefail

secs=${1:-60}
shift $(($# > 0 ? 1 : 0))
sanitizer=${SANITIZER:-address}
cd "$(dirname "$0")/.." || exit 1
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 1
fi

cargo fuzz build --sanitizer "$sanitizer" || exit 1

mkdir -p fuzz/artifacts/logs
failed=()
summary=()
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    dirs=("fuzz/corpus/$t")
    [ -d "fuzz/kept/$t" ] && dirs+=("fuzz/kept/$t")
    [ -d "fuzz/seeds/$t" ] && dirs+=("fuzz/seeds/$t")
    log="fuzz/artifacts/logs/$t.log"
    echo "== $t for ${secs}s (log: $log)"
    if cargo fuzz run --sanitizer "$sanitizer" "$t" "${dirs[@]}" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$t")
        tail -n 40 "$log"
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    # libFuzzer's last status line carries the edge coverage.
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    summary+=("$(printf '| `%s` | %s | %s | %s | %s |' "$t" "$status" "${rate:-?}" "${runs:-?}" "${cov:-?}")")
done

echo "| target | status | execs/s | execs in ${secs} s | coverage (edges) |"
echo "|---|---|---:|---:|---:|"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes in: ${failed[*]} (inputs under fuzz/artifacts/<target>/)" >&2
    exit 1
fi
