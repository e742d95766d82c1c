#!/usr/bin/env bash
# Long fuzzing, nightly style (not CI: it runs for hours): every target,
# or the TARGETs named, for SECONDS each (default 600) under
# AddressSanitizer via fuzz/run.sh, then the corpus each run grew is
# merged with the one kept in the repository and minimised
# (libFuzzer -merge=1: the smallest set of inputs with the same coverage)
# into fuzz/kept/<target>, which is committed, so the next run (and
# fuzz/run.sh) starts from everything found so far.
#
#   fuzz/nightly.sh [SECONDS [TARGET...]]
#
# Commit fuzz/kept/ afterwards. A crash makes the script exit non-zero;
# its input is under fuzz/artifacts/<target>/ and gets a regression test
# next to the fix (see fuzz/README.md).
set -uo pipefail

secs=${1:-600}
shift $(($# > 0 ? 1 : 0))
sanitizer=${SANITIZER:-address}
cd "$(dirname "$0")/.." || exit 1
export RUSTC_BOOTSTRAP=1

targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)

fuzz/run.sh "$secs" "${targets[@]}"
status=$?

for t in "${targets[@]}"; do
    [ -d "fuzz/corpus/$t" ] || continue
    fresh="fuzz/kept.new/$t"
    rm -rf "$fresh"
    mkdir -p "$fresh"
    dirs=("fuzz/corpus/$t")
    [ -d "fuzz/kept/$t" ] && dirs+=("fuzz/kept/$t")
    [ -d "fuzz/seeds/$t" ] && dirs+=("fuzz/seeds/$t")
    if cargo fuzz run --sanitizer "$sanitizer" "$t" "$fresh" "${dirs[@]}" -- \
        -merge=1 -rss_limit_mb=2048 >"fuzz/artifacts/logs/$t.merge.log" 2>&1; then
        rm -rf "fuzz/kept/$t"
        mkdir -p fuzz/kept
        mv "$fresh" "fuzz/kept/$t"
        echo "kept $(find "fuzz/kept/$t" -type f | wc -l) inputs ($(du -sh "fuzz/kept/$t" | cut -f1)) for $t"
    else
        echo "merging the corpus of $t failed; see fuzz/artifacts/logs/$t.merge.log" >&2
        status=1
    fi
done
rm -rf fuzz/kept.new
exit $status
