package observe

import (
	"errors"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
)

// BPFMaps lists the names DumpMap takes.
func (o *Observer) BPFMaps() ([]api.BPFMap, error) {
	if err := o.c.Datapath().Available(); err != nil {
		return nil, err
	}
	var out []api.BPFMap
	for _, n := range o.c.Datapath().DumpNames() {
		out = append(out, api.BPFMap{Name: n, Help: datapath.DumpHelp(n)})
	}
	return out, nil
}

// DumpMap reads one map of the datapath in readable form (at most limit
// entries; 0: all). An unknown name is not found, with the valid names.
func (o *Observer) DumpMap(name string, limit int) (*api.MapDump, error) {
	if limit < 0 {
		return nil, model.Fieldf("limit", "%d: want 0 (all) or more", limit)
	}
	md, err := o.c.Datapath().DumpMap(name, limit)
	if errors.Is(err, datapath.ErrNoSuchMap) {
		return nil, model.NotFoundf("%s", err.Error())
	}
	if err != nil {
		return nil, err
	}
	out := &api.MapDump{Name: md.Name, Map: md.Map, Type: md.Type, MaxEntries: md.MaxEntries,
		Count: len(md.Rows), Truncated: md.Truncated, Columns: md.Columns, Entries: []map[string]any{}}
	for _, row := range md.Rows {
		e := make(map[string]any, len(row))
		for i, v := range row {
			e[md.Columns[i]] = v
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}
