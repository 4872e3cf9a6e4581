package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/xlane-dev/xlane/internal/k8s"
)

// The ClusterNetworkPolicy CRD as deploy/kubernetes/crd holds it.
const cnpCRD = "../../deploy/kubernetes/crd/policy.networking.k8s.io_clusternetworkpolicies.yaml"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCNPCRD creates the ClusterNetworkPolicy CRD in cp and waits until
// the API server serves the resource.
func installCNPCRD(t *testing.T, cp *controlPlane) {
	t.Helper()
	raw, err := os.ReadFile(cnpCRD)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("%s: %v", cnpCRD, err)
	}
	ctx := context.Background()
	if _, err := cp.dyn.Resource(crdResource).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the ClusterNetworkPolicy CRD: %v", err)
	}
	waitFor(t, 30*time.Second, "clusternetworkpolicies served", func() bool {
		_, err := cp.dyn.Resource(k8s.CNPResource).List(ctx, metav1.ListOptions{})
		return err == nil
	})
}

// createCNP creates a ClusterNetworkPolicy given as YAML.
func createCNP(t *testing.T, cp *controlPlane, doc string) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if _, err := cp.dyn.Resource(k8s.CNPResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterNetworkPolicy %s: %v", u.GetName(), err)
	}
}

// cnpCondition returns the status and message of a policy's
// k8s.CNPConditionType condition ("" when it has none).
func cnpCondition(t *testing.T, cp *controlPlane, name string) (status, message string) {
	t.Helper()
	u, err := cp.dyn.Resource(k8s.CNPResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == k8s.CNPConditionType {
			s, _ := m["status"].(string)
			msg, _ := m["message"].(string)
			return s, msg
		}
	}
	return "", ""
}
