#!/usr/bin/env bash
# Builds the `fleet` binary of an earlier commit (the anchor a benchmark compares this build
# with) in a git worktree that shares this tree's target directory, and prints its path.
#
#   scripts/bench-anchor.sh [REV]
#
# REV defaults to 0e2d719, the last commit before the work on memory and the page at 100 000 slots. The
# worktree stays between runs, so its build is reused; `git worktree remove PATH` removes it.
set -euo pipefail

rev=${1:-0e2d719}
here=$(cd "$(dirname "$0")/.." && pwd)
short=$(git -C "$here" rev-parse --short "$rev^{commit}" 2>/dev/null) || {
    echo "bench-anchor: $rev is not a commit of this repository" >&2
    exit 2
}
tree=${TMPDIR:-/tmp}/fleet-anchor-$short
if [ ! -e "$tree/Cargo.toml" ]; then
    git -C "$here" worktree add --detach "$tree" "$short" >/dev/null 2>&1 || {
        echo "bench-anchor: cannot check out $short into $tree" >&2
        exit 2
    }
fi
# A target directory of the anchor's own: sharing this tree's would make each build undo the
# other's fleet, and every benchmark after it rebuild.
target=$here/target/anchor-$short
echo "bench-anchor: building fleet at $short into $target" >&2
(cd "$tree" && CARGO_TARGET_DIR=$target cargo build --release -q -p fleet --bin fleet >&2)
echo "$target/release/fleet"
