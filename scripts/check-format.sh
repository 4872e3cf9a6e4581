#!/usr/bin/env bash
# Fails if any BPF C file (bpf/) differs from what clang-format-19 makes of
# it with the repository's .clang-format (`make fmt-bpf` applies it), or if
# gofmt would change a Go file git tracks (`gofmt -w FILE` applies it).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for f in bpf/*.c bpf/lib/*.h; do
	if ! clang-format-19 "$f" | cmp -s - "$f"; then
		echo "check-format: $f is not formatted; run 'make fmt-bpf'" >&2
		status=1
	fi
done
gofmt=$(command -v gofmt || echo /usr/local/go/bin/gofmt)
unformatted=$(git ls-files -z '*.go' | xargs -0 "$gofmt" -l)
if [ -n "$unformatted" ]; then
	echo "check-format: not gofmt'ed (run gofmt -w):" $unformatted >&2
	status=1
fi
[ $status = 0 ] && echo "check-format: bpf/ and the Go files are formatted"
exit $status
