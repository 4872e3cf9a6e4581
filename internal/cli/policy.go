package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/xlane-dev/xlane/internal/cnp"
)

func policyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Cluster-wide policies (ClusterNetworkPolicy's Admin and Baseline tiers) without Kubernetes",
		Long: `xlane policy takes Kubernetes' ClusterNetworkPolicy documents
(policy.networking.k8s.io/v1beta1) for the node's endpoints: an endpoint's
labels (xlane endpoint add --label) are a pod's, its network is its
namespace (label kubernetes.io/metadata.name: the network's name). The Admin
tier comes before the node's firewall rules of priority 49999-59999, the
Baseline tier after them; Accept and Deny decide, Pass hands the flow to the
next tier; domainNames peers allow what each endpoint resolved through DNS
(docs/policy.md).`,
		Example: `  cat > admin.yaml <<EOF
  apiVersion: policy.networking.k8s.io/v1beta1
  kind: ClusterNetworkPolicy
  metadata: {name: no-metadata}
  spec:
    tier: Admin
    priority: 10
    subject: {namespaces: {}}
    egress:
    - {name: metadata, action: Deny, to: [{networks: [169.254.169.254/32]}]}
  EOF
  xlane policy apply -f admin.yaml
  xlane policy ls
  xlane policy delete no-metadata`,
	}
	cmd.AddCommand(policyApplyCmd(e), policyLsCmd(e), policyDeleteCmd(e))
	return cmd
}

// readPolicies reads the ClusterNetworkPolicy documents of a YAML (or
// JSON) file, "---"-separated; an unknown field is an error naming the
// document.
func readPolicies(path string) ([]cnp.ClusterNetworkPolicy, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []cnp.ClusterNetworkPolicy
	for n := 1; ; n++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || strings.TrimSpace(string(doc)) == "---" {
			n--
			continue
		}
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		if string(raw) == "null" {
			n--
			continue
		}
		var p cnp.ClusterNetworkPolicy
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("%s: document %d: %s", path, n, strings.TrimPrefix(err.Error(), "json: "))
		}
		if p.APIVersion != cnp.APIVersion || p.Kind != cnp.Kind {
			return nil, fmt.Errorf("%s: document %d: apiVersion %q kind %q: want %s %s", path, n, p.APIVersion, p.Kind, cnp.APIVersion, cnp.Kind)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no ClusterNetworkPolicy in the file", path)
	}
	return out, nil
}

func policyApplyCmd(e *env) *cobra.Command {
	var file string
	var dry bool
	c := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create the file's policies, or replace those of their names (all or none); - reads stdin",
		Long: `Create the policies of FILE, or replace the policies of their names; the
others stay. Every document is validated first: one invalid document (its
error names the document and the field: policies[2] (NAME) spec.egress[0]...,
policies[I] counting from 0 in file order) applies none of them, and the
firewall gets the rules of all of them in one atomic apply.`,
		Example: `  xlane policy apply -f policies.yaml
  xlane policy apply --dry-run -f policies.yaml   # validate only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f: missing: give a file of ClusterNetworkPolicy documents (- for stdin)")
			}
			ps, err := readPolicies(file)
			if err != nil {
				return err
			}
			out, err := e.client().ApplyPolicies(cmd.Context(), ps, dry)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				for _, l := range []struct {
					what  string
					names []string
				}{{"created", out.Created}, {"updated", out.Updated}, {"unchanged", out.Unchanged}} {
					if len(l.names) > 0 {
						fmt.Fprintf(w, "%s:\t%d\t%s\n", l.what, len(l.names), abbrev(l.names, 10))
					}
				}
				for _, s := range out.Warnings {
					fmt.Fprintf(w, "warning:\t%s\n", s)
				}
				if out.Applied {
					fmt.Fprintf(w, "applied: %d firewall rules\n", out.Rules)
				} else {
					fmt.Fprintf(w, "dry run: nothing changed (%d firewall rules)\n", out.Rules)
				}
			})
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "file of ClusterNetworkPolicy documents (YAML, ---separated; - for stdin)")
	c.Flags().BoolVar(&dry, "dry-run", false, "validate only, change nothing")
	return c
}

func abbrev(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, " ")
	}
	return strings.Join(names[:n], " ") + fmt.Sprintf(" ... (%d more)", len(names)-n)
}

func policyLsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the policies with their tier, priority and firewall rules on this node",
		Example: `  xlane policy ls
  xlane policy ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := e.client().Policies(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(ps, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tTIER\tPRIORITY\tINGRESS\tEGRESS\tRULES\tWARNINGS")
				for _, p := range ps {
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.Spec.Tier, p.Spec.Priority, len(p.Spec.Ingress), len(p.Spec.Egress), p.Rules, p.Warnings)
				}
			})
		},
	}
}

func policyDeleteCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Aliases: []string{"rm"},
		Short:   "Delete policies and their firewall rules",
		Example: `  xlane policy delete no-metadata`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := e.client().DeletePolicy(cmd.Context(), n); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
