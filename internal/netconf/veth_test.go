package netconf

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/model"
)

// EnsureVeth and EnsurePort create their pair once (a second call adopts
// it) and refuse a device of the host end's name that is not a veth,
// naming it, as a conflict.
func TestEnsureVethPairs(t *testing.T) {
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	err = node.Do(func(ns.NetNS) error {
		e := &model.Endpoint{ID: "e1", HostIf: "xlhtest1", PeerIf: "xlctest1"}
		p := &model.Endpoint{ID: "p1", HostIf: "xlhtest2", PeerIf: "xlctest2", MAC: "52:54:00:12:34:56", Queues: 2}
		for i := 0; i < 2; i++ {
			h, err := EnsureVeth(e, 1400)
			if err != nil {
				t.Fatalf("EnsureVeth #%d: %v", i+1, err)
			}
			if h.Attrs().Name != e.HostIf || h.Attrs().MTU != 1400 || e.HostMAC == "" || e.MAC == "" {
				t.Errorf("EnsureVeth #%d: %s mtu %d, endpoint %+v", i+1, h.Attrs().Name, h.Attrs().MTU, e)
			}
			h, err = EnsurePort(p, 1500)
			if err != nil {
				t.Fatalf("EnsurePort #%d: %v", i+1, err)
			}
			port, err := netlink.LinkByName(p.PeerIf)
			if err != nil {
				t.Fatal(err)
			}
			if h.Attrs().NumTxQueues != 2 || port.Attrs().HardwareAddr.String() != p.MAC || p.HostMAC == "" {
				t.Errorf("EnsurePort #%d: %d tx queues, port mac %s, endpoint %+v", i+1, h.Attrs().NumTxQueues, port.Attrs().HardwareAddr, p)
			}
		}
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "xlhtest3"}}); err != nil {
			return err
		}
		for _, f := range []func() error{
			func() error {
				_, err := EnsureVeth(&model.Endpoint{HostIf: "xlhtest3", PeerIf: "xlctest3"}, 1500)
				return err
			},
			func() error {
				_, err := EnsurePort(&model.Endpoint{HostIf: "xlhtest3", PeerIf: "xlctest3", MAC: "52:54:00:12:34:57"}, 1500)
				return err
			},
		} {
			if err := f(); !errors.Is(err, model.ErrConflict) || !strings.Contains(err.Error(), "xlhtest3") || !strings.Contains(err.Error(), "bridge") {
				t.Errorf("over a bridge xlhtest3: %v, want a conflict naming it and its type", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
