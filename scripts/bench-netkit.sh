#!/usr/bin/env bash
# The netkit benchmark (docs/benchmarks.md, "netkit against veth+tc"): tc mode on
# veth endpoints against netkit endpoints, interleaved in one run, inside the
# kernel matrix's 6.12 guest (the host kernel has no netkit). QEMU runs in
# software emulation: absolute figures mean little, the same-run ratio is
# the result.
#
#   DURATION=5s REPS=3 scripts/bench-netkit.sh   # writes bench/results/netkit-DATE.txt
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
mkdir -p bin/static bench/results
CGO_ENABLED=0 go build -tags=grpcnotrace -o bin/static/xlaned ./cmd/xlaned
CGO_ENABLED=0 go build -o bin/static/xlane ./cmd/xlane
CGO_ENABLED=0 go build -o bin/static/bench-netkit ./bench/netkit
go build -o bin/vmexec ./test/vm/vmexec
out=bench/results/netkit-$(date -u +%Y%m%d-%H%M%S).txt
bin/vmexec -kernel 6.12 bin/static/bench-netkit \
	-xlaned "$PWD/bin/static/xlaned" -xlane "$PWD/bin/static/xlane" \
	-duration "${DURATION:-5s}" -reps "${REPS:-3}" 2>&1 | tee "$out"
echo "bench-netkit: results in $out"
