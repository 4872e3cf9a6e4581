package hubble

import (
	"hash/fnv"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Reserved identities, as Cilium numbers them (pkg/identity): the node
// itself and everything outside the cluster.
const (
	identityHost  = 1
	identityWorld = 2
)

// identity is what an address names: an endpoint of this node (its id,
// network, container or VM), a pod of the cluster, or the node itself.
type identity struct {
	endpoint  string // xlane endpoint id ("" for a pod of another node)
	network   string
	name      string // pod name; else the endpoint id
	namespace string // pod namespace; else the network
	labels    []string
	node      string
	workload  [2]string // kind, name
	host      bool      // the node's own address
	numeric   uint32    // Flow.Endpoint.identity
	epID      uint32    // Flow.Endpoint.ID
	gone      time.Time // when it disappeared (zero: present)
}

// identities is the read-time resolution cache: refreshed from the store
// (and the pods) at most every identityFresh when a flow is read, and
// every identityRefresh in the background, so that a short-lived
// endpoint is seen; what disappears stays for keep.
type identities struct {
	c    core.Core
	pods func() []model.Pod
	node string
	keep time.Duration

	mu    sync.Mutex
	read  time.Time
	by    map[netip.Addr]*identity
	nets  map[string][]netip.Prefix
	hosts map[netip.Addr]bool
	// services by id: the monitor names a service it did not know yet
	// "id N" (its names are refreshed every few seconds).
	services map[uint32]string
}

const (
	identityFresh   = time.Second
	identityRefresh = 2 * time.Second
)

// lookup names an address (nil: unknown to this node).
func (ids *identities) lookup(a netip.Addr) *identity {
	if !a.IsValid() {
		return nil
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if id := ids.by[a]; id != nil {
		return id
	}
	if ids.hosts[a] {
		return &identity{host: true, numeric: identityHost, node: ids.node, labels: []string{"reserved:host"}}
	}
	return nil
}

// name is how the monitor's events name an address (SetNamer):
// NAMESPACE/NAME as Hubble prints it (a pod; an endpoint: NETWORK/ID),
// "host" for the node's own, "" unknown.
func (ids *identities) name(a netip.Addr) string {
	switch id := ids.lookup(a); {
	case id == nil:
		return ""
	case id.host:
		return "host"
	default:
		return id.namespace + "/" + id.name
	}
}

// service names a service the monitor named "id N".
func (ids *identities) service(name string) string {
	n, ok := strings.CutPrefix(name, "id ")
	if !ok {
		return name
	}
	id, err := strconv.ParseUint(n, 10, 32)
	if err != nil {
		return name
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if s, ok := ids.services[uint32(id)]; ok {
		return s
	}
	return name
}

// network is the network whose subnets hold a ("": none).
func (ids *identities) network(a netip.Addr) string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for n, ps := range ids.nets {
		if slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return n
		}
	}
	return ""
}

// fresh refreshes the cache if it is older than identityFresh.
func (ids *identities) fresh() {
	ids.mu.Lock()
	stale := time.Since(ids.read) > identityFresh
	ids.mu.Unlock()
	if stale {
		ids.refresh()
	}
}

// run refreshes the cache every identityRefresh until done.
func (ids *identities) run(done <-chan struct{}) {
	t := time.NewTicker(identityRefresh)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			ids.refresh()
		}
	}
}

// refresh reads the endpoints, networks and pods anew; identities no
// longer there are marked gone, and dropped keep after that.
func (ids *identities) refresh() {
	if ids.c == nil { // (tests of the ring and the server alone)
		return
	}
	now := time.Now()
	cur := map[netip.Addr]*identity{}
	nets := map[string][]netip.Prefix{}
	svcs := map[uint32]string{}
	err := ids.c.Store().View(func(tx *store.Tx) error {
		ss, err := tx.Services()
		if err != nil {
			return err
		}
		for _, sv := range ss {
			svcs[sv.ID] = sv.Name
		}
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			if core.Hidden(e.Network) {
				continue
			}
			id := endpointIdentity(&e, ids.node)
			for _, a := range e.IPs {
				cur[a] = id
			}
		}
		ns, err := tx.Networks()
		for _, n := range ns {
			if !core.Hidden(n.Name) {
				nets[n.Name] = n.Subnets
			}
		}
		return err
	})
	if err != nil {
		ids.c.Log().Warn("hubble: read endpoints", "err", err)
		return
	}
	if ids.pods != nil {
		for _, p := range ids.pods() {
			for _, a := range p.IPs {
				id := podIdentity(&p)
				if e := cur[a]; e != nil { // this node's endpoint: keep its id and network
					id.endpoint, id.network, id.epID = e.endpoint, e.network, e.epID
				}
				cur[a] = id
			}
		}
	}
	hosts := map[netip.Addr]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				hosts[p.Addr()] = true
			}
		}
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for a, old := range ids.by {
		if _, ok := cur[a]; ok {
			continue
		}
		switch {
		case old.gone.IsZero():
			gone := *old
			gone.gone = now
			cur[a] = &gone
		case now.Sub(old.gone) < ids.keep:
			cur[a] = old
		}
	}
	for id, name := range ids.services {
		if _, ok := svcs[id]; !ok && len(svcs) < len(ids.services)+1024 {
			svcs[id] = name // a removed service keeps naming its flows
		}
	}
	ids.by, ids.nets, ids.hosts, ids.services, ids.read = cur, nets, hosts, svcs, now
}

// endpointIdentity names an endpoint of this node: namespace is its
// network, name its id (Docker, CNI, standalone and VM endpoints alike).
func endpointIdentity(e *model.Endpoint, node string) *identity {
	labels := []string{"xlane:network=" + e.Network, "xlane:endpoint=" + e.ID}
	if e.VM {
		labels = append(labels, "xlane:vm")
	}
	if a := e.Attachment; a != nil {
		labels = append(labels, "xlane:container="+a.ContainerID)
	}
	sort.Strings(labels)
	return &identity{endpoint: e.ID, network: e.Network, name: e.ID, namespace: e.Network, labels: labels,
		node: node, numeric: numericIdentity(labels), epID: endpointNumber(e.ID)}
}

// podIdentity names a pod: its labels as Cilium writes them ("k8s:" and
// the namespace's label), its identity a hash of them.
func podIdentity(p *model.Pod) *identity {
	labels := make([]string, 0, len(p.Labels)+1)
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		labels = append(labels, "k8s:"+k+"="+p.Labels[k])
	}
	labels = append(labels, "k8s:io.kubernetes.pod.namespace="+p.Namespace)
	sort.Strings(labels)
	return &identity{name: p.Name, namespace: p.Namespace, node: p.Node, labels: labels,
		workload: [2]string{p.WorkloadKind, p.WorkloadName}, numeric: numericIdentity(labels),
		epID: endpointNumber(p.Namespace + "/" + p.Name)}
}

// numericIdentity stands in for Cilium's security identity: the same
// labels give the same number, above the reserved ones (< 256) and within
// 16 bits.
func numericIdentity(labels []string) uint32 {
	h := fnv.New32a()
	for _, l := range labels {
		h.Write([]byte(l))
		h.Write([]byte{0})
	}
	return 256 + h.Sum32()%(65536-256)
}

// endpointNumber is Flow.Endpoint.ID for an xlane endpoint id (a string):
// a 16-bit hash, stable across restarts.
func endpointNumber(id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return 1 + h.Sum32()%65535
}

// size is how many addresses the cache names, gone ones included.
func (ids *identities) size() (present, gone int) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for _, id := range ids.by {
		if id.gone.IsZero() {
			present++
		} else {
			gone++
		}
	}
	return
}
