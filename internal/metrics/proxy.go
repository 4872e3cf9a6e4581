package metrics

// proxyUnits: the units of enum proxy_stat's counters (accel.go says how
// the socket layer's counters become metrics).
var proxyUnits = map[string]unit{
	"redirected":        {ProxyConnections, []string{"out", "redirected"}},
	"exempted":          {ProxyConnections, []string{"out", "exempted"}},
	"track_failed":      {ProxyConnections, []string{"out", "track_failed"}},
	"in_redirected":     {ProxyConnections, []string{"in", "redirected"}},
	"in_exempted":       {ProxyConnections, []string{"in", "exempted"}},
	"in_no_listener":    {ProxyConnections, []string{"in", "no_listener"}},
	"origdst_found":     {ProxyOrigDst, []string{"found"}},
	"origdst_missed":    {ProxyOrigDst, []string{"missed"}},
	"in_listener_added": {ProxyListeners, nil},
}
