#!/usr/bin/env bash
# Regenerates the bpf2go output in a scratch copy of the tree and fails if
# it differs from what is committed: the committed objects must be exactly
# what `make generate` builds with Debian's clang-19.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$top" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -xf - -C "$tmp"
(cd "$tmp" && go generate ./internal/bpf/... ./bench/gen)
status=0
for f in $(cd "$top" && git ls-files -co --exclude-standard 'internal/bpf/*_bpfel.*' 'bench/gen/*_bpfel.*'); do
	if ! cmp -s "$top/$f" "$tmp/$f"; then
		echo "check-generate: $f differs from a fresh 'make generate'; run it and commit" >&2
		status=1
	fi
done
[ $status = 0 ] && echo "check-generate: bpf2go output is up to date"
exit $status
