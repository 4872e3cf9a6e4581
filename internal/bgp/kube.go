package bgp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Kubernetes mode's peers come from an annotation of each node's own Node
// object, not from a CRD: a node's routers are a property of where the
// node sits (its rack's ToR), which is what the Node describes and who
// racks it edits; xlaned already watches its Node (deploy/kubernetes's
// ClusterRole reads Nodes), so this needs no CRD to install and no RBAC
// beyond what xlaned has. A CRD would pay off for one peering shared by
// many nodes through a node selector; per-rack annotations (set by
// whatever labels the nodes) cover the two-rack shape of docs/bgp.md.
//
// PeersAnnotation's value is a JSON list of peers as `xlane bgp peer add`
// takes them:
//
//	xlane.dev/bgp-peers: '[{"address": "192.168.78.254", "asn": 65010, "hold_time": 9, "bfd": true}]'
//
// A TCP MD5 password is refused there (every reader of Nodes would see
// it): add such a peer with the CLI.
const PeersAnnotation = "xlane.dev/bgp-peers"

// SourceNodeAnnotation marks a stored peer that PeersAnnotation made
// (model.BGPPeer.Source): the annotation adds, changes and removes these,
// never a peer of the CLI.
const SourceNodeAnnotation = "node-annotation"

// ParsePeers parses PeersAnnotation's value; errors name the field
// (peers[1].asn ...). An empty value is no peer.
func ParsePeers(v string) ([]model.BGPPeer, error) {
	if len(bytes.TrimSpace([]byte(v))) == 0 {
		return nil, nil
	}
	var ps []model.BGPPeer
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ps); err != nil {
		return nil, model.Fieldf("peers", "%s", err)
	}
	seen := map[netip.Addr]bool{}
	for i := range ps {
		p := &ps[i]
		if p.Password != "" {
			return nil, model.IndexedField("peers", i, model.Fieldf("password", "not taken from a Node annotation (every reader of Nodes sees it): xlane bgp peer add --password"))
		}
		if p.Source != "" || !p.Created.IsZero() {
			return nil, model.IndexedField("peers", i, model.Fieldf("source", "set by xlaned, not in the annotation"))
		}
		if err := p.Validate(); err != nil {
			return nil, model.IndexedField("peers", i, err)
		}
		if seen[p.Address] {
			return nil, model.IndexedField("peers", i, model.Fieldf("address", "%s: listed twice", p.Address))
		}
		seen[p.Address] = true
		p.Source = SourceNodeAnnotation
	}
	return ps, nil
}

// ApplyNodePeers makes the stored peers of the annotation ps, all or
// none: new ones added, changed ones replaced, those no longer listed
// removed; a peer of the CLI at one of the addresses is a conflict.
func (s *Speaker) ApplyNodePeers(ps []model.BGPPeer) error {
	now := time.Now().UTC().Truncate(time.Second)
	return s.c.Store().Update(func(tx *store.Tx) error {
		old, err := tx.BGPPeers()
		if err != nil {
			return err
		}
		byAddr := map[netip.Addr]model.BGPPeer{}
		for _, o := range old {
			byAddr[o.Address] = o
		}
		want := map[netip.Addr]bool{}
		for i := range ps {
			p := ps[i]
			want[p.Address] = true
			o, ok := byAddr[p.Address]
			if ok && o.Source != SourceNodeAnnotation {
				return model.IndexedField("peers", i, model.Conflictf("address %s: a peer of xlane bgp peer add has it", p.Address))
			}
			if ok {
				p.Created = o.Created
				if samePeer(o, p) {
					continue
				}
			} else {
				p.Created = now
			}
			if err := tx.PutBGPPeer(&p); err != nil {
				return err
			}
		}
		for _, o := range old {
			if o.Source == SourceNodeAnnotation && !want[o.Address] {
				if err := tx.DeleteBGPPeer(o.Address); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// RunNodePeers keeps the stored peers of PeersAnnotation on the Node
// called node until ctx ends. An annotation that does not parse, or that
// conflicts with the CLI's peers, is refused whole (logged naming the
// field); the peers stay as they were.
func (s *Speaker) RunNodePeers(ctx context.Context, cs kubernetes.Interface, node string) {
	log := s.log.With("node", node, "annotation", PeersAnnotation)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	inf := f.Core().V1().Nodes().Informer()
	last := "\x00" // the annotation's value last applied (none yet)
	on := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		v := n.Annotations[PeersAnnotation]
		if v == last {
			return
		}
		ps, err := ParsePeers(v)
		if err == nil {
			err = s.ApplyNodePeers(ps)
		}
		if err != nil {
			log.Error("bgp peers from the Node refused", "err", err)
			return
		}
		last = v
		log.Info("bgp peers from the Node", "peers", len(ps))
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o any) { on(o) }})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}
