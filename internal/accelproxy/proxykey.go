package accelproxy

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Redirects are keyed by (direction, where, port): inbound by the network
// namespace, so that each endpoint's sidecar gets its own redirect of a
// port (the programs key inbound rules by namespace cookie and port);
// outbound by cgroup in the store, but the connect programs key their
// rules by destination port alone (xlane_proxy_rules), so one outbound
// redirect per port on the node.

// proxyClash refuses rec where it would meet a redirect in have: the same
// port in the same place (an outbound and an inbound one included: the
// proxy's own connection to the port would miss its inbound exemption), or a loop (a proxy port that is redirected, a
// redirected port that is a proxy port) where the two could see each
// other's connections: two inbound redirects of different namespaces
// cannot.
func proxyClash(rec store.ProxyRecord, have []store.ProxyRecord) error {
	for _, h := range have {
		in, hin := rec.Direction == "in", h.Direction == "in"
		if in && hin && h.NetnsCookie != rec.NetnsCookie {
			continue
		}
		if h.Port == rec.Port {
			where := "on this node (outbound redirects are one per port: the connect programs key them by port)"
			if hin {
				where = "in network namespace " + netnsName(h.Netns)
			}
			return model.Conflictf("port %d is already redirected %s (to %d, key %s); xlane proxy rm %s first", h.Port, where, h.To, h.Key(), h.Key())
		}
		if h.Port == rec.To {
			return model.Fieldf("to", "%d: is itself redirected (to %d, key %s): a loop", rec.To, h.To, h.Key())
		}
		if h.To == rec.Port {
			return model.Fieldf("port", "%d: is the proxy port of the redirect %s: a loop", rec.Port, h.Key())
		}
	}
	return nil
}

func netnsName(p string) string {
	if p == "" {
		return "(xlaned's)"
	}
	return p
}

// proxyPick finds the redirect of port named by key, or with key "" the
// only one of port; ok is false when there is none.
func proxyPick(have []store.ProxyRecord, port uint16, key string) (store.ProxyRecord, bool, error) {
	if key != "" {
		want, err := normalProxyKey(key, port)
		if err != nil {
			return store.ProxyRecord{}, false, err
		}
		for _, h := range have {
			if h.Key() == want {
				return h, true, nil
			}
		}
		return store.ProxyRecord{}, false, nil
	}
	var cands []store.ProxyRecord
	for _, h := range have {
		if h.Port == port {
			cands = append(cands, h)
		}
	}
	switch len(cands) {
	case 0:
		return store.ProxyRecord{}, false, nil
	case 1:
		return cands[0], true, nil
	}
	keys := make([]string, len(cands))
	for i, c := range cands {
		keys[i] = c.Key()
	}
	return store.ProxyRecord{}, false, model.Conflictf("port %d is redirected %d times: name one by its key (xlane proxy rm KEY): %s", port, len(cands), strings.Join(keys, ", "))
}

// normalProxyKey checks a key "DIRECTION:WHERE:PORT" against port and
// makes an outbound one's relative cgroup absolute, as the store keeps it.
func normalProxyKey(key string, port uint16) (string, error) {
	dir, rest, ok := strings.Cut(key, ":")
	i := strings.LastIndex(rest, ":")
	if !ok || i < 0 || (dir != "in" && dir != "out") {
		return "", model.Fieldf("key", "%q: want DIRECTION:WHERE:PORT as xlane proxy ls shows it (in:/run/netns/app:80, out:/sys/fs/cgroup/xlane:80)", key)
	}
	where, p := rest[:i], rest[i+1:]
	if p != fmt.Sprint(port) {
		return "", model.Fieldf("key", "%q: its port is not %d", key, port)
	}
	if dir == "out" && !filepath.IsAbs(where) {
		root, err := accel.Cgroup2Root()
		if err != nil {
			return "", model.Fieldf("key", "%v", err)
		}
		where = filepath.Join(root, where)
	}
	if dir == "out" {
		where = filepath.Clean(where)
	}
	return dir + ":" + where + ":" + p, nil
}
