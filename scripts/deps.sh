#!/usr/bin/env bash
# Installs what building, testing, the demo and the benchmarks need on a
# fresh Debian 12 machine. Idempotent: installs only what is missing.
set -euo pipefail

pkgs=(clang-19 clang-format-19 llvm-19 libbpf-dev linux-libc-dev bpftool iproute2 iputils-ping
      iperf3 sockperf ethtool iptables nftables tcpdump util-linux ca-certificates
      docker.io busybox-static
      containernetworking-plugins containerd runc   # CNI: portmap/loopback, and a containerd for crictl (test/e2e/cni*_test.go)
      prometheus   # scrapes xlaned in test/e2e/metrics_test.go (the test starts its own)
      systemd      # systemd-analyze verify of deploy/systemd/xlaned.service (deploy/systemd_test.go)
      squid   # a real intercepting proxy behind proxy redirect (test/e2e/proxy_squid_test.go starts its own)
      haproxy wrk   # real proxies under socket acceleration (test/e2e/accel_proxies_test.go, with nginx-light below) and bench/accel's requests/s rows
      bind9-dnsutils netcat-openbsd curl wget nginx-light   # the e2e suites' test images (test/e2e/k8s_conformance_test.go)
      frr bird2   # real BGP routers peering with xlaned's speaker (test/e2e/bgp_test.go starts its own)
      qemu-system-x86 kmod xz-utils zstd)   # the kernel matrix (test/vm)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# docker.io, prometheus, squid, haproxy and nginx would start their daemons in this namespace
	# (a dockerd's bridge and iptables rules); the tests start their own in
	# namespaces of their own.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
	[ -x /usr/local/go/bin/go ] && export PATH=$PATH:/usr/local/go/bin
fi
if ! command -v go >/dev/null; then
	echo "deps: Go 1.26 or later is required (Debian 12's golang package is too old); install it to /usr/local/go" >&2
	exit 1
fi
go mod download
