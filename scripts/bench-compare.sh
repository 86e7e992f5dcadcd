#!/usr/bin/env bash
# Runs the controller and provider benchmarks of an earlier commit and of the work tree in one
# run, alternately, and prints each figure with the ratio after/before (a reshaping
# must not make fleet slower). The earlier commit is built in a git worktree (kept between runs) that
# shares this tree's target directory, so only fleet itself is compiled twice.
#
#   scripts/bench-compare.sh [REV] [ROUNDS]
#
# REV defaults to be759e0 (the last commit before the reshaping it measures), ROUNDS to 2. Each round runs both
# benchmarks at REV, then here; a figure is the median over the rounds.
set -euo pipefail

rev=${1:-be759e0}
rounds=${2:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$here/target}

short=$(git -C "$here" rev-parse --short "$rev^{commit}" 2>/dev/null) || {
    echo "bench-compare: $rev is not a commit of this repository" >&2
    exit 2
}
# The earlier commit's worktree stays between runs, so its build is reused; remove it with
# `git worktree remove <path>`.
before=${TMPDIR:-/tmp}/fleet-bench-before-$short
out=$(mktemp -d "${TMPDIR:-/tmp}/fleet-bench-out.XXXXXX")
if [ ! -e "$before/Cargo.toml" ]; then
    git -C "$here" worktree add --detach "$before" "$short" >/dev/null 2>&1 || {
        echo "bench-compare: cannot check out $short into $before" >&2
        exit 2
    }
fi

for side in before after; do
    dir=$here
    [ "$side" = before ] && dir=$before
    echo "building the benchmarks ($side: $(git -C "$dir" rev-parse --short HEAD))" >&2
    (cd "$dir" && cargo bench --no-run --bench controller --bench provider -q 2>&1 | tail -3 >&2)
done

for round in $(seq "$rounds"); do
    for side in before after; do
        dir=$here
        [ "$side" = before ] && dir=$before
        for bench in controller provider; do
            echo "round $round: $bench, $side" >&2
            (cd "$dir" && cargo bench -q --bench "$bench" 2>/dev/null) >"$out/$side-$bench-$round.txt"
        done
    done
done

# The figure a line holds after `key` (a number, in ms), per round; then the median.
figure() { # side bench pattern field-regex
    local side=$1 bench=$2 pattern=$3 field=$4
    for round in $(seq "$rounds"); do
        grep -E "$pattern" "$out/$side-$bench-$round.txt" | head -1 |
            sed -nE "s/.*$field *([0-9.]+) ms.*/\1/p"
    done | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

printf '\n%-44s %12s %12s %8s\n' "figure (median over $rounds rounds)" "before ms" "after ms" "ratio"
row() { # label bench pattern field
    local b a
    b=$(figure before "$2" "$3" "$4")
    a=$(figure after "$2" "$3" "$4")
    awk -v l="$1" -v b="$b" -v a="$a" 'BEGIN {
        r = (b + 0 > 0) ? sprintf("%.2fx", a / b) : "?"
        printf "%-44s %12s %12s %8s\n", l, b, a, r
    }'
}
row "controller pass, 10 000 slots (median)" controller '^controller pass' 'median'
row "controller pass, 10 000 slots (worst)" controller '^controller pass' 'worst'
row "first UP beat -> ready move (median)" controller '^first UP beat' 'median'
row "provider NodeGroupTargetSize p99" provider 'NodeGroupTargetSize' 'p99'
row "provider NodeGroupNodes p99" provider 'NodeGroupNodes' 'p99'
row "provider gRPC floor (Refresh) p99" provider 'gRPC floor' 'p99'
echo
echo "raw outputs: $out"
