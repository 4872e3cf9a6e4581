package netconf

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/model"
)

// nsTypes names namespace types for errors (NS_GET_NSTYPE returns the
// CLONE_NEW* flag).
var nsTypes = map[int]string{
	unix.CLONE_NEWNS: "mount", unix.CLONE_NEWUSER: "user", unix.CLONE_NEWPID: "pid",
	unix.CLONE_NEWUTS: "uts", unix.CLONE_NEWIPC: "ipc", unix.CLONE_NEWCGROUP: "cgroup",
	unix.CLONE_NEWTIME: "time",
}

// checkEndpointNetns refuses a namespace file an endpoint must not get
// (field netns): one of another type (a mount or user namespace file is on
// nsfs too), the namespace xlaned manages (the calling thread's), and the
// machine's root namespace (pid 1's). The last two would give the node
// itself the endpoint's address and a default route through it, and
// removing the endpoint would take routes of the node's away with it.
func checkEndpointNetns(path, arg string) error {
	f, err := os.Open(path)
	if err != nil {
		return model.Fieldf("netns", "%q: cannot open: %v", arg, err)
	}
	defer f.Close()
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return model.Fieldf("netns", "%q: cannot tell the namespace type (NS_GET_NSTYPE): %v", arg, err)
	}
	if t != unix.CLONE_NEWNET {
		name := nsTypes[t]
		if name == "" {
			name = "non-network"
		}
		return model.Fieldf("netns", "%q: a %s namespace, not a network namespace", arg, name)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return model.Fieldf("netns", "%q: %v", arg, err)
	}
	for _, own := range []struct{ path, what string }{
		{"/proc/thread-self/ns/net", "the node's own network namespace (where xlaned runs)"},
		{"/proc/1/ns/net", "the machine's root network namespace"},
	} {
		var o unix.Stat_t
		if err := unix.Stat(own.path, &o); err == nil && o.Dev == st.Dev && o.Ino == st.Ino {
			return model.Fieldf("netns", "%q: %s, not a container's", arg, own.what)
		}
	}
	return nil
}
