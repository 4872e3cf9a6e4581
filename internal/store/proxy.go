package store

import (
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// ProxyRecord is one transparent redirect.
type ProxyRecord struct {
	Port, To     uint16
	Cgroup       string // cleaned absolute path
	Exempt       string
	Mark, UID    uint32
	ExemptCgroup string
	// Direction "in": connections arriving at Port in the network
	// namespace Netns ("": the daemon's), NetnsCookie when it was added.
	Direction   string `json:",omitempty"`
	Netns       string `json:",omitempty"`
	NetnsCookie uint64 `json:",omitempty"`
}

// Key names a redirect: its direction, where it acts (the network
// namespace path of an inbound one, "" for xlaned's own; the cgroup of an
// outbound one) and its port, as "in:/run/netns/app:80" or
// "out:/sys/fs/cgroup/xlane:80". `xlane proxy ls` shows it, `xlane proxy
// rm` takes it.
func (r ProxyRecord) Key() string {
	if r.Direction == "in" {
		return "in:" + r.Netns + ":" + strconv.Itoa(int(r.Port))
	}
	return "out:" + r.Cgroup + ":" + strconv.Itoa(int(r.Port))
}

func proxyKey(r ProxyRecord) string { return "proxy/" + r.Key() }

// legacyProxyKey is where a record written before keys lived.
func legacyProxyKey(port uint16) string { return "proxy/" + strconv.Itoa(int(port)) }

// dropLegacyProxy deletes the record of r written under its port alone,
// if it is r's.
func dropLegacyProxy(b *bolt.Bucket, r ProxyRecord) error {
	k := []byte(legacyProxyKey(r.Port))
	raw := b.Get(k)
	if raw == nil {
		return nil
	}
	var old ProxyRecord
	if err := json.Unmarshal(raw, &old); err != nil || old.Key() == r.Key() {
		return b.Delete(k)
	}
	return nil
}

// ProxyRedirects lists the redirects by key.
func (t *Tx) ProxyRedirects() ([]ProxyRecord, error) {
	b, err := t.sockBucket()
	if err != nil || b == nil {
		return nil, err
	}
	var out []ProxyRecord
	c := b.Cursor()
	for k, v := c.Seek([]byte("proxy/")); k != nil && len(k) > 6 && string(k[:6]) == "proxy/"; k, v = c.Next() {
		var r ProxyRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return nil, fmt.Errorf("decode redirect %s: %w", k, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// PutProxyRedirect writes one.
func (t *Tx) PutProxyRedirect(r ProxyRecord) error {
	b, err := t.sockBucket()
	if err != nil {
		return err
	}
	if err := dropLegacyProxy(b, r); err != nil {
		return err
	}
	return put(b, proxyKey(r), r)
}

// DeleteProxyRedirect removes one (missing is fine).
func (t *Tx) DeleteProxyRedirect(r ProxyRecord) error {
	b, err := t.sockBucket()
	if err != nil || b == nil {
		return err
	}
	if err := dropLegacyProxy(b, r); err != nil {
		return err
	}
	return b.Delete([]byte(proxyKey(r)))
}
