package daemon

import (
	"errors"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// Namespace arguments an endpoint must not get are refused with an error
// naming netns (HTTP 400), before anything is applied: files of other
// namespace types (once an internal error), the namespace xlaned manages
// and the machine's root namespace (once accepted: the node got the
// endpoint's address and a default route through it).
func TestEndpointRefusesNodeNetns(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.57.0.0/24"}}); err != nil {
			t.Fatal(err)
		}
		before := routeTable(t)
		for _, p := range []string{
			"/proc/thread-self/ns/mnt", "/proc/thread-self/ns/user", "/proc/thread-self/ns/uts",
			"/proc/thread-self/ns/net", "/proc/1/ns/net",
		} {
			_, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: p, IfName: "xlt0"})
			var fe *model.FieldError
			if !errors.As(err, &fe) || fe.Field != "netns" {
				t.Errorf("netns %s: AddEndpoint = %v, want an error naming field netns", p, err)
			}
			if l := xlaneLinks(t); len(l) != 0 {
				t.Fatalf("netns %s left links %v", p, l)
			}
		}
		if after := routeTable(t); len(after) != len(before) {
			t.Errorf("refused endpoints changed the node's routes/addresses:\nbefore %v\nafter  %v", before, after)
		}
		// A container's namespace is still fine.
		if _, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: container(t)}); err != nil {
			t.Errorf("container netns: %v", err)
		}
	})
}
