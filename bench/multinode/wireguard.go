package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/internal/api"
)

// Encryption between nodes (issue 28, docs/encryption.md):
//
//	xlane-tc-wg  xlane-tc with --encryption wireguard: VXLAN inside
//	             WireGuard, the engine xlaned picks (embedded wireguard-go
//	             on a kernel without WireGuard, as here)
//	linux-wg     Linux's equivalent with the same engine: a wireguard-go
//	             process per node (its TUN device configured over its UAPI
//	             socket with wgctrl), the peer's pod subnet routed into it,
//	             pods on routed veths: what flannel's wireguard backend
//	             does on a kernel without WireGuard
//	linux-wg-vxlan  linux-wg's WireGuard devices carrying flannel's VXLAN
//	             between the devices' addresses: VXLAN inside WireGuard,
//	             xlane-tc-wg's carriage, against linux-wg's direct one

// wgTargets are issue 28's: xlane-tc-wg against linux-wg (the same
// engine, routed), and against xlane-tc (unencrypted) at 8 streams.
func wgTargets(unencrypted bool) []target {
	ts := []target{
		{2, "pod-pod", "xlane-tc-wg", "linux-wg", "gbps", "Gbit/s", false, 1.1, nil},
		{2, "pod-pod", "xlane-tc-wg", "linux-wg", "cpu", "CPU-s/Gbit", true, 0.9, nil},
		{2, "pod-pod", "xlane-tc-wg", "linux-wg", "tps", "TCP_RR trans/s", false, 1.2, nil},
	}
	if unencrypted {
		ts = append(ts, target{2, "pod-pod", "xlane-tc-wg", "xlane-tc", "gbps", "Gbit/s", false, 0.5, []int{8}})
	}
	return ts
}

// has2: both setups are in the run.
func has2(setups []string, a, b string) bool {
	var n int
	for _, s := range setups {
		if s == a || s == b {
			n++
		}
	}
	return n == 2
}

// wgKeys reads each xlaned's WireGuard public key (xlane status).
func wgKeys(ctx context.Context, bins string, dirs [2]string) ([2]string, error) {
	var keys [2]string
	for i, dir := range dirs {
		out, err := harness.Xlane(ctx, bins, dir, "status", "-o", "json")
		if err != nil {
			return keys, err
		}
		var st api.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return keys, fmt.Errorf("xlane status: %w", err)
		}
		if st.Cluster == nil || st.Cluster.Encryption == nil {
			return keys, fmt.Errorf("node %d: no encryption in xlane status", i+1)
		}
		keys[i] = st.Cluster.Encryption.PublicKey
	}
	return keys, nil
}

// buildLinuxWG is linux-wg (above) on c's two nodes, or linux-wg-vxlan.
func buildLinuxWG(ctx context.Context, undo *harness.UndoStack, tmp, bins string, c *cluster, vxlan bool) error {
	wggo := filepath.Join(bins, "wireguard-go")
	if _, err := os.Stat(wggo); err != nil {
		if _, err := harness.Run(ctx, "go", "build", "-o", wggo, "golang.zx2c4.com/wireguard"); err != nil {
			return fmt.Errorf("build wireguard-go: %w", err)
		}
	}
	wc, err := wgctrl.New()
	if err != nil {
		return err
	}
	defer wc.Close()
	const port = 51820
	var keys [2]wgtypes.Key
	var devs [2]string
	for i := range keys {
		if keys[i], err = wgtypes.GeneratePrivateKey(); err != nil {
			return err
		}
		// The UAPI socket is /var/run/wireguard/NAME.sock, one per name
		// for the whole machine: a name of this run's.
		devs[i] = fmt.Sprintf("wgb%s%d", harness.RandomHex(3), i+1)
	}
	for i, n := range c.nodes {
		peer := 1 - i
		sub, psub := fmt.Sprintf("10.247.%d", i+1), fmt.Sprintf("10.247.%d", peer+1)
		c.podIP[i] = sub + ".2"
		p, err := harness.StartProc("wireguard-go "+devs[i], filepath.Join(tmp, devs[i]+".log"), harness.NSExec(n, wggo, "-f", devs[i])...)
		if err != nil {
			return err
		}
		undo.Push("stop "+p.Name, p.Stop)
		sock := "/var/run/wireguard/" + devs[i] + ".sock"
		if err := harness.WaitFor(ctx, sock, 10*time.Second, p, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
			return err
		}
		_, allowed, _ := net.ParseCIDR(psub + ".0/24")
		wgAddr, peerWG := fmt.Sprintf("10.249.%d.1", i+1), fmt.Sprintf("10.249.%d.1", peer+1)
		if vxlan {
			_, allowed, _ = net.ParseCIDR(peerWG + "/32")
		}
		listen := port
		err = wc.ConfigureDevice(devs[i], wgtypes.Config{PrivateKey: &keys[i], ListenPort: &listen, ReplacePeers: true,
			Peers: []wgtypes.PeerConfig{{PublicKey: keys[peer].PublicKey(), AllowedIPs: []net.IPNet{*allowed},
				Endpoint: &net.UDPAddr{IP: net.ParseIP(fmt.Sprintf("192.168.88.%d", peer+1)), Port: port}}}})
		if err != nil {
			return fmt.Errorf("configure %s: %w", devs[i], err)
		}
		mtu := "1420"
		cmds := [][]string{
			{"ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
			{"ip", "-n", n, "link", "set", devs[i], "mtu", "1420", "up"},
		}
		if vxlan {
			mtu = "1370"
			cmds = append(cmds,
				[]string{"ip", "-n", n, "addr", "add", wgAddr + "/32", "dev", devs[i]},
				[]string{"ip", "-n", n, "route", "add", peerWG + "/32", "dev", devs[i]})
			if err := harness.RunAll(ctx, cmds...); err != nil {
				return err
			}
			mac := [2]string{"02:00:5e:10:00:01", "02:00:5e:10:00:02"}
			if err := harness.FlannelVXLAN(ctx, n, "vx0", devs[i], wgAddr, mac[i], sub,
				harness.FlannelPeer{Underlay: peerWG, MAC: mac[peer], Subnet: psub}); err != nil {
				return err
			}
			cmds = [][]string{{"ip", "-n", n, "link", "set", "vx0", "mtu", mtu}}
		} else {
			cmds = append(cmds,
				[]string{"ip", "-n", n, "addr", "add", sub + ".0/32", "dev", devs[i]},
				[]string{"ip", "-n", n, "route", "add", psub + ".0/24", "dev", devs[i]})
		}
		cmds = append(cmds, [][]string{
			{"ip", "-n", n, "link", "add", "hp", "mtu", mtu, "type", "veth", "peer", "name", "eth0", "mtu", mtu, "netns", c.pods[i]},
			{"ip", "-n", c.pods[i], "addr", "add", c.podIP[i] + "/24", "dev", "eth0"},
			{"ip", "-n", c.pods[i], "link", "set", "eth0", "up"},
			{"ip", "-n", n, "addr", "add", sub + ".1/32", "dev", "hp"},
			{"ip", "-n", n, "link", "set", "hp", "up"},
			{"ip", "-n", n, "route", "add", c.podIP[i] + "/32", "dev", "hp"},
			{"ip", "-n", c.pods[i], "route", "add", "default", "via", sub + ".1"},
		}...)
		if err := harness.RunAll(ctx, cmds...); err != nil {
			return err
		}
	}
	return nil
}
