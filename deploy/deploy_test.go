// Package deploy holds the Kubernetes manifests (kubernetes/*.yaml, the
// image's Dockerfile) and a test that keeps them matching the code: every
// document decodes, the CNI configuration the ConfigMap carries is one
// xlane-cni accepts, and the DaemonSet gives xlaned only flags it has, with
// the socket the CNI configuration calls.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/xlane-dev/xlane/internal/cni"
	"github.com/xlane-dev/xlane/internal/k8s"
	"github.com/xlane-dev/xlane/internal/lbipam"
)

type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data  map[string]string `yaml:"data"`
	Rules []struct {
		APIGroups []string `yaml:"apiGroups"`
		Resources []string `yaml:"resources"`
		Verbs     []string `yaml:"verbs"`
	} `yaml:"rules"`
	Spec struct {
		Template struct {
			Spec struct {
				InitContainers []container `yaml:"initContainers"`
				Containers     []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
}

func objects(t *testing.T) map[string]object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kubernetes/*.yaml (%v)", err)
	}
	out := map[string]object{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: a document without kind or name", f)
			}
			out[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	return out
}

// TestRBAC: the ClusterRole lets xlaned read (get, list, watch) every
// resource Kubernetes mode watches, patch what it writes (k8s.Written:
// ClusterNetworkPolicies' status), update what the LoadBalancer address
// allocator writes (lbipam.Writes: Services' status), and grants nothing
// else.
func TestRBAC(t *testing.T) {
	role, ok := objects(t)["ClusterRole/xlane"]
	if !ok {
		t.Fatal("no ClusterRole/xlane")
	}
	granted := map[string]bool{}
	written := map[string]bool{}
	for _, w := range k8s.Written {
		written[w.Group+"/"+w.Resource] = true
	}
	for i, r := range role.Rules {
		if w := lbipam.Writes; slices.Equal(r.APIGroups, []string{w.Group}) && slices.Equal(r.Resources, []string{w.Resource}) &&
			slices.Equal(r.Verbs, w.Verbs) {
			continue // the LoadBalancer address allocator's write
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				want := "get,list,watch"
				// A resource both watched and written (nodes: the
				// WireGuard key's annotation) has a rule of each.
				if written[g+"/"+res] && strings.Join(r.Verbs, ",") == "patch" {
					want = "patch" // and nothing else: xlaned writes only these
					delete(written, g+"/"+res)
				} else {
					granted[g+"/"+res] = true
				}
				if strings.Join(r.Verbs, ",") != want {
					t.Errorf("ClusterRole rules[%d] %s/%s: verbs %v, want %s", i, g, res, r.Verbs, want)
				}
			}
		}
	}
	for w := range written {
		t.Errorf("ClusterRole: no patch of %s: internal/k8s writes it", w)
	}
	for _, w := range k8s.Watched {
		if !granted[w.Group+"/"+w.Resource] {
			t.Errorf("ClusterRole: no %q in apiGroup %q: internal/k8s watches it", w.Resource, w.Group)
		}
		delete(granted, w.Group+"/"+w.Resource)
	}
	for g := range granted {
		t.Errorf("ClusterRole grants %s, which internal/k8s does not watch", g)
	}
}

// xlanedFlags reads the flag names cmd/xlaned defines (main.go and the
// features' flag files beside it).
func xlanedFlags(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../cmd/xlaned/*.go")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	re := regexp.MustCompile(`fs\.(?:String|Bool|Int|Uint|Duration|Func)\("([a-z0-9-]+)"|fs\.(?:String|Bool|Int|Uint|Duration)?Var\([^,]+, "([a-z0-9-]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			flags[m[1]+m[2]] = true
		}
	}
	for _, f := range []string{"uplink", "hubble", "hubble-socket", "bgp-asn"} {
		if !flags[f] {
			t.Fatalf("read %d flags from cmd/xlaned, not --%s: the pattern no longer matches", len(flags), f)
		}
	}
	return flags
}

func TestManifests(t *testing.T) {
	objs := objects(t)
	for _, want := range []string{"ServiceAccount/xlane", "ClusterRole/xlane", "ClusterRoleBinding/xlane", "ConfigMap/xlane", "DaemonSet/xlane"} {
		if _, ok := objs[want]; !ok {
			t.Errorf("no %s in kubernetes/*.yaml", want)
		}
	}
	cm, ds := objs["ConfigMap/xlane"], objs["DaemonSet/xlane"]

	// The CNI configuration: a conflist whose xlane-cni entry loads.
	raw := cm.Data["10-xlane.conflist"]
	var list struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		t.Fatalf("ConfigMap 10-xlane.conflist: %v", err)
	}
	var socket string
	for _, p := range list.Plugins {
		var m map[string]any
		json.Unmarshal(p, &m)
		if m["type"] != "xlane-cni" {
			continue
		}
		m["cniVersion"], m["name"] = list.CNIVersion, list.Name
		b, _ := json.Marshal(m)
		c, err := cni.LoadConf(b)
		if err != nil {
			t.Fatalf("xlane-cni refuses the ConfigMap's configuration: %v", err)
		}
		socket = c.Socket
	}
	if socket == "" {
		t.Fatal("the ConfigMap's conflist has no xlane-cni plugin")
	}

	// xlaned: flags it has; the socket the plugin calls.
	flags := xlanedFlags(t)
	var xlaned *container
	for i, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "xlaned" {
			xlaned = &ds.Spec.Template.Spec.Containers[i]
		}
	}
	if xlaned == nil {
		t.Fatal("DaemonSet: no xlaned container")
	}
	gotSocket := ""
	for _, a := range xlaned.Args {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("DaemonSet: xlaned has no flag %q", a)
		}
		if name == "socket" {
			gotSocket = val
		}
	}
	if gotSocket != socket {
		t.Errorf("DaemonSet: xlaned serves %q, the CNI configuration calls %q", gotSocket, socket)
	}
	// The installer copies the ConfigMap's key.
	install := strings.Join(ds.Spec.Template.Spec.InitContainers[0].Command, " ")
	if !strings.Contains(install, "/etc/xlane/10-xlane.conflist") || !strings.Contains(install, "xlane-cni") {
		t.Errorf("DaemonSet: the install-cni container does not install the plugin and 10-xlane.conflist: %s", install)
	}
}
