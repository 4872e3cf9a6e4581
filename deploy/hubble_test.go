package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/xlane-dev/xlane/test/k8senv"
)

// decodeAll reads every object of the files matching glob.
func decodeAll(t *testing.T, glob string) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s (%v)", glob, err)
	}
	var out []runtime.Object
	for _, f := range files {
		objs, err := k8senv.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, objs...)
	}
	return out
}

// TestHubbleManifests: kubernetes/hubble installs the stock Hubble Relay
// of the release go.mod requires, with no Kubernetes API rights at all (a
// ServiceAccount without roles or a token), its TLS files from the
// Secret it mounts; the Peer service it asks reaches the DaemonSet's
// xlaned; and the DaemonSet's hubble flags take their values from keys
// the ConfigMap has, the certificates from the Secret it mounts.
func TestHubbleManifests(t *testing.T) {
	var (
		sa     *corev1.ServiceAccount
		relay  *appsv1.Deployment
		peer   *corev1.Service
		relayS *corev1.Service
	)
	for _, o := range decodeAll(t, "kubernetes/hubble/*.yaml") {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *appsv1.Deployment:
			relay = o
		case *corev1.Service:
			switch o.Name {
			case "hubble-peer":
				peer = o
			case "hubble-relay":
				relayS = o
			}
		case *rbacv1.Role, *rbacv1.ClusterRole, *rbacv1.RoleBinding, *rbacv1.ClusterRoleBinding:
			t.Errorf("kubernetes/hubble: %T: Relay needs no rights in the Kubernetes API", o)
		default:
			t.Errorf("kubernetes/hubble: unexpected %T", o)
		}
	}
	if sa == nil || relay == nil || peer == nil || relayS == nil {
		t.Fatalf("kubernetes/hubble: want ServiceAccount, Deployment hubble-relay, Services hubble-peer and hubble-relay")
	}
	// No rights: no token, and no binding anywhere names its account.
	spec := relay.Spec.Template.Spec
	noToken := func(b *bool) bool { return b != nil && !*b }
	if !noToken(sa.AutomountServiceAccountToken) || !noToken(spec.AutomountServiceAccountToken) || spec.ServiceAccountName != sa.Name {
		t.Errorf("Relay's pod: service account %q, no token in the account %v, in the pod %v: want %s, no token in either",
			spec.ServiceAccountName, noToken(sa.AutomountServiceAccountToken), noToken(spec.AutomountServiceAccountToken), sa.Name)
	}
	for _, o := range decodeAll(t, "kubernetes/*.yaml") {
		var subjects []rbacv1.Subject
		switch o := o.(type) {
		case *rbacv1.RoleBinding:
			subjects = o.Subjects
		case *rbacv1.ClusterRoleBinding:
			subjects = o.Subjects
		}
		for _, s := range subjects {
			if s.Name == sa.Name {
				t.Errorf("%T binds %s: Relay needs no rights", o, s.Name)
			}
		}
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("Relay's pod: %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	version := "none"
	if m := regexp.MustCompile(`(?m)^\s*github.com/cilium/cilium (v\S+)`).FindSubmatch(gomod); m != nil {
		version = string(m[1])
	}
	if c.Image != "quay.io/cilium/hubble-relay:"+version {
		t.Errorf("Relay's image %s: want quay.io/cilium/hubble-relay at the github.com/cilium/cilium go.mod requires (%s)", c.Image, version)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("Relay's container security context %+v: want a read-only root, no privilege escalation, no capabilities", sc)
	}
	// The peer service is hubble-peer's port; the TLS files are the
	// client Secret's, where it is mounted.
	args := flagValues(c.Args[1:])
	if want := "hubble-peer.kube-system.svc.cluster.local:443"; args["--peer-service"] != want || peer.Spec.Ports[0].Port != 443 {
		t.Errorf("Relay's --peer-service %q, hubble-peer's port %d: want %s", args["--peer-service"], peer.Spec.Ports[0].Port, want)
	}
	tls := volumeMount(t, spec, c, "hubble-relay-client-certs")
	for flag, file := range map[string]string{"--tls-hubble-client-cert-file": "tls.crt", "--tls-hubble-client-key-file": "tls.key",
		"--tls-hubble-server-ca-files": "ca.crt"} {
		if args[flag] != tls+"/"+file {
			t.Errorf("Relay's %s %q: want %s/%s (the Secret hubble-relay-client-certs)", flag, args[flag], tls, file)
		}
	}
	if _, ok := args["--disable-client-tls"]; ok {
		t.Error("Relay reads the nodes without TLS")
	}
	if relayS.Spec.Ports[0].TargetPort.IntValue() != 4245 || !strings.HasSuffix(args["--listen-address"], ":4245") {
		t.Errorf("Service hubble-relay targets %v, Relay listens on %q: want 4245", relayS.Spec.Ports[0].TargetPort, args["--listen-address"])
	}

	// hubble-peer reaches the DaemonSet's xlaned at its Hubble port.
	var ds *appsv1.DaemonSet
	var cm *corev1.ConfigMap
	for _, o := range decodeAll(t, "kubernetes/*.yaml") {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			ds = o
		case *corev1.ConfigMap:
			cm = o
		}
	}
	for k, v := range peer.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("hubble-peer selects %s=%s, the DaemonSet's pods are %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if peer.Spec.Ports[0].TargetPort.IntValue() != 4244 {
		t.Errorf("hubble-peer targets %v, want xlaned's 4244 (hubble-listen-address :4244)", peer.Spec.Ports[0].TargetPort)
	}
	var xlaned corev1.Container
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "xlaned" {
			xlaned = c
		}
	}
	dsArgs := flagValues(xlaned.Args)
	for flag, env := range map[string]string{"--hubble": "HUBBLE", "--hubble-listen-address": "HUBBLE_LISTEN_ADDRESS"} {
		if dsArgs[flag] != "$("+env+")" {
			t.Errorf("DaemonSet: xlaned %s=%q, want $(%s)", flag, dsArgs[flag], env)
		}
		i := slices.IndexFunc(xlaned.Env, func(e corev1.EnvVar) bool { return e.Name == env })
		if i < 0 || xlaned.Env[i].ValueFrom == nil || xlaned.Env[i].ValueFrom.ConfigMapKeyRef == nil {
			t.Errorf("DaemonSet: no %s from the ConfigMap", env)
			continue
		}
		if _, ok := cm.Data[xlaned.Env[i].ValueFrom.ConfigMapKeyRef.Key]; !ok {
			t.Errorf("DaemonSet: %s from ConfigMap key %q, which it does not have", env, xlaned.Env[i].ValueFrom.ConfigMapKeyRef.Key)
		}
	}
	if cm.Data["hubble"] != "false" {
		t.Errorf("ConfigMap hubble %q: want false (the monitor's cost is the operator's choice)", cm.Data["hubble"])
	}
	srv := volumeMount(t, ds.Spec.Template.Spec, xlaned, "hubble-server-certs")
	for flag, file := range map[string]string{"--hubble-tls-cert": "tls.crt", "--hubble-tls-key": "tls.key", "--hubble-tls-client-ca": "ca.crt"} {
		if dsArgs[flag] != srv+"/"+file {
			t.Errorf("DaemonSet: xlaned %s=%q, want %s/%s (the Secret hubble-server-certs)", flag, dsArgs[flag], srv, file)
		}
	}
}

// flagValues maps each --flag=value argument's flag to its value.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		out[k] = v
	}
	return out
}

// volumeMount is where container c of spec mounts the Secret named.
func volumeMount(t *testing.T, spec corev1.PodSpec, c corev1.Container, secret string) string {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				return m.MountPath
			}
		}
	}
	t.Fatalf("container %s mounts no Secret %s", c.Name, secret)
	return ""
}
