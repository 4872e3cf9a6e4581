package measure

import (
	"testing"
)

// ethtool -S of a veth (Linux 6.18).
const ethtoolVeth = `NIC statistics:
     peer_ifindex: 2
     rx_queue_0_xdp_packets: 0
     rx_queue_0_xdp_bytes: 0
     rx_queue_0_drops: 17
     rx_queue_0_xdp_redirect: 0
     rx_queue_0_xdp_drops: 0
     rx_queue_0_xdp_tx: 0
     rx_queue_0_xdp_tx_errors: 0
     tx_queue_0_xdp_xmit: 5
     tx_queue_0_xdp_xmit_errors: 3
`

const ipLinkStats = `[{"ifindex":3,"link":"xlcx","ifname":"xlhx","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UP","linkmode":"DEFAULT","group":"default","txqlen":1000,"link_type":"ether","address":"b6:37:6b:84:56:0a","broadcast":"ff:ff:ff:ff:ff:ff","stats64":{"rx":{"bytes":0,"packets":0,"errors":0,"dropped":7,"over_errors":0,"multicast":0},"tx":{"bytes":0,"packets":0,"errors":0,"dropped":0,"carrier_errors":0,"collisions":0}}}]`

const softnetStat = `041d0195 00000010 00000023 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
01ac25e5 00000001 0000002b 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000
`

// ethtool -k of a container eth0 whose peer runs native XDP (excerpt).
const ethtoolFeaturesOut = `Features for eth0:
rx-checksumming: on
tx-checksumming: on
	tx-checksum-ipv4: off [fixed]
	tx-checksum-ip-generic: on
scatter-gather: on
tcp-segmentation-offload: off
	tx-tcp-segmentation: off
generic-segmentation-offload: on
generic-receive-offload: on
rx-gro-list: off
`

const inspectJSON = `{"id":"c1-1500","reasons":[
 {"reason":"fwd_peer","direction":"from_endpoint","drop":false,"packets":10,"bytes":600},
 {"reason":"drop_spoofed","direction":"from_endpoint","drop":true,"packets":2,"bytes":120},
 {"reason":"deliver","direction":"to_endpoint","drop":false,"packets":1,"bytes":98}]}`

func TestCounterParsers(t *testing.T) {
	st := ParseEthtoolStats(ethtoolVeth)
	if len(st) != 10 || st["ethtool rx_queue_0_drops"] != 17 || st["ethtool tx_queue_0_xdp_xmit_errors"] != 3 {
		t.Errorf("ParseEthtoolStats = %v", st)
	}
	ls, err := ParseIPLinkStats(ipLinkStats)
	if err != nil {
		t.Fatal(err)
	}
	if ls["link rx_dropped"] != 7 || ls["link tx_carrier_errors"] != 0 || len(ls) != 12 {
		t.Errorf("ParseIPLinkStats = %v", ls)
	}
	if _, err := ParseIPLinkStats(`[]`); err == nil {
		t.Error("ParseIPLinkStats: no device, no error")
	}
	sn := ParseSoftnetStat(softnetStat)
	if sn["backlog dropped"] != 0x11 || sn["time_squeeze"] != 0x23+0x2b {
		t.Errorf("ParseSoftnetStat = %v", sn)
	}
	f := ParseEthtoolFeatures(ethtoolFeaturesOut)
	if f["tcp-segmentation-offload"] != "off" || f["tx-checksum-ipv4"] != "off [fixed]" || f["generic-receive-offload"] != "on" {
		t.Errorf("ParseEthtoolFeatures = %v", f)
	}
	rs, err := ParseReasons(inspectJSON)
	if err != nil {
		t.Fatal(err)
	}
	if rs["from_endpoint/fwd_peer"] != 10 || rs["drop from_endpoint/drop_spoofed"] != 2 || rs["to_endpoint/deliver"] != 1 {
		t.Errorf("ParseReasons = %v", rs)
	}
}

func TestParseSNMP(t *testing.T) {
	in := "Ip: Forwarding DefaultTTL\nIp: 2 64\nTcp: RtoAlgorithm InSegs RetransSegs InCsumErrors\nTcp: 1 10687 3 4\nUdp: InDatagrams InCsumErrors\nUdp: 83 1\n"
	s := ParseSNMP(in)
	if s["Tcp:InCsumErrors"] != 4 || s["Tcp:RetransSegs"] != 3 || s["Udp:InCsumErrors"] != 1 || s["Ip:DefaultTTL"] != 64 {
		t.Errorf("ParseSNMP = %v", s)
	}
}
