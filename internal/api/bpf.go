package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// PathBPFMaps lists the datapath's maps (GET); PathBPFMaps/{name} dumps
// one in readable form (GET, ?limit=N).
const PathBPFMaps = "/v1/bpf/maps"

// BPFMap is a name `xlane bpf dump` takes.
type BPFMap struct {
	Name string `json:"name"`
	// Help says what a decoded map shows; raw maps (keys and values in
	// hex) have none.
	Help string `json:"help,omitempty"`
}

// MapDump is the body of GET /v1/bpf/maps/{name}: one map in readable
// form, an object per entry whose keys are Columns.
type MapDump struct {
	Name       string           `json:"name"`
	Map        string           `json:"map"` // the BPF map(s) read
	Type       string           `json:"type"`
	MaxEntries uint32           `json:"max_entries"`
	Count      int              `json:"count"`
	Truncated  bool             `json:"truncated,omitempty"`
	Columns    []string         `json:"columns"`
	Entries    []map[string]any `json:"entries"`
}

// BPFMaps lists the maps BPFDump takes.
func (c *Client) BPFMaps(ctx context.Context) ([]BPFMap, error) {
	var out []BPFMap
	return out, c.do(ctx, http.MethodGet, PathBPFMaps, nil, &out)
}

// BPFDump reads one map; limit 0 reads all. Numbers stay exact
// (json.Number): counters and timestamps are 64-bit.
func (c *Client) BPFDump(ctx context.Context, name string, limit int) (*MapDump, error) {
	var raw json.RawMessage
	p := fmt.Sprintf("%s/%s?limit=%d", PathBPFMaps, url.PathEscape(name), limit)
	if err := c.do(ctx, http.MethodGet, p, nil, &raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out MapDump
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("decode dump of %s: %w", name, err)
	}
	return &out, nil
}
