package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAPIServerURL(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"192.168.50.10:6443", "https://192.168.50.10:6443", ""},
		{"https://api.example:443", "https://api.example:443", ""},
		{"[fd00:50::10]:6443", "https://[fd00:50::10]:6443", ""},
		{"https://[fd00:50::10]:6443/", "https://[fd00:50::10]:6443", ""},
		{"http://192.168.50.10:8080", "", "scheme must be https"},
		{"192.168.50.10", "", "want https://HOST:PORT"},
		{"https://192.168.50.10:6443/api", "", "only a host and port"},
		{"fd00:50::10:6443", "", "--k8s-api-server"},
	} {
		got, err := APIServerURL(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("APIServerURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--k8s-api-server")):
			t.Errorf("APIServerURL(%q) = %q, %v; want an error naming --k8s-api-server with %q", c.in, got, err, c.err)
		}
	}
}

// TestRESTConfigAPIServer: the address replaces the kubeconfig's and the
// in-cluster one, whose service account token and CA stay the pod's.
func TestRESTConfigAPIServer(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.96.0.1:443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	rc, err := RESTConfig(kc, "")
	if err != nil || rc.Host != "https://10.96.0.1:443" {
		t.Fatalf("kubeconfig alone: %v, %v", rc, err)
	}
	rc, err = RESTConfig(kc, "192.168.50.10:6443")
	if err != nil || rc.Host != "https://192.168.50.10:6443" || rc.BearerToken != "secret" {
		t.Fatalf("kubeconfig with --k8s-api-server: host %q, token %q, %v", rc.Host, rc.BearerToken, err)
	}

	oldTok, oldCA := saTokenFile, saCAFile
	t.Cleanup(func() { saTokenFile, saCAFile = oldTok, oldCA })
	saTokenFile, saCAFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := RESTConfig("", "192.168.50.10:6443"); err == nil {
		t.Fatalf("in-cluster without a service account token: no error")
	}
	os.WriteFile(saTokenFile, []byte("tok"), 0o600)
	os.WriteFile(saCAFile, []byte("ca"), 0o600)
	rc, err = RESTConfig("", "[fd00:50::10]:6443")
	if err != nil || rc.Host != "https://[fd00:50::10]:6443" || rc.BearerTokenFile != saTokenFile || rc.TLSClientConfig.CAFile != saCAFile {
		t.Fatalf("in-cluster with --k8s-api-server: %+v, %v", rc, err)
	}
	if _, err := RESTConfig("", "http://x:1"); err == nil || !strings.Contains(err.Error(), "--k8s-api-server") {
		t.Fatalf("a bad address: %v, want an error naming --k8s-api-server", err)
	}
}
