package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xlane-dev/xlane/internal/api"
)

func accelCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "accel",
		Short: "Socket acceleration: TCP between local sockets without the TCP/IP stack",
		Long: `Socket acceleration moves data between the two sockets of a TCP connection
on this node directly (sockops + sk_msg + a SOCKHASH) instead of through the
TCP/IP stack twice: process to process over loopback (an app and its sidecar
proxy) and container to container.

It applies to the sockets of the processes in one cgroup (xlane's own,
"xlane" under the cgroup2 mount, unless --cgroup names another; never the
root cgroup), and only to connections whose both ends are in --net (default:
loopback) and, with --port, one of whose ports is listed.

sockmap has a history of kernel bugs, so 'enable' first runs a self-test on
this kernel (docs/accel.md lists the cases): if any case corrupts, loses or
stalls data, acceleration is unavailable on this kernel: 'enable' fails
naming the case and 'status' shows every case. No case can be accepted: a
failing case loses or stalls data for every program that does what it
tests (splice(2), edge-triggered epoll readers such as nginx), and which
programs do is not visible from outside. The daemon tests again at every
start.`,
	}
	var req api.AccelEnable
	var ports []int
	enable := &cobra.Command{
		Use:   "enable",
		Short: "Run the self-test, then accelerate",
		Example: `  xlane accel enable                                  # xlane's cgroup, loopback
  xlane accel enable --cgroup system.slice/app.service --port 8080
  xlane accel enable --net 10.88.0.0/16 --net 127.0.0.0/8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, p := range ports {
				if p <= 0 || p > 65535 {
					return fmt.Errorf("--port %d: not a TCP port", p)
				}
				req.Ports = append(req.Ports, uint16(p))
			}
			st, err := e.client().EnableAccel(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printAccel(e, st)
		},
	}
	enable.Flags().StringVar(&req.Cgroup, "cgroup", "", "cgroup2 path (absolute or under the cgroup2 mount) whose processes are accelerated (default xlane's own, \"xlane\")")
	enable.Flags().StringSliceVar(&req.Nets, "net", nil, "CIDR both ends must be in; repeatable (default 127.0.0.0/8 and ::1/128)")
	enable.Flags().IntSliceVar(&ports, "port", nil, "accelerate only connections with one end on this port; repeatable")
	disable := &cobra.Command{
		Use:     "disable",
		Short:   "Stop accelerating (open connections carry on over the normal path)",
		Example: `  xlane accel disable`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := e.client().DisableAccel(cmd.Context())
			if err != nil {
				return err
			}
			return printAccel(e, st)
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "State, the last self-test case by case, and the counters",
		Example: `  xlane accel status
  xlane accel status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := e.client().AccelStatus(cmd.Context())
			if err != nil {
				return err
			}
			return printAccel(e, st)
		},
	}
	cmd.AddCommand(enable, disable, status)
	return cmd
}

func printAccel(e *env, st *api.AccelStatus) error {
	return e.print(st, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "state:\t%s\n", st.State)
		if st.Reason != "" {
			fmt.Fprintf(w, "reason:\t%s\n", st.Reason)
		}
		if c := st.Config; c != nil {
			fmt.Fprintf(w, "cgroup:\t%s\n", c.Cgroup)
			fmt.Fprintf(w, "nets:\t%v\n", c.Nets)
			if len(c.Ports) > 0 {
				fmt.Fprintf(w, "ports:\t%v\n", c.Ports)
			} else {
				fmt.Fprintf(w, "ports:\tany\n")
			}
		}
		fmt.Fprintf(w, "sockets in map:\t%d\n", st.Sockets)
		names := make([]string, 0, len(st.Counters))
		for n := range st.Counters {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %s:\t%d\n", n, st.Counters[n])
		}
		if r := st.SelfTest; r != nil {
			fmt.Fprintf(w, "self-test:\tkernel %s, %s, %d ms\n", r.Kernel, r.At.Format("2006-01-02 15:04:05Z"), r.Millis)
			if r.Error != "" {
				fmt.Fprintf(w, "  could not run:\t%s\n", r.Error)
			}
			for _, c := range r.Cases {
				res := "pass"
				if !c.OK {
					res = "FAIL: " + c.Error
				}
				fmt.Fprintf(w, "  %s\t%s\t%d ms\n", c.Name, res, c.Millis)
			}
		}
	})
}

func proxyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Transparent redirect of TCP connections to a local proxy",
		Long: `'proxy redirect' sends every TCP connection that a process of the cgroup
makes to --port to a proxy listening on 127.0.0.1 (or ::1) --to instead, as
iptables REDIRECT would, without iptables or conntrack: the proxy learns the
original destination with getsockopt(SOL_IP, SO_ORIGINAL_DST) or
getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST). The proxy must run in the same
cgroup (or below it) and network namespace as its clients.

The proxy's own connections to the original destination are never
redirected again: it is recognised by --exempt mark (its upstream sockets
carry SO_MARK --mark), --exempt uid (it runs as --uid) or --exempt cgroup
(it runs in --exempt-cgroup). With acceleration on, the proxy↔app leg is
accelerated like any loopback connection.

With --direction in, connections arriving at --port in the network
namespace --netns (from other namespaces, from outside, or over loopback)
go to the proxy's listening socket on --to there instead (sk_lookup); the
accepted socket keeps the original destination as its local address, and
SO_ORIGINAL_DST returns it. The proxy must already listen on --to (plain
TCP, not MPTCP), and run in --cgroup or below it.`,
	}
	var r api.ProxyRedirect
	var port, to, mark, uid int
	redirect := &cobra.Command{
		Use:   "redirect",
		Short: "Redirect connections to a port to a local proxy",
		Example: `  xlane proxy redirect --port 80 --to 15001 --exempt uid --uid 1337
  xlane proxy redirect --port 443 --to 15001 --exempt mark --mark 0x539 --cgroup app.slice
  xlane proxy redirect --direction in --netns /run/netns/app --port 80 --to 15006 --exempt uid --uid 1337`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for name, v := range map[string]int{"--port": port, "--to": to} {
				if v <= 0 || v > 65535 {
					return fmt.Errorf("%s %d: not a TCP port", name, v)
				}
			}
			r.Port, r.To, r.Mark, r.UID = uint16(port), uint16(to), uint32(mark), uint32(uid)
			out, err := e.client().AddProxyRedirect(cmd.Context(), r)
			if err != nil {
				return err
			}
			return e.print(out, func(w *tabwriter.Writer) {
				if out.Direction == "in" {
					fmt.Fprintf(w, "redirecting connections arriving at port %d in network namespace %s to the proxy on port %d (proxy in cgroup %s, exempt by %s)\n", out.Port, netnsName(out.Netns), out.To, out.Cgroup, out.Exempt)
				} else {
					fmt.Fprintf(w, "redirecting port %d to local port %d for cgroup %s (proxy exempt by %s)\n", out.Port, out.To, out.Cgroup, out.Exempt)
				}
				if out.Warning != "" {
					fmt.Fprintf(w, "warning: %s\n", out.Warning)
				}
			})
		},
	}
	f := redirect.Flags()
	f.IntVar(&port, "port", 0, "destination TCP port whose connections are redirected")
	f.IntVar(&to, "to", 0, "the proxy's port on loopback")
	f.StringVar(&r.Cgroup, "cgroup", "", "cgroup2 path of the clients (and the proxy) (default xlane's own, \"xlane\")")
	f.StringVar(&r.Direction, "direction", "out", "out: connections the cgroup's processes make; in: connections arriving at --port in --netns")
	f.StringVar(&r.Netns, "netns", "", "with --direction in: the network namespace (path) where the app and the proxy listen (default xlaned's own)")
	f.StringVar(&r.Network, "network", "", "refused, with the reason: a redirect acts in one network namespace (--netns) or on one cgroup (--cgroup), not on an xlane network")
	f.StringVar(&r.Exempt, "exempt", "uid", "how the proxy's own connections are recognised: mark, uid or cgroup")
	f.IntVar(&mark, "mark", 0, "with --exempt mark: the SO_MARK of the proxy's upstream sockets")
	f.IntVar(&uid, "uid", 0, "with --exempt uid: the proxy's uid")
	f.StringVar(&r.ExemptCgroup, "exempt-cgroup", "", "with --exempt cgroup: the proxy's cgroup2 path")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List redirects and their counters",
		Example: `  xlane proxy ls
  xlane proxy ls -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := e.client().ProxyRedirects(cmd.Context())
			if err != nil {
				return err
			}
			return e.print(l, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "KEY\tPORT\tDIRECTION\tTO\tNETNS\tCGROUP\tEXEMPT")
				for _, r := range l.Redirects {
					ex := r.Exempt
					switch r.Exempt {
					case "mark":
						ex += fmt.Sprintf(" %#x", r.Mark)
					case "uid":
						ex += " " + strconv.Itoa(int(r.UID))
					case "cgroup":
						ex += " " + r.ExemptCgroup
					}
					ns := "-"
					if r.Direction == "in" {
						ns = netnsName(r.Netns)
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", r.Key, r.Port, r.Direction, r.To, ns, r.Cgroup, ex)
				}
				for _, n := range []string{"redirected", "exempted", "origdst_found", "origdst_missed", "track_failed",
					"in_redirected", "in_exempted", "in_no_listener", "in_listener_added"} {
					if v, ok := l.Counters[n]; ok {
						fmt.Fprintf(w, "%s:\t%d\n", n, v)
					}
				}
			})
		},
	}
	rm := &cobra.Command{
		Use:   "rm PORT|KEY",
		Short: "Remove a redirect (connections already redirected carry on)",
		Long: `Removes the redirect named by KEY (DIRECTION:WHERE:PORT, the KEY column of
'xlane proxy ls'), or the only redirect of PORT. Where several redirects
share a port (inbound ones in different network namespaces), PORT alone is
refused with their keys.`,
		Example: `  xlane proxy rm 80
  xlane proxy rm in:/run/netns/app:80`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, key := args[0], ""
			if i := strings.LastIndex(args[0], ":"); i >= 0 {
				port, key = args[0][i+1:], args[0]
			}
			p, err := strconv.ParseUint(port, 10, 16)
			if err != nil || p == 0 {
				return fmt.Errorf("PORT|KEY %q: not a TCP port nor a key DIRECTION:WHERE:PORT", args[0])
			}
			return e.client().DeleteProxyRedirect(cmd.Context(), uint16(p), key)
		},
	}
	cmd.AddCommand(redirect, ls, rm)
	return cmd
}

func netnsName(p string) string {
	if p == "" {
		return "(xlaned's)"
	}
	return p
}
