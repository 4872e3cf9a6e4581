package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

func serviceCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "service",
		Aliases: []string{"svc"},
		Short:   "Load-balance a VIP over backends (Maglev, in the datapath)",
		Long: `A service is a VIP:PORT whose new flows the datapath spreads over backends
with Maglev consistent hashing; conntrack keeps each flow on its backend, so
changing the backends never moves an established connection. A backend with
weight 0 is draining: no new flows, its established ones run on.`,
	}
	var req api.ServiceCreate
	create := &cobra.Command{
		Use:   "create NAME --vip IP:PORT[/tcp|udp] --backend IP:PORT[@WEIGHT]...",
		Short: "Create a service",
		Long: `Create a service: connections to VIP (from endpoints, the node and, with
--uplink, off the node) are balanced over the backends with Maglev.

The VIP is one unicast address: the unspecified address (0.0.0.0, ::: it
would take the node's own connections to every local address of the
port), 0.0.0.0/8, broadcast (255.255.255.255, the subnet and broadcast
addresses of a network of this node or of the node's own subnets),
multicast, loopback and link-local addresses are refused.`,
		Example: `  xlane service create web --vip 10.96.0.10:80/tcp --backend 10.10.0.2:8080 --backend 10.10.0.3:8080@2
  xlane service create dns6 --vip [fd00:96::53]:53/udp --backend [fd00:10::5]:53 --affinity`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			s, err := e.client().CreateService(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.print(s, func(w *tabwriter.Writer) { serviceTable(w, []model.Service{*s}) })
		},
	}
	create.Flags().StringVar(&req.VIP, "vip", "", "IP:PORT[/tcp|udp] (IPv6: [ADDR]:PORT)")
	create.Flags().StringSliceVar(&req.Backends, "backend", nil, "IP:PORT[@WEIGHT] (repeatable; weight 0 drains)")
	create.Flags().BoolVar(&req.Affinity, "affinity", false, "send a client's new flows to one backend (ClientIP affinity)")
	create.Flags().IntVar(&req.AffinityTimeout, "affinity-timeout", 0, "with --affinity: seconds a client keeps its backend after its last new flow (0: 10800, at most 86400)")

	var upd api.ServiceUpdate
	update := &cobra.Command{
		Use:   "update NAME --backend IP:PORT[@WEIGHT]...",
		Short: "Replace a service's backends (left out: removed; @0: draining)",
		Example: `  xlane service update web --backend 10.10.0.2:8080 --backend 10.10.0.3:8080
  xlane service update web --backend 10.10.0.2:8080@0 --backend 10.10.0.3:8080   # drain 10.10.0.2
  xlane service update sticky --affinity=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := e.client().UpdateService(cmd.Context(), args[0], upd)
			if err != nil {
				return err
			}
			return e.print(s, func(w *tabwriter.Writer) { serviceTable(w, []model.Service{*s}) })
		},
	}
	update.Flags().StringSliceVar(&upd.Backends, "backend", nil, "IP:PORT[@WEIGHT] (repeatable)")
	var updAffinity bool
	var updTimeout int
	update.Flags().BoolVar(&updAffinity, "affinity", false, "ClientIP affinity on or off (unchanged if not given)")
	update.Flags().IntVar(&updTimeout, "affinity-timeout", 0, "the affinity's timeout in seconds (unchanged if not given)")
	update.PreRun = func(cmd *cobra.Command, _ []string) {
		if cmd.Flags().Changed("affinity") {
			upd.Affinity = &updAffinity
		}
		if cmd.Flags().Changed("affinity-timeout") {
			upd.AffinityTimeout = &updTimeout
		}
	}
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List services",
		Example: `  xlane service ls
  xlane service ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			svcs, err := e.client().Services(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(svcs, func(w *tabwriter.Writer) { serviceTable(w, svcs) })
		},
	}
	inspect := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a service",
		Example: `  xlane service inspect web
  xlane service inspect web -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := e.client().Service(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return e.print(s, func(w *tabwriter.Writer) { serviceTable(w, []model.Service{*s}) })
		},
	}
	rm := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove services (removing a missing one succeeds)",
		Example: `  xlane service rm web
  xlane service rm web sticky`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := e.client().DeleteService(cmd.Context(), n); err != nil {
					return err
				}
			}
			return nil
		},
	}
	var applyFile string
	var prune bool
	apply := &cobra.Command{
		Use:   "apply -f FILE [--prune]",
		Short: "Create or update many services at once, all or none",
		Long: `Create or update (by name) every service of FILE in one transaction: either
all of them are programmed or, on any error (the first bad field is named),
none is. A listed service that exists gets the listed backends and
affinity (its VIP cannot change: remove it first); one that is equal is
left alone. With --prune, services FILE does not list are removed in the
same transaction: FILE is then the whole set, as a controller's full sync.

FILE ("-": standard input) is JSON, a list of services or {"services": [...]},
each as 'service create' takes it:

  [{"name": "web", "vip": "10.96.0.10:80/tcp", "backends": ["10.10.0.2:8080", "10.10.0.3:8080@2"]},
   {"name": "dns6", "vip": "[fd00:96::53]:53/udp", "backends": ["[fd00:10::5]:53"], "affinity": true}]

Programming 10,000 services this way takes about a second; one request per
service costs a store transaction (two fsyncs) each.`,
		Example: `  xlane service apply -f services.json
  generate-services | xlane service apply -f - --prune`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := readServiceApply(cmd.InOrStdin(), applyFile)
			if err != nil {
				return err
			}
			req.Prune = prune
			res, err := e.client().ApplyServices(cmd.Context(), req)
			if err != nil {
				return err
			}
			return e.print(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "%d created, %d updated, %d unchanged, %d deleted; %d services\n",
					res.Created, res.Updated, res.Unchanged, res.Deleted, res.Services)
			})
		},
	}
	apply.Flags().StringVarP(&applyFile, "file", "f", "", "JSON file of services (\"-\": standard input)")
	apply.Flags().BoolVar(&prune, "prune", false, "remove the services FILE does not list")
	apply.MarkFlagRequired("file")
	cmd.AddCommand(create, apply, ls, inspect, update, rm)
	return cmd
}

func serviceTable(w *tabwriter.Writer, svcs []model.Service) {
	fmt.Fprintln(w, "NAME\tVIP\tAFFINITY\tBACKENDS")
	for _, s := range svcs {
		aff := "-"
		if s.Affinity {
			aff = fmt.Sprintf("ClientIP %ds", s.EffectiveAffinityTimeout())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, s.Key(), aff, strings.Join(api.BackendSpecs(s.Backends), ","))
	}
}

// readServiceApply reads an apply file: a JSON list of services or an
// object {"services": [...]}.
func readServiceApply(stdin io.Reader, path string) (api.ServiceApply, error) {
	var req api.ServiceApply
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return req, fmt.Errorf("read services: %w", err)
	}
	raw = bytes.TrimSpace(raw)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if len(raw) > 0 && raw[0] == '[' {
		err = dec.Decode(&req.Services)
	} else {
		err = dec.Decode(&req)
	}
	if err != nil {
		return req, fmt.Errorf("read services from %s: %w (want a JSON list of {name, vip, backends, affinity} or {\"services\": [...]})", path, err)
	}
	return req, nil
}
