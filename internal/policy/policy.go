package policy

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/cnp"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Prefix starts the name of every firewall rule of a standalone policy.
const Prefix = "policy."

// NetworkLabel is the label of a network as a namespace: its name.
const NetworkLabel = "kubernetes.io/metadata.name"

// watchInterval: how often endpoint changes are looked for.
const watchInterval = time.Second

// Firewall is what the policies need of the firewall
// (*control.Firewall).
type Firewall interface {
	ApplyOwned(prefix string, owned []rules.Rule) error
}

// Policies is the feature.
type Policies struct {
	c  core.Core
	fw Firewall
	// mu serialises applies, deletes and recompiles (taken before the
	// core's lock, which ApplyOwned takes).
	mu sync.Mutex
	// endpoints is the fingerprint of the endpoints the firewall's rules
	// were compiled for ("": not compiled yet).
	endpoints string
	// lastErr is the last recompile's error, logged once.
	lastErr string
}

// New makes the feature on c's store, installing rules in fw.
func New(c core.Core, fw Firewall) *Policies { return &Policies{c: c, fw: fw} }

// ValidateEndpoint checks an endpoint's labels and gives them to it
// (core.EndpointValidator).
func (p *Policies) ValidateEndpoint(_ *store.Tx, req *api.EndpointAdd, e *model.Endpoint, _ *model.Network) error {
	for _, k := range slices.Sorted(maps.Keys(req.Labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return model.Fieldf("labels", "%q: not a label key: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(req.Labels[k]); len(errs) > 0 {
			return model.Fieldf("labels."+k, "%q: not a label value: %s", req.Labels[k], strings.Join(errs, "; "))
		}
	}
	e.Labels = maps.Clone(req.Labels)
	return nil
}

// Start compiles the stored policies for the endpoints there are and
// follows endpoint changes until the core is done.
func (p *Policies) Start() {
	p.logSync()
	go func() {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		for {
			select {
			case <-p.c.Done():
				return
			case <-t.C:
				p.logSync()
			}
		}
	}()
}

// logSync is sync with its error logged when it is a new one (a firewall
// that refuses the rules is retried every second, logged once).
func (p *Policies) logSync() {
	err := p.sync()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != p.lastErr && err != nil {
		p.c.Log().Error("policy: compile for the endpoints", "err", err)
	}
	p.lastErr = msg
}

// state is what a compile reads of the store.
type state struct {
	policies []cnp.ClusterNetworkPolicy
	in       cnp.Input
	print    string // the endpoints' fingerprint
}

func (p *Policies) read() (*state, error) { return p.readState(true) }

// readState reads the endpoints and networks, and the policies if asked
// (their decoding is the cost of a read: the endpoints' fingerprint
// alone is enough to know that nothing needs compiling).
func (p *Policies) readState(policies bool) (*state, error) {
	st := &state{in: cnp.Input{Namespaces: map[string]labels.Set{}, Prefix: Prefix}}
	var b strings.Builder
	err := p.c.Store().View(func(tx *store.Tx) error {
		var err error
		if policies {
			if st.policies, err = tx.Policies(); err != nil {
				return err
			}
		}
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		for _, n := range nets {
			st.in.Namespaces[n.Name] = labels.Set{NetworkLabel: n.Name}
		}
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			st.in.Workloads = append(st.in.Workloads, cnp.Workload{Namespace: e.Network, Name: e.ID, Labels: labels.Set(e.Labels), Addrs: e.IPs})
			fmt.Fprintf(&b, "%s/%s %v %v\n", e.Network, e.ID, e.IPs, labels.Set(e.Labels))
		}
		return nil
	})
	slices.SortFunc(st.in.Workloads, func(a, b cnp.Workload) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	st.print = b.String()
	return st, err
}

// compile compiles ps for st's endpoints.
func (st *state) compile(ps []cnp.ClusterNetworkPolicy) ([]rules.Rule, []cnp.Status) {
	in := st.in
	in.Policies = make([]*cnp.ClusterNetworkPolicy, len(ps))
	for i := range ps {
		in.Policies[i] = &ps[i]
	}
	return cnp.Compile(in)
}

// sync compiles the stored policies again when the endpoints changed.
func (p *Policies) sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, err := p.readState(false); err != nil || st.print == p.endpoints {
		return err
	}
	st, err := p.read()
	if err != nil {
		return err
	}
	rs, _ := st.compile(st.policies)
	if err := p.fw.ApplyOwned(Prefix, rs); err != nil {
		return err
	}
	p.endpoints = st.print
	return nil
}

