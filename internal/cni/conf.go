package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// Conf is xlane-cni's network configuration (one plugin of a conflist).
// Every key but type is optional; docs/kubernetes.md is the reference.
type Conf struct {
	types.PluginConf

	// Network is the xlane network to attach to; default: the CNI
	// network's name.
	Network string `json:"network,omitempty"`
	// Subnets, Gateways, Mode, Device, MTU, Masquerade and
	// AllowUnsolicited create the network when it does not exist yet
	// (as `xlane network create` would); Mode and Device are also checked
	// against an existing network. Without Subnets, a node of a cluster
	// takes its pod CIDRs.
	Subnets          []string `json:"subnets,omitempty"`
	Gateways         []string `json:"gateways,omitempty"`
	Mode             string   `json:"mode,omitempty"`
	Device           string   `json:"device,omitempty"`
	MTU              int      `json:"mtu,omitempty"`
	Masquerade       *bool    `json:"masquerade,omitempty"`
	AllowUnsolicited bool     `json:"allowUnsolicited,omitempty"`
	// Socket is xlaned's API socket; default api.DefaultSocket.
	Socket string `json:"socket,omitempty"`

	// RuntimeConfig carries the capabilities the runtime fills in: "ips"
	// (addresses asked for, with or without a prefix length) and "mac".
	RuntimeConfig struct {
		IPs          []string      `json:"ips,omitempty"`
		MAC          string        `json:"mac,omitempty"`
		PortMappings []PortMapping `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	// LegacyAttachments is the GC key libcni also sends under the name an
	// earlier draft of the spec used.
	LegacyAttachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`
}

// PortMapping is an entry of the portMappings capability (Kubernetes'
// hostPort): published by xlane's datapath on the node's addresses.
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

// ports turns the portMappings capability into the API's
// [HOSTIP:]NODEPORT:PORT/PROTO (a hostIP: published on that address
// only); the daemon checks the numbers.
func (c *Conf) ports() ([]string, error) {
	var out []string
	for _, m := range c.RuntimeConfig.PortMappings {
		proto := strings.ToLower(m.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		spec := fmt.Sprintf("%d:%d/%s", m.HostPort, m.ContainerPort, proto)
		if m.HostIP != "" {
			a, err := netip.ParseAddr(m.HostIP)
			if err != nil {
				return nil, invalidf("runtimeConfig.portMappings", "hostIP %q: not an IP address", m.HostIP)
			}
			if !a.IsUnspecified() {
				spec = fmt.Sprintf("%s:%d/%s", netip.AddrPortFrom(a.Unmap(), uint16(m.HostPort)), m.ContainerPort, proto)
			}
		}
		out = append(out, spec)
	}
	return out, nil
}

// LoadConf decodes and checks stdin's configuration. Errors are spec
// errors naming the key: 6 (cannot decode) or 7 (invalid value).
func LoadConf(stdin []byte) (*Conf, error) {
	var c Conf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, decodeError(err)
	}
	if c.Network == "" {
		c.Network = c.Name
	}
	if c.Socket == "" {
		c.Socket = api.DefaultSocket
	}
	if _, err := model.ParseMode(c.Mode); err != nil {
		return nil, invalid("mode", err)
	}
	if _, err := model.ParseDeviceType(c.Device); err != nil {
		return nil, invalid("device", err)
	}
	for _, s := range c.Subnets {
		if _, err := netip.ParsePrefix(s); err != nil {
			return nil, invalidf("subnets", "%q: not a CIDR prefix like 10.1.0.0/24 or fd00:1::/64", s)
		}
	}
	for _, s := range c.Gateways {
		if _, err := netip.ParseAddr(s); err != nil {
			return nil, invalidf("gateways", "%q: not an IP address", s)
		}
	}
	if c.MTU < 0 {
		return nil, invalidf("mtu", "%d: must be positive (0: the network's default)", c.MTU)
	}
	if c.RawPrevResult != nil {
		if err := version.ParsePrevResult(&c.PluginConf); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "xlane-cni: prevResult: "+err.Error(), "")
		}
	}
	if c.ValidAttachments == nil {
		c.ValidAttachments = c.LegacyAttachments
	}
	return &c, nil
}

// create is what ADD sends for the network's creation (and the mode and
// device check of an existing one).
func (c *Conf) create() *api.NetworkCreate {
	return &api.NetworkCreate{Subnets: c.Subnets, Gateways: c.Gateways, Mode: c.Mode, Device: c.Device,
		MTU: c.MTU, Masquerade: c.Masquerade, AllowUnsolicited: c.AllowUnsolicited}
}

// requested returns the addresses and MAC the runtime asks for: the "ips"
// and "mac" capabilities, else CNI_ARGS' IP (comma-separated) and MAC.
func (c *Conf) requested(cniArgs string) (ips []string, mac string, err error) {
	for _, s := range c.RuntimeConfig.IPs {
		a, err := parseIP(s)
		if err != nil {
			return nil, "", invalidf("runtimeConfig.ips", "%q: not an IP address", s)
		}
		ips = append(ips, a)
	}
	mac = c.RuntimeConfig.MAC
	for _, kv := range strings.Split(cniArgs, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "IP" && len(c.RuntimeConfig.IPs) == 0:
			for _, s := range strings.Split(v, ",") {
				a, err := parseIP(s)
				if err != nil {
					return nil, "", types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("xlane-cni: CNI_ARGS IP: %q: not an IP address", s), "")
				}
				ips = append(ips, a)
			}
		case k == "MAC" && mac == "":
			mac = v
		}
	}
	if mac != "" {
		if _, err := net.ParseMAC(mac); err != nil {
			return nil, "", invalidf("runtimeConfig.mac", "%q: not a MAC address", mac)
		}
	}
	return ips, mac, nil
}

// parseIP takes an address with or without a prefix length.
func parseIP(s string) (string, error) {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "/")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

// decodeError names the key whose value did not decode.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("xlane-cni: configuration key %q: want a JSON %s, got %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value), "")
	case errors.As(err, &se):
		return types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("xlane-cni: configuration is not JSON (at byte %d): %v", se.Offset, err), "")
	}
	return types.NewError(types.ErrDecodingFailure, "xlane-cni: decode configuration: "+err.Error(), "")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "uint", "uint32", "float64":
		return "number"
	case "slice":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	case "bool":
		return "boolean"
	}
	return goKind
}

func invalid(key string, err error) error {
	var fe *model.FieldError
	if errors.As(err, &fe) {
		return invalidf(key, "%s", fe.Reason)
	}
	return invalidf(key, "%v", err)
}

func invalidf(key, format string, args ...any) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("xlane-cni: configuration key %q: %s", key, fmt.Sprintf(format, args...)), "")
}
