package cni

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// ownNetns refuses a CNI_NETNS that is the namespace this plugin runs in
// (the runtime's, normally the node's) or the machine's root namespace
// (pid 1's), compared by device and inode, before anything is asked of
// xlaned: the container's interface would land beside the node's own,
// with the pod's address and a default route through it. xlaned refuses
// its own namespace and the root one too (netconf), but the runtime, and
// so this plugin, may run in a namespace of its own.
func ownNetns(netns string) error {
	var st unix.Stat_t
	if err := unix.Stat(netns, &st); err != nil {
		return nil // xlaned says what is wrong with it (no such namespace, ...)
	}
	for _, own := range []struct{ path, what string }{
		{"/proc/thread-self/ns/net", "the network namespace xlane-cni runs in (the runtime's, the node's)"},
		{"/proc/1/ns/net", "the machine's root network namespace"},
	} {
		var o unix.Stat_t
		if unix.Stat(own.path, &o) == nil && o.Dev == st.Dev && o.Ino == st.Ino {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("xlane-cni: ADD: CNI_NETNS %q: %s, not a container's", netns, own.what), "")
		}
	}
	return nil
}
