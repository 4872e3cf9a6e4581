package wireguard

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// The embedded engine's configuration is wgctrl's wgtypes.Config written
// in WireGuard's cross-platform UAPI text protocol
// (https://www.wireguard.com/xplatform/#configuration-protocol), which
// wireguard-go's device takes in-process (IpcSet/IpcGet): wgctrl itself
// would speak it over /var/run/wireguard/NAME.sock, one path per device
// name for the whole machine, where two xlaned in two namespaces (the
// tests' nodes) would collide.

// marshalUAPI writes cfg as a UAPI "set" body.
func marshalUAPI(cfg wgtypes.Config) string {
	var b strings.Builder
	line := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	if cfg.PrivateKey != nil {
		line("private_key", hex.EncodeToString(cfg.PrivateKey[:]))
	}
	if cfg.ListenPort != nil {
		line("listen_port", strconv.Itoa(*cfg.ListenPort))
	}
	if cfg.FirewallMark != nil {
		line("fwmark", strconv.Itoa(*cfg.FirewallMark))
	}
	if cfg.ReplacePeers {
		line("replace_peers", "true")
	}
	for _, p := range cfg.Peers {
		line("public_key", hex.EncodeToString(p.PublicKey[:]))
		if p.Remove {
			line("remove", "true")
			continue
		}
		if p.UpdateOnly {
			line("update_only", "true")
		}
		if p.PresharedKey != nil {
			line("preshared_key", hex.EncodeToString(p.PresharedKey[:]))
		}
		if p.Endpoint != nil {
			line("endpoint", p.Endpoint.String())
		}
		if p.PersistentKeepaliveInterval != nil {
			line("persistent_keepalive_interval", strconv.Itoa(int(*p.PersistentKeepaliveInterval/time.Second)))
		}
		if p.ReplaceAllowedIPs {
			line("replace_allowed_ips", "true")
		}
		for _, a := range p.AllowedIPs {
			line("allowed_ip", a.String())
		}
	}
	return b.String()
}

// parseUAPI reads a UAPI "get" answer into a device.
func parseUAPI(name, s string) (*wgtypes.Device, error) {
	d := &wgtypes.Device{Name: name, Type: wgtypes.Userspace}
	var p *wgtypes.Peer
	var sec, nsec int64
	flush := func() {
		if p != nil {
			if sec != 0 || nsec != 0 {
				p.LastHandshakeTime = time.Unix(sec, nsec)
			}
			d.Peers = append(d.Peers, *p)
		}
		sec, nsec = 0, 0
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "private_key":
			var key wgtypes.Key
			if key, err = hexKey(v); err == nil {
				d.PrivateKey, d.PublicKey = key, key.PublicKey()
			}
		case "listen_port":
			d.ListenPort, err = strconv.Atoi(v)
		case "fwmark":
			d.FirewallMark, err = strconv.Atoi(v)
		case "public_key":
			flush()
			p = &wgtypes.Peer{}
			p.PublicKey, err = hexKey(v)
		case "errno":
			if v != "0" {
				return nil, fmt.Errorf("wireguard device %s: errno %s", name, v)
			}
		}
		if p != nil {
			switch k {
			case "preshared_key":
				p.PresharedKey, err = hexKey(v)
			case "endpoint":
				p.Endpoint, err = net.ResolveUDPAddr("udp", v)
			case "last_handshake_time_sec":
				sec, err = strconv.ParseInt(v, 10, 64)
			case "last_handshake_time_nsec":
				nsec, err = strconv.ParseInt(v, 10, 64)
			case "tx_bytes":
				p.TransmitBytes, err = strconv.ParseInt(v, 10, 64)
			case "rx_bytes":
				p.ReceiveBytes, err = strconv.ParseInt(v, 10, 64)
			case "persistent_keepalive_interval":
				var n int
				n, err = strconv.Atoi(v)
				p.PersistentKeepaliveInterval = time.Duration(n) * time.Second
			case "protocol_version":
				p.ProtocolVersion, err = strconv.Atoi(v)
			case "allowed_ip":
				var ipn *net.IPNet
				if _, ipn, err = net.ParseCIDR(v); err == nil {
					p.AllowedIPs = append(p.AllowedIPs, *ipn)
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("wireguard device %s: %s: %w", name, k, err)
		}
	}
	flush()
	return d, sc.Err()
}

func hexKey(s string) (wgtypes.Key, error) {
	var k wgtypes.Key
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != len(k) {
		return k, fmt.Errorf("not a hex key of %d bytes", len(k))
	}
	copy(k[:], raw)
	return k, nil
}
