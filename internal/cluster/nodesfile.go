package cluster

import (
	"encoding/json"
	"os"
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
func (c *Cluster) watchNodesFile(path string, done <-chan struct{}) {
	var last time.Time
	var lastSize int64 = -1
	t := time.NewTicker(nodesFilePoll)
	defer t.Stop()
	for {
		if fi, err := os.Stat(path); err != nil {
			c.c.Log().Warn("nodes file", "path", path, "err", err)
		} else if !fi.ModTime().Equal(last) || fi.Size() != lastSize {
			last, lastSize = fi.ModTime(), fi.Size()
			if err := c.syncNodesFile(path); err != nil {
				c.c.Log().Error("nodes file", "path", path, "err", err)
			}
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func (c *Cluster) syncNodesFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var recs []api.NodeAdd
	if err := json.Unmarshal(raw, &recs); err != nil {
		return model.Fieldf("nodes", "%s: want a JSON array of {\"name\", \"underlay\": [ADDR...], \"pod_cidrs\": [CIDR...], \"wg_public_key\" (with encryption)}: %v", path, err)
	}
	// The text is read here, at the edge; a record that does not read
	// is refused as SyncNodes refuses one its checks do: logged, the
	// others applied.
	want := make([]model.Node, 0, len(recs))
	for _, r := range recs {
		n, err := r.Node()
		if err != nil {
			c.c.Log().Error("nodes: node refused", "node", r.Name, "err", err)
			continue
		}
		want = append(want, n)
	}
	return c.SyncNodes(want)
}
