package daemon

import (
	"encoding/json"
	"os"
	"slices"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// nodesFilePoll is how often --nodes FILE is checked for changes.
const nodesFilePoll = time.Second

// watchNodesFile keeps the nodes equal to the file's: a JSON array of
// node records ({"name", "underlay": [...], "pod_cidrs": [...]}, the API's
// NodeAdd). The file is the source of truth while it is given: a node not
// in it is removed, a changed one replaced. A file that does not parse is
// logged and ignored until it changes again.
func (d *Daemon) watchNodesFile(path string, done <-chan struct{}) {
	var last time.Time
	var lastSize int64 = -1
	t := time.NewTicker(nodesFilePoll)
	defer t.Stop()
	for {
		if fi, err := os.Stat(path); err != nil {
			d.log.Warn("nodes file", "path", path, "err", err)
		} else if !fi.ModTime().Equal(last) || fi.Size() != lastSize {
			last, lastSize = fi.ModTime(), fi.Size()
			if err := d.syncNodesFile(path); err != nil {
				d.log.Error("nodes file", "path", path, "err", err)
			}
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func (d *Daemon) syncNodesFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var want []api.NodeAdd
	if err := json.Unmarshal(raw, &want); err != nil {
		return model.Fieldf("nodes", "%s: want a JSON array of {\"name\", \"underlay\": [ADDR...], \"pod_cidrs\": [CIDR...]}: %v", path, err)
	}
	have, err := d.Nodes()
	if err != nil {
		return err
	}
	wanted := map[string]api.NodeAdd{}
	for _, w := range want {
		wanted[w.Name] = w
	}
	for _, h := range have {
		w, ok := wanted[h.Name]
		if ok && sameNode(&h, w) {
			delete(wanted, h.Name)
			continue
		}
		if err := d.RemoveNode(h.Name); err != nil {
			return err
		}
	}
	// This node first: its record picks the underlay family for the rest.
	order := slices.SortedFunc(func(yield func(api.NodeAdd) bool) {
		for _, w := range wanted {
			if !yield(w) {
				return
			}
		}
	}, func(a, b api.NodeAdd) int {
		switch {
		case a.Name == d.cfg.NodeName:
			return -1
		case b.Name == d.cfg.NodeName:
			return 1
		}
		return 0
	})
	for _, w := range order {
		if _, err := d.AddNode(w); err != nil {
			d.log.Error("nodes file: node refused", "node", w.Name, "err", err)
		}
	}
	return nil
}

func sameNode(h *model.Node, w api.NodeAdd) bool {
	if len(h.Underlay) != len(w.Underlay) || len(h.PodCIDRs) != len(w.PodCIDRs) || h.MTU != w.MTU {
		return false
	}
	for i, a := range h.Underlay {
		if a.String() != w.Underlay[i] {
			return false
		}
	}
	for i, p := range h.PodCIDRs {
		if p.String() != w.PodCIDRs[i] {
			return false
		}
	}
	return true
}
