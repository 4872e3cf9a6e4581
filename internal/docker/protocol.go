package docker

// The libnetwork remote driver protocol (moby libnetwork/docs/remote.md and
// libnetwork/drivers/remote/api): JSON over HTTP POST, one path per method,
// Go's default field names on the wire. Written here rather than imported
// from github.com/docker/go-plugins-helpers/network: see docs/docker.md.

// Option keys Docker sets in CreateNetworkRequest.Options.
const (
	optGeneric    = "com.docker.network.generic"     // map of `docker network create -o` options
	optEnableIPv6 = "com.docker.network.enable_ipv6" // bool
	optInternal   = "com.docker.network.internal"    // bool
)

// Keys inside the generic (-o) options this driver understands.
const (
	optMTU          = "com.docker.network.driver.mtu"
	optICC          = "com.docker.network.bridge.enable_icc"
	optIfPrefix     = "com.docker.network.container_iface_prefix"
	optMasquerade   = "com.docker.network.bridge.enable_ip_masquerade"
	optHostBinding  = "com.docker.network.bridge.host_binding_ipv4"
	optGatewayMode4 = "com.docker.network.bridge.gateway_mode_ipv4"
	optGatewayMode6 = "com.docker.network.bridge.gateway_mode_ipv6"
	optMode         = "xlane.mode"
	optIsolated     = "xlane.isolated"
	xlaneOptPrefix  = "xlane."
)

// bridgeOptions are the bridge driver's options that xlane accepts for a
// drop-in switch and ignores, with why.
var bridgeOptions = map[string]string{
	"com.docker.network.bridge.name":           "xlane creates no bridge",
	"com.docker.network.bridge.default_bridge": "xlane is never the default bridge",
	"com.docker.network.bridge.inhibit_ipv4":   "the gateway address lives on the node's lo",
}

// Option keys Docker sets in ProgramExternalConnectivityRequest.Options.
const (
	optPortMap      = "com.docker.network.portmap"
	optExposedPorts = "com.docker.network.endpoint.exposedports"
)

// OptLabel starts the endpoint driver options that give an endpoint a
// label for standalone ClusterNetworkPolicies (docs/policy.md): `docker
// run --network name=NET,driver-opt=xlane.label.app=web` arrives in
// CreateEndpointRequest.Options as "xlane.label.app": "web".
const OptLabel = "xlane.label."

// Static route types of JoinResponse.StaticRoutes.
const (
	routeNextHop   = 0 // Destination via NextHop
	routeConnected = 1 // Destination on the interface itself
)

type errorResponse struct {
	Err string
}

type activateResponse struct {
	Implements []string
}

type capabilitiesResponse struct {
	Scope             string
	ConnectivityScope string
}

type ipamData struct {
	AddressSpace string
	Pool         string         // CIDR
	Gateway      string         // CIDR (address with the pool's length)
	AuxAddresses map[string]any `json:",omitempty"`
}

type createNetworkRequest struct {
	NetworkID string
	Options   map[string]any
	IPv4Data  []ipamData
	IPv6Data  []ipamData
}

type networkRequest struct {
	NetworkID string
}

type endpointInterface struct {
	Address     string `json:",omitempty"` // CIDR
	AddressIPv6 string `json:",omitempty"` // CIDR
	MacAddress  string `json:",omitempty"`
}

type createEndpointRequest struct {
	NetworkID  string
	EndpointID string
	Interface  *endpointInterface
	Options    map[string]any
}

type createEndpointResponse struct {
	Interface *endpointInterface `json:",omitempty"`
}

type endpointRequest struct {
	NetworkID  string
	EndpointID string
}

type endpointInfoResponse struct {
	Value map[string]string
}

type joinRequest struct {
	NetworkID  string
	EndpointID string
	SandboxKey string
	Options    map[string]any
}

type interfaceName struct {
	SrcName   string
	DstPrefix string
}

type staticRoute struct {
	Destination string
	RouteType   int
	NextHop     string `json:",omitempty"`
}

type joinResponse struct {
	InterfaceName         interfaceName
	Gateway               string        `json:",omitempty"`
	GatewayIPv6           string        `json:",omitempty"`
	StaticRoutes          []staticRoute `json:",omitempty"`
	DisableGatewayService bool          `json:",omitempty"`
}

type externalConnectivityRequest struct {
	NetworkID  string
	EndpointID string
	Options    map[string]any
}

type discoveryNotification struct {
	DiscoveryType int
	DiscoveryData any
}

// empty is the body of a successful answer that carries nothing.
type empty struct{}
