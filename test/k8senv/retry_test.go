package k8senv

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRetry(t *testing.T) {
	gr := schema.GroupResource{Resource: "services"}
	timeout := apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	exists := apierrors.NewAlreadyExists(gr, "s1")
	invalid := apierrors.NewBadRequest("spec.ports[0].port: Invalid value")
	for _, c := range []struct {
		name    string
		errs    []error // what each call returns, in order
		want    error   // nil, or the error Retry must return
		calls   int
		wantErr bool
	}{
		{"first try", []error{nil}, nil, 1, false},
		{"timeout then success", []error{timeout, nil}, nil, 2, false},
		{"timeout then already exists: the first write landed", []error{timeout, exists}, nil, 2, false},
		{"already exists on the first try is an error", []error{exists}, exists, 1, true},
		{"a permanent error is not retried", []error{invalid}, invalid, 1, true},
		{"gives up after 6 tries", []error{timeout, timeout, timeout, timeout, timeout, timeout}, timeout, 6, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := Retry(context.Background(), func() error {
				calls++
				return c.errs[calls-1]
			})
			if calls != c.calls {
				t.Errorf("%d calls, want %d", calls, c.calls)
			}
			if (err != nil) != c.wantErr || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("err %v, want %v", err, c.want)
			}
		})
	}
}
