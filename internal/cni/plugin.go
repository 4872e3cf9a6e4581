package cni

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// Funcs are the plugin's commands, for skel.PluginMainFuncs.
func Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: Add, Del: Del, Check: Check, GC: GC, Status: Status}
}

// callTimeout bounds one command's API calls: an ADD that creates a
// network or the first endpoint may wait for xlaned's lock behind other
// changes.
const callTimeout = 2 * time.Minute

func call(c *Conf) (*api.Client, context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	return api.NewClient(c.Socket), ctx, cancel
}

// Add attaches the container (CNI ADD) and prints the result: the
// previous plugin's, if any, with the container's interface, its addresses
// and routes added.
func Add(args *skel.CmdArgs) error {
	c, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	if args.Netns == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "xlane-cni: ADD: CNI_NETNS: missing", "")
	}
	if err := ownNetns(args.Netns); err != nil {
		return err
	}
	ips, mac, err := c.requested(args.Args)
	if err != nil {
		return err
	}
	ports, err := c.ports()
	if err != nil {
		return err
	}
	cl, ctx, cancel := call(c)
	defer cancel()
	ep, err := cl.AddAttachment(ctx, api.AttachmentAdd{
		ContainerID: args.ContainerID, IfName: args.IfName, Netns: args.Netns,
		CNINetwork: c.Name, Network: c.Network, Create: c.create(), IPs: ips, MAC: mac, Ports: ports,
	})
	if err != nil {
		return apiError("ADD", c, err)
	}
	res, err := result(c, args, ep)
	if err != nil {
		return types.NewError(types.ErrInternal, "xlane-cni: ADD: "+err.Error(), "")
	}
	return types.PrintResult(res, c.CNIVersion)
}

// Del removes the attachment and everything it holds (CNI DEL). A missing
// attachment, netns or device is not an error.
func Del(args *skel.CmdArgs) error {
	c, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	cl, ctx, cancel := call(c)
	defer cancel()
	if err := cl.RemoveAttachment(ctx, args.ContainerID, args.IfName); err != nil {
		return apiError("DEL", c, err)
	}
	return nil
}

// Check verifies the attachment against the previous result (CNI CHECK):
// xlaned has it and finds it ready, and the container's interface carries
// the addresses and routes the result lists for it.
func Check(args *skel.CmdArgs) error {
	c, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	if c.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "xlane-cni: CHECK: configuration key \"prevResult\": missing", "")
	}
	prev, err := current.NewResultFromResult(c.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "xlane-cni: CHECK: configuration key \"prevResult\": "+err.Error(), "")
	}
	cl, ctx, cancel := call(c)
	defer cancel()
	ep, err := cl.Attachment(ctx, args.ContainerID, args.IfName)
	if errors.Is(err, model.ErrNotFound) {
		return types.NewError(types.ErrInternal, fmt.Sprintf("xlane-cni: CHECK: container %s interface %s: not attached", args.ContainerID, args.IfName), "")
	}
	if err != nil {
		return apiError("CHECK", c, err)
	}
	if ep.State != "ready" {
		return types.NewError(types.ErrInternal, fmt.Sprintf("xlane-cni: CHECK: endpoint %s: %s", ep.ID, ep.State), "")
	}
	if err := check(args, ep, prev); err != nil {
		return types.NewError(types.ErrInternal, "xlane-cni: CHECK: "+err.Error(), "")
	}
	return nil
}

// GC removes every attachment of this CNI network that is not in
// cni.dev/valid-attachments (none when the key is absent), with everything
// it holds (CNI GC).
func GC(args *skel.CmdArgs) error {
	c, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	req := api.AttachmentGC{CNINetwork: c.Name, Valid: []api.AttachmentKey{}}
	for _, a := range c.ValidAttachments {
		req.Valid = append(req.Valid, api.AttachmentKey{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	cl, ctx, cancel := call(c)
	defer cancel()
	if _, err := cl.GCAttachments(ctx, req); err != nil {
		return apiError("GC", c, err)
	}
	return nil
}

// The spec's STATUS error codes.
const (
	errUnavailable         = 50 // the plugin cannot serve ADD now
	errUnavailableResource = 51 // ... for want of a resource (addresses)
)

// Status says whether an ADD can succeed now (CNI STATUS): 50 while xlaned
// is unreachable, the network is missing and cannot be created, or its
// datapath cannot run; 51 while a subnet has no address left.
func Status(args *skel.CmdArgs) error {
	c, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	cl, ctx, cancel := call(c)
	defer cancel()
	st, err := cl.AttachmentStatus(ctx, c.Network)
	switch {
	case errors.Is(err, api.ErrUnreachable):
		return types.NewError(errUnavailable, fmt.Sprintf("xlane-cni: STATUS: xlaned is not reachable at %s (configuration key \"socket\")", c.Socket), err.Error())
	case err != nil:
		return apiError("STATUS", c, err)
	case st.Missing && (len(c.Subnets) > 0 || st.PodCIDRs):
		return nil // the first ADD creates it
	case st.Exhausted:
		return types.NewError(errUnavailableResource, "xlane-cni: STATUS: "+st.Reason, "")
	case !st.Ready:
		return types.NewError(errUnavailable, "xlane-cni: STATUS: "+st.Reason, "")
	}
	return nil
}
