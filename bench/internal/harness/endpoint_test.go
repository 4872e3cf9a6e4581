package harness

import (
	"net/netip"
	"testing"
)

// xlane -o json endpoint add n1 --netns ... --id c1 (IPv4 + IPv6 network).
const endpointAddJSON = `{
  "id": "c1",
  "network": "n1",
  "netns": "/var/run/netns/xlb-ep20661-c",
  "ifname": "eth0",
  "host_ifname": "xlhd0f631ca1d",
  "peer_ifname": "xlcd0f631ca1d",
  "mac": "7a:76:36:52:a9:ba",
  "host_mac": "4e:59:98:9a:02:2f",
  "ips": [
    "10.99.0.2",
    "fd99::2"
  ],
  "created": "2026-11-21T21:45:33.151711131Z",
  "mode": "kernel",
  "state": "ready",
  "sent": {
    "packets": 0,
    "bytes": 0
  },
  "received": {
    "packets": 1,
    "bytes": 150
  }
}
`

func TestParseEndpoint(t *testing.T) {
	ep, err := ParseEndpoint(endpointAddJSON)
	if err != nil {
		t.Fatal(err)
	}
	if ep.IPv4 != netip.MustParseAddr("10.99.0.2") {
		t.Errorf("got %v", ep.IPv4)
	}
	if ep.ID == "" || ep.IfName != "eth0" || ep.HostIf == "" || ep.MAC == "" || ep.HostMAC == "" {
		t.Errorf("fields missing: %+v", ep)
	}
	if _, err := ParseEndpoint(`{"ips":["fd99::2"]}`); err == nil {
		t.Error("IPv6 only: no error")
	}
}
