// Package docker is xlane's Docker network driver: a libnetwork remote
// driver (protocol in protocol.go) that xlaned serves on a unix socket in
// Docker's plugin directory, so that `docker network create -d xlane`
// gives containers xlane networking instead of a bridge.
//
// Contract:
//   - A Docker network is one xlane network named "docker-" + the first 12
//     hex digits of Docker's network ID (what `docker network ls` shows), with
//     the subnets and gateways Docker's IPAM handed over. A Docker endpoint is
//     the veth-only xlane endpoint with the same ID, holding the addresses
//     Docker's IPAM chose; Docker moves its container side into the sandbox
//     and configures it (on-link subnet, default route via the gateway).
//   - Published ports (-p) are the endpoint's xlane published ports; a
//     relay in xlaned (proxy.go TCP, proxy_udp.go UDP) covers the node's own
//     traffic to other addresses than the uplink's. A port bound to one host
//     address is that relay alone; host ports Docker leaves to the driver
//     are chosen below ip_local_port_range (ports.go). While any Docker network exists, two
//     iptables rules let Docker's FORWARD policy pass xlane's traffic
//     (firewall.go).
//   - What only Docker needs (options, internal, interface prefix, the
//     sandbox an endpoint joined, published ports) lives in the daemon's
//     state file (store buckets docker_networks and docker_endpoints), so a
//     restarted xlaned answers Docker the same way about networks and
//     endpoints created before.
//   - Every method is idempotent: Docker retries, and replays deletes after
//     crashes. Deleting what does not exist succeeds.
//   - Failures are sentences starting with "xlane: " that Docker shows in the
//     CLI; nothing stays behind from a failed call.
package docker
