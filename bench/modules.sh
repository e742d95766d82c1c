#!/usr/bin/env bash
# The module trees of the binary (src/) and of the sans-IO core
# (crates/proto/src), each file with its line count, and the two totals
# side by side: the before/after picture issue 21's closing note asks
# for. Lines are counted as `wc -l` counts them; "tests" are the files
# that only hold tests (tests.rs, *_tests.rs, tests/), the rest of a file
# counts as code even where it ends in a #[cfg(test)] module. Not a
# benchmark: it reads files and runs nothing.
#
#   bench/modules.sh              # both trees and the totals
#   bench/modules.sh --summary    # the totals only
set -euo pipefail
cd "$(dirname "$0")/.."

summary=false
[ "${1:-}" = --summary ] && summary=true

# One tree: directories first as headings, files indented under them.
tree() {
    local root=$1
    find "$root" -name '*.rs' | LC_ALL=C sort | while read -r f; do
        rel=${f#"$root"/}
        depth=$(awk -F/ '{print NF-1}' <<<"$rel")
        dir=$(dirname "$rel")
        if [ "$dir" != "${last_dir:-.}" ] && [ "$dir" != . ]; then
            # Print each directory level not printed yet.
            IFS=/ read -ra parts <<<"$dir"
            path=
            for i in "${!parts[@]}"; do
                path=${path:+$path/}${parts[$i]}
                case "/${last_dir:-}/" in
                    "/$path/"*) ;;
                    *) printf '%*s%s/\n' $((2 * i + 2)) '' "${parts[$i]}" ;;
                esac
            done
        fi
        last_dir=$dir
        printf '%*s%-*s %6d\n' $((2 * depth + 2)) '' $((44 - 2 * depth)) "$(basename "$rel")" \
            "$(wc -l <"$f")"
    done
}

# Lines of code and of test-only files under a root.
count() {
    find "$1" -name '*.rs' -print0 | xargs -0 cat | wc -l
}
count_tests() {
    { find "$1" \( -name 'tests.rs' -o -name '*_tests.rs' -o -path '*/tests/*' \) -name '*.rs' \
        -print0 | xargs -0 -r cat; } | wc -l
}
files() {
    find "$1" -name '*.rs' | wc -l
}

if ! $summary; then
    for root in src crates/proto/src; do
        echo "$root/ ($(files "$root") files, $(count "$root") lines)"
        tree "$root"
        echo
    done
fi

src=$(count src)
proto=$(count crates/proto/src)
proto_tests=$(count_tests crates/proto/src)
sims=$(count crates/proto/tests)
printf '%-28s %7s %7s\n' '' files lines
printf '%-28s %7d %7d\n' 'src/ (drivers)' "$(files src)" "$src"
printf '%-28s %7d %7d\n' 'crates/proto/src (core)' "$(files crates/proto/src)" "$proto"
printf '%-28s %7s %7d\n' '  of which test-only files' '' "$proto_tests"
printf '%-28s %7d %7d\n' 'crates/proto/tests (sims)' "$(files crates/proto/tests)" "$sims"
awk -v s="$src" -v p="$proto" 'BEGIN { printf "proto holds %.0f%% of the lines of src/ + proto/src\n", 100 * p / (s + p) }'
