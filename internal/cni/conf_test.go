package cni

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

func TestLoadConf(t *testing.T) {
	base := `"cniVersion":"1.1.0","name":"pods-net","type":"xlane-cni"`
	for _, tc := range []struct {
		name, conf string
		code       uint   // 0: loads
		key        string // named in the message
	}{
		{"minimal", `{` + base + `}`, 0, ""},
		{"full", `{` + base + `,"network":"pods","subnets":["10.1.0.0/24","fd00:1::/64"],"gateways":["10.1.0.1"],"mode":"tc","device":"auto","mtu":1450,"masquerade":false,"allowUnsolicited":true,"socket":"/run/x.sock"}`, 0, ""},
		{"not JSON", `{` + base, types.ErrDecodingFailure, "not JSON"},
		{"wrong type", `{` + base + `,"mtu":"big"}`, types.ErrDecodingFailure, `"mtu"`},
		{"wrong type in a list", `{` + base + `,"subnets":"10.1.0.0/24"}`, types.ErrDecodingFailure, `"subnets"`},
		{"unknown mode", `{` + base + `,"mode":"fast"}`, types.ErrInvalidNetworkConfig, `"mode"`},
		{"unknown device", `{` + base + `,"device":"tap"}`, types.ErrInvalidNetworkConfig, `"device"`},
		{"bad subnet", `{` + base + `,"subnets":["10.1.0.0/33"]}`, types.ErrInvalidNetworkConfig, `"subnets"`},
		{"bad gateway", `{` + base + `,"gateways":["gw"]}`, types.ErrInvalidNetworkConfig, `"gateways"`},
		{"negative mtu", `{` + base + `,"mtu":-1}`, types.ErrInvalidNetworkConfig, `"mtu"`},
		{"bad prevResult", `{` + base + `,"prevResult":{"ips":"x"}}`, types.ErrDecodingFailure, "prevResult"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConf([]byte(tc.conf))
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("LoadConf: %v", err)
				}
				if c.Network == "" || c.Socket == "" {
					t.Errorf("defaults: network %q socket %q", c.Network, c.Socket)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Msg, tc.key) {
				t.Errorf("LoadConf: %v, want code %d naming %s", err, tc.code, tc.key)
			}
		})
	}
	c, err := LoadConf([]byte(`{` + base + `}`))
	if err != nil || c.Network != "pods-net" || c.Socket != api.DefaultSocket {
		t.Errorf("defaults: %+v %v: want the CNI name as network, the default socket", c, err)
	}
}

func TestRequested(t *testing.T) {
	c, err := LoadConf([]byte(`{"cniVersion":"1.1.0","name":"n","type":"xlane-cni",
		"runtimeConfig":{"ips":["10.1.0.5/24","fd00:1::5"],"mac":"02:00:00:00:00:05",
		"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"TCP"},{"hostPort":53,"containerPort":53,"protocol":"udp","hostIP":"0.0.0.0"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ips, mac, err := c.requested("IgnoreUnknown=1;IP=10.9.9.9;K8S_POD_NAME=x")
	if err != nil || !slices.Equal(ips, []string{"10.1.0.5", "fd00:1::5"}) || mac != "02:00:00:00:00:05" {
		t.Errorf("requested: %v %q %v: the capabilities win over CNI_ARGS", ips, mac, err)
	}
	ports, err := c.ports()
	if err != nil || !slices.Equal(ports, []string{"8080:80/tcp", "53:53/udp"}) {
		t.Errorf("ports: %v %v", ports, err)
	}

	c, _ = LoadConf([]byte(`{"cniVersion":"1.1.0","name":"n","type":"xlane-cni"}`))
	ips, mac, err = c.requested("IP=10.1.0.7,fd00:1::7;MAC=02:00:00:00:00:07")
	if err != nil || !slices.Equal(ips, []string{"10.1.0.7", "fd00:1::7"}) || mac != "02:00:00:00:00:07" {
		t.Errorf("requested from CNI_ARGS: %v %q %v", ips, mac, err)
	}
	var e *types.Error
	if _, _, err := c.requested("IP=ten"); !errors.As(err, &e) || e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, "CNI_ARGS IP") {
		t.Errorf("bad CNI_ARGS IP: %v", err)
	}
	// A hostIP publishes on that address alone (Kubernetes' hostPort
	// with hostIP).
	c.RuntimeConfig.PortMappings = []PortMapping{{HostPort: 80, ContainerPort: 8080, HostIP: "10.0.0.1"},
		{HostPort: 80, ContainerPort: 8080, Protocol: "UDP", HostIP: "fd00::1"}, {HostPort: 81, ContainerPort: 81, HostIP: "::"}}
	if ports, err := c.ports(); err != nil || !slices.Equal(ports, []string{"10.0.0.1:80:8080/tcp", "[fd00::1]:80:8080/udp", "81:81/tcp"}) {
		t.Errorf("hostIP: %v %v", ports, err)
	}
	c.RuntimeConfig.PortMappings = []PortMapping{{HostPort: 80, ContainerPort: 80, HostIP: "node"}}
	if _, err := c.ports(); !errors.As(err, &e) || !strings.Contains(e.Msg, "runtimeConfig.portMappings") {
		t.Errorf("hostIP not an address: %v", err)
	}
}

func TestAPIError(t *testing.T) {
	c := &Conf{Socket: "/run/x.sock"}
	for _, tc := range []struct {
		err  error
		code uint
		msg  string
	}{
		{fmt.Errorf("dial: %w", api.ErrUnreachable), types.ErrTryAgainLater, `"socket"`},
		{&api.RemoteError{Error_: api.Error{Code: api.CodeInvalid, Field: "subnets", Message: "subnets missing"}}, types.ErrInvalidNetworkConfig, `configuration key "subnets"`},
		{&api.RemoteError{Error_: api.Error{Code: api.CodeInvalid, Field: "netns", Message: "netns gone"}}, types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{&api.RemoteError{Error_: api.Error{Code: api.CodeUnavailable, Message: "device netkit: no netkit"}}, types.ErrInvalidNetworkConfig, "netkit"},
		{&api.RemoteError{Error_: api.Error{Code: api.CodeConflict, Message: "taken"}}, types.ErrInternal, "taken"},
		{model.Fieldf("mode", "bad"), types.ErrInvalidNetworkConfig, `configuration key "mode"`},
	} {
		var e *types.Error
		if err := apiError("ADD", c, tc.err); !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Msg, tc.msg) {
			t.Errorf("apiError(%v) = %v, want code %d with %s", tc.err, err, tc.code, tc.msg)
		}
	}
}
