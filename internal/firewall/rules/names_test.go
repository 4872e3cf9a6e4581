package rules

import "testing"

// TestMatch: ClusterNetworkPolicy's DomainName examples (network-policy-api
// v1beta1) and the edges: case, trailing dots, the apex of a wildcard.
func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"kubernetes.io", "kubernetes.io", true},
		{"kubernetes.io", "www.kubernetes.io", false},
		{"kubernetes.io", "my-kubernetes.io", false},
		{"blog.kubernetes.io", "blog.kubernetes.io", true},
		{"blog.kubernetes.io", "kubernetes.io", false},
		{"*.kubernetes.io", "www.kubernetes.io", true},
		{"*.kubernetes.io", "latest.blog.kubernetes.io", true},
		{"*.kubernetes.io", "kubernetes.io", false},
		{"*.kubernetes.io", "wikipedia.org", false},
		{"*.kubernetes.io", "evilkubernetes.io", false},
		{"Kubernetes.IO.", "kubernetes.io", true},
		{"*.Kubernetes.io", "www.kubernetes.io", true},
	} {
		if got := MatchName(c.pattern, CanonicalName(c.name)); got != c.want {
			t.Errorf("MatchName(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

// TestValidName: the API's pattern: "*." only as a prefix, two labels at
// least, no partial wildcards.
func TestValidName(t *testing.T) {
	for _, ok := range []string{"example.com", "*.example.com", "a-b.c_d.example.com.", "EXAMPLE.com"} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "com", "*", "*.com.*", "*example.com", "www.*.example.com", "*.*.example.com", "-a.example.com", "a..example.com", "exa mple.com"} {
		if err := ValidName(bad); err == nil {
			t.Errorf("ValidName(%q): no error", bad)
		}
	}
}
