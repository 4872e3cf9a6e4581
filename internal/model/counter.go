package model

// Counter is a packet and byte count: a datapath counter, an endpoint's
// traffic, a firewall rule's hits.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Add adds o to c.
func (c *Counter) Add(o Counter) { c.Packets += o.Packets; c.Bytes += o.Bytes }