// Apply creates the policies of req, or replaces those of their names;
// the others stay. Nothing changes unless every one is valid and the
// firewall takes the rules of them all.
func (p *Policies) Apply(req api.PolicyApply) (*api.PolicyApplied, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, err := p.read()
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for i, d := range req.Policies {
		f := fmt.Sprintf("policies[%d]", i)
		switch {
		case d.APIVersion != "" && d.APIVersion != cnp.APIVersion:
			return nil, model.Fieldf(f+".apiVersion", "%q: want %s", d.APIVersion, cnp.APIVersion)
		case d.Kind != "" && d.Kind != cnp.Kind:
			return nil, model.Fieldf(f+".kind", "%q: want %s", d.Kind, cnp.Kind)
		case d.Name == "":
			return nil, model.Fieldf(f+".metadata.name", "missing")
		}
		if errs := validation.IsDNS1123Subdomain(d.Name); len(errs) > 0 {
			return nil, model.Fieldf(f+".metadata.name", "%q: %s", d.Name, strings.Join(errs, "; "))
		}
		if j, ok := seen[d.Name]; ok {
			return nil, model.Fieldf(f+".metadata.name", "%q: policies[%d] has it too", d.Name, j)
		}
		seen[d.Name] = i
	}
	// Each document alone first, so that an error names the one at
	// fault (its index in the request), then the set they make.
	out := &api.PolicyApplied{}
	next := slices.DeleteFunc(slices.Clone(st.policies), func(q cnp.ClusterNetworkPolicy) bool { _, ok := seen[q.Name]; return ok })
	for i, d := range req.Policies {
		if _, sts := st.compile([]cnp.ClusterNetworkPolicy{d}); !sts[0].Accepted {
			return nil, model.Fieldf(fmt.Sprintf("policies[%d] (%s)", i, d.Name), "%s", sts[0].Message)
		}
		d := clean(d)
		j := slices.IndexFunc(st.policies, func(q cnp.ClusterNetworkPolicy) bool { return q.Name == d.Name })
		switch {
		case j < 0:
			out.Created = append(out.Created, d.Name)
		case reflect.DeepEqual(st.policies[j], d):
			out.Unchanged = append(out.Unchanged, d.Name)
		default:
			out.Updated = append(out.Updated, d.Name)
		}
		next = append(next, d)
	}
	slices.SortFunc(next, func(a, b cnp.ClusterNetworkPolicy) int { return cmp.Compare(a.Name, b.Name) })
	rs, sts := st.compile(next)
	for _, s := range sts {
		if _, ok := seen[s.Name]; ok && s.Message != "" {
			out.Warnings = append(out.Warnings, s.Name+": "+s.Message)
		}
	}
	out.Rules = len(rs)
	if req.DryRun {
		return out, nil
	}
	if err := p.install(st, next, rs); err != nil {
		return nil, err
	}
	out.Applied = true
	p.c.Log().Info("policies applied", "created", len(out.Created), "updated", len(out.Updated),
		"unchanged", len(out.Unchanged), "policies", len(next), "rules", len(rs))
	return out, nil
}

// install puts rs in the firewall and next in the store; if the store
// refuses, the firewall gets its rules back.
func (p *Policies) install(st *state, next []cnp.ClusterNetworkPolicy, rs []rules.Rule) error {
	if err := p.fw.ApplyOwned(Prefix, rs); err != nil {
		return err
	}
	if err := p.c.Store().Update(func(tx *store.Tx) error { return tx.PutPolicies(next) }); err != nil {
		old, _ := st.compile(st.policies)
		if rerr := p.fw.ApplyOwned(Prefix, old); rerr != nil {
			p.c.Log().Error("policy: roll back the firewall", "err", rerr)
		}
		return err
	}
	p.endpoints = st.print
	return nil
}

// clean keeps of a document what a policy is: its name and spec.
func clean(d cnp.ClusterNetworkPolicy) cnp.ClusterNetworkPolicy {
	var c cnp.ClusterNetworkPolicy
	c.APIVersion, c.Kind, c.Name, c.Spec = cnp.APIVersion, cnp.Kind, d.Name, d.Spec
	return c
}

// List returns the policies, by name, with what they compile to now.
func (p *Policies) List() ([]api.PolicyInfo, error) {
	st, err := p.read()
	if err != nil {
		return nil, err
	}
	rs, sts := st.compile(st.policies)
	count := map[string]int{}
	for _, r := range rs {
		// Comments are "ClusterNetworkPolicy NAME tier ...".
		if f := strings.Fields(r.Comment); len(f) > 1 {
			count[f[1]]++
		}
	}
	out := make([]api.PolicyInfo, 0, len(st.policies))
	for i, q := range st.policies {
		out = append(out, api.PolicyInfo{ClusterNetworkPolicy: q, Rules: count[q.Name], Warnings: sts[i].Message})
	}
	return out, nil
}

// Delete deletes a policy and its rules.
func (p *Policies) Delete(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, err := p.read()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st.policies, func(q cnp.ClusterNetworkPolicy) bool { return q.Name == name })
	if i < 0 {
		return model.NotFoundf("policy %q", name)
	}
	next := slices.Delete(slices.Clone(st.policies), i, i+1)
	rs, _ := st.compile(next)
	if err := p.install(st, next, rs); err != nil {
		return err
	}
	p.c.Log().Info("policy deleted", "policy", name, "rules", len(rs))
	return nil
}
