package daemon

import (
	"strings"
	"testing"
	"unicode"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// doubledWord is the first word of msg that repeats the one before it
// ("cgroup cgroup /x: ..."), "" if none.
func doubledWord(msg string) string {
	words := strings.FieldsFunc(msg, func(r rune) bool { return unicode.IsSpace(r) })
	for i := 1; i < len(words); i++ {
		a := strings.TrimFunc(words[i-1], func(r rune) bool { return !unicode.IsLetter(r) })
		b := strings.TrimFunc(words[i], func(r rune) bool { return !unicode.IsLetter(r) })
		// Only plain words: "cgroup:" ends a phrase, "--cgroup" is a flag.
		if a != "" && a == words[i-1] && strings.EqualFold(a, b) {
			return a
		}
	}
	return ""
}

func TestDoubledWord(t *testing.T) {
	for msg, want := range map[string]string{
		"cgroup cgroup /x: no such file":            "cgroup",
		"cgroup /x: no such file":                   "",
		"port 80: port 80 is in use":                "",
		"to 15006: nothing listens on it":           "",
		"network \"blue\": the the subnet overlaps": "the",
	} {
		if got := doubledWord(msg); got != want {
			t.Errorf("doubledWord(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestErrorsRepeatNoWord sends requests that fail, each on one field, and
// fails on a message that says a word twice in a row: a field error whose
// reason starts with the field's name read "cgroup cgroup /x: ...".
func TestErrorsRepeatNoWord(t *testing.T) {
	inNode(t, func(d *Daemon) {
		calls := map[string]func() error{
			"accel enable, no such cgroup": func() error {
				_, err := d.f.Sockets.EnableAccel(api.AccelEnable{Cgroup: "xlt-no-such-cgroup"})
				return err
			},
			"accel enable, a file as cgroup": func() error {
				_, err := d.f.Sockets.EnableAccel(api.AccelEnable{Cgroup: "/etc/hostname"})
				return err
			},
			"proxy redirect, no such cgroup": func() error {
				_, err := d.f.Sockets.AddProxyRedirect(api.ProxyRedirect{Port: 80, To: 15001, Exempt: "uid", UID: 1337, Cgroup: "xlt-no-such-cgroup"})
				return err
			},
			"proxy redirect, no such exempt cgroup": func() error {
				_, err := d.f.Sockets.AddProxyRedirect(api.ProxyRedirect{Port: 80, To: 15001, Exempt: "cgroup", ExemptCgroup: "xlt-no-such-cgroup"})
				return err
			},
			"network, bad subnet": func() error {
				_, err := d.CreateNetwork(api.NetworkCreate{Name: "xlt", Subnets: []string{"10.0.0.0/33"}})
				return err
			},
			"network, bad mode": func() error {
				_, err := d.CreateNetwork(api.NetworkCreate{Name: "xlt", Subnets: []string{"10.77.0.0/24"}, Mode: "fast"})
				return err
			},
			"endpoint, no such network": func() error {
				_, err := d.AddEndpoint(api.EndpointAdd{Network: "xlt-none", Netns: "xlt-none"})
				return err
			},
			"service, bad vip": func() error {
				s, err := api.ServiceCreate{Name: "xlt", VIP: "10.96.0.1", Backends: []string{"10.1.0.2:80"}}.Service()
				if err == nil {
					_, err = d.f.Services.Create(s)
				}
				return err
			},
			"node, bad pod CIDR": func() error {
				_, err := addNode(d, api.NodeAdd{Name: "xlt", Underlay: []string{"192.0.2.9"}, PodCIDRs: []string{"10.244.1.0/33"}})
				return err
			},
		}
		for name, call := range calls {
			err := call()
			if err == nil {
				t.Errorf("%s: succeeded, want an error", name)
				continue
			}
			if w := doubledWord(err.Error()); w != "" {
				t.Errorf("%s: %q says %q twice", name, err, w)
			}
		}
	})
}

// A field error whose reason already starts with the field's name says it
// once.
func TestFieldErrorNamesFieldOnce(t *testing.T) {
	for _, c := range []struct{ field, reason, want string }{
		{"cgroup", "cgroup /x: no such file or directory", "cgroup /x: no such file or directory"},
		{"cgroup", "/x: no such file or directory", "cgroup /x: no such file or directory"},
		{"to", "to 15006: nothing listens on it", "to 15006: nothing listens on it"},
		{"subnet", `"10.0.0.0/33": invalid prefix length`, `subnet "10.0.0.0/33": invalid prefix length`},
	} {
		if got := model.Fieldf(c.field, "%s", c.reason).Error(); got != c.want {
			t.Errorf("Fieldf(%q, %q) = %q, want %q", c.field, c.reason, got, c.want)
		}
	}
}
