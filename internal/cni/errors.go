package cni

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// confKeys names, for a field the daemon rejects, the configuration key the
// user wrote it in.
var confKeys = map[string]string{
	"name":        "network",
	"network":     "network",
	"subnets":     "subnets",
	"gateways":    "gateways",
	"mode":        "mode",
	"device":      "device",
	"mtu":         "mtu",
	"masquerade":  "masquerade",
	"cni_network": "name",
	"ips":         "runtimeConfig.ips",
	"mac":         "runtimeConfig.mac",
	"ports":       "runtimeConfig.portMappings",
}

// envVars names, for a field the daemon rejects, the environment variable
// the runtime gave it in.
var envVars = map[string]string{
	"netns":        "CNI_NETNS",
	"ifname":       "CNI_IFNAME",
	"container_id": "CNI_CONTAINERID",
}

// apiError turns an error of an API call into the spec's error: 11 (try
// again later) while xlaned cannot be reached, 7 for a configuration value
// the daemon refuses (naming the key) or a mode or device this node cannot
// run, 4 for a runtime's value it refuses, 999 for the rest.
func apiError(op string, c *Conf, err error) error {
	var fe *model.FieldError
	switch {
	case errors.Is(err, api.ErrUnreachable):
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("xlane-cni: %s: xlaned is not reachable at %s (configuration key \"socket\"): try again later", op, c.Socket), err.Error())
	case errors.As(err, &fe) && envVars[fe.Field] != "":
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("xlane-cni: %s: %s: %s", op, envVars[fe.Field], fe.Reason), "")
	case errors.As(err, &fe):
		key := confKeys[fe.Field]
		if key == "" {
			key = fe.Field
		}
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("xlane-cni: %s: configuration key %q: %s", op, key, fe.Reason), "")
	case errors.Is(err, model.ErrUnavailable):
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("xlane-cni: %s: %v", op, err), "")
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("xlane-cni: %s: %v", op, err), "")
}
