package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/model"
)

// Client talks to xlaned over its unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// ErrUnreachable: the daemon's socket cannot be reached (xlaned is not
// running, or not yet serving).
var ErrUnreachable = errors.New("xlaned unreachable")

type unreachable struct{ err error }

func (u unreachable) Error() string        { return u.err.Error() }
func (u unreachable) Unwrap() error        { return u.err }
func (u unreachable) Is(target error) bool { return target == ErrUnreachable }

// RemoteError is an error the daemon returned. It unwraps to the model
// sentinel matching its code, and to a *model.FieldError when it names one.
type RemoteError struct {
	Status int
	Error_ Error
}

func (e *RemoteError) Error() string { return e.Error_.Message }

func (e *RemoteError) Unwrap() []error {
	var errs []error
	switch e.Error_.Code {
	case CodeNotFound:
		errs = append(errs, model.ErrNotFound)
	case CodeConflict:
		errs = append(errs, model.ErrConflict)
	case CodeUnavailable:
		errs = append(errs, model.ErrUnavailable)
	}
	if e.Error_.Field != "" {
		errs = append(errs, &model.FieldError{Field: e.Error_.Field, Reason: e.Error_.Message})
	}
	return errs
}

// send sends req with hc. A daemon that cannot be reached is an error
// saying so (unreachable); a status of 300 or more is a *RemoteError (the
// body closed). Otherwise the caller closes the response's body.
func (c *Client) send(hc *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return nil, fmt.Errorf("cannot reach xlaned at %s (is it running? set --socket or XLANE_SOCKET): %w", c.socket, unreachable{err})
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var eb ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Error.Message == "" {
			return nil, &RemoteError{Status: resp.StatusCode, Error_: Error{Code: CodeInternal, Message: resp.Status}}
		}
		return nil, &RemoteError{Status: resp.StatusCode, Error_: eb.Error}
	}
	return resp, nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://xlane"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.send(c.http, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode response of %s %s: %w", method, path, err)
	}
	return nil
}

// CreateNetwork creates a network.
func (c *Client) CreateNetwork(ctx context.Context, req NetworkCreate) (*NetworkInfo, error) {
	var out NetworkInfo
	return &out, c.do(ctx, http.MethodPost, PathNetworks, req, &out)
}

// UpdateNetwork changes a network (its mode) in place.
func (c *Client) UpdateNetwork(ctx context.Context, name string, req NetworkUpdate) (*NetworkInfo, error) {
	var out NetworkInfo
	return &out, c.do(ctx, http.MethodPatch, PathNetworks+"/"+url.PathEscape(name), req, &out)
}

// Networks lists networks.
func (c *Client) Networks(ctx context.Context) ([]NetworkInfo, error) {
	var out []NetworkInfo
	return out, c.do(ctx, http.MethodGet, PathNetworks, nil, &out)
}

// Network returns one network.
func (c *Client) Network(ctx context.Context, name string) (*NetworkInfo, error) {
	var out NetworkInfo
	return &out, c.do(ctx, http.MethodGet, PathNetworks+"/"+url.PathEscape(name), nil, &out)
}

// DeleteNetwork deletes a network; deleting a missing one succeeds. With
// force, its endpoints are removed first.
func (c *Client) DeleteNetwork(ctx context.Context, name string, force bool) error {
	p := PathNetworks + "/" + url.PathEscape(name)
	if force {
		p += "?force=true"
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil)
}

// AddEndpoint creates an endpoint.
func (c *Client) AddEndpoint(ctx context.Context, req EndpointAdd) (*EndpointInfo, error) {
	var out EndpointInfo
	return &out, c.do(ctx, http.MethodPost, PathEndpoints, req, &out)
}

// Endpoints lists endpoints, of one network when network is not "".
func (c *Client) Endpoints(ctx context.Context, network string) ([]EndpointInfo, error) {
	var out []EndpointInfo
	p := PathEndpoints
	if network != "" {
		p += "?network=" + url.QueryEscape(network)
	}
	return out, c.do(ctx, http.MethodGet, p, nil, &out)
}

// Endpoint returns one endpoint with its counters.
func (c *Client) Endpoint(ctx context.Context, id string) (*EndpointInfo, error) {
	var out EndpointInfo
	return &out, c.do(ctx, http.MethodGet, PathEndpoints+"/"+url.PathEscape(id), nil, &out)
}

// DeleteEndpoint removes an endpoint; removing a missing one succeeds.
func (c *Client) DeleteEndpoint(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, PathEndpoints+"/"+url.PathEscape(id), nil, nil)
}

// PublishPorts publishes (or withdraws) an endpoint's ports.
func (c *Client) PublishPorts(ctx context.Context, id string, ports []string, withdraw bool) (*EndpointInfo, error) {
	var out EndpointInfo
	method := http.MethodPost
	if withdraw {
		method = http.MethodDelete
	}
	return &out, c.do(ctx, method, PathEndpoints+"/"+url.PathEscape(id)+"/ports", PortsUpdate{Ports: ports}, &out)
}

// Flows lists conntrack entries (limit 0: all).
func (c *Client) Flows(ctx context.Context, limit int) ([]Flow, error) {
	var out []Flow
	return out, c.do(ctx, http.MethodGet, fmt.Sprintf("%s?limit=%d", PathConntrack, limit), nil, &out)
}

// FlushFlows deletes every conntrack entry and says how many went.
func (c *Client) FlushFlows(ctx context.Context) (int, error) {
	var out map[string]int
	err := c.do(ctx, http.MethodDelete, PathConntrack, nil, &out)
	return out["deleted"], err
}

// CTStats summarises the conntrack table.
func (c *Client) CTStats(ctx context.Context) (*CTStats, error) {
	var out CTStats
	return &out, c.do(ctx, http.MethodGet, PathConntrack+"/stats", nil, &out)
}

// CreateService creates a load-balanced VIP.
func (c *Client) CreateService(ctx context.Context, req ServiceCreate) (*model.Service, error) {
	var out model.Service
	return &out, c.do(ctx, http.MethodPost, PathServices, req, &out)
}

// ApplyServices creates or updates services in one transaction.
func (c *Client) ApplyServices(ctx context.Context, req ServiceApply) (*model.ServiceApplyResult, error) {
	var out model.ServiceApplyResult
	return &out, c.do(ctx, http.MethodPost, PathServicesApply, req, &out)
}

// UpdateService replaces a service's backends.
func (c *Client) UpdateService(ctx context.Context, name string, req ServiceUpdate) (*model.Service, error) {
	var out model.Service
	return &out, c.do(ctx, http.MethodPatch, PathServices+"/"+url.PathEscape(name), req, &out)
}

// Services lists services.
func (c *Client) Services(ctx context.Context) ([]model.Service, error) {
	var out []model.Service
	return out, c.do(ctx, http.MethodGet, PathServices, nil, &out)
}

// Service returns one service.
func (c *Client) Service(ctx context.Context, name string) (*model.Service, error) {
	var out model.Service
	return &out, c.do(ctx, http.MethodGet, PathServices+"/"+url.PathEscape(name), nil, &out)
}

// DeleteService removes a service; removing a missing one succeeds.
func (c *Client) DeleteService(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, PathServices+"/"+url.PathEscape(name), nil, nil)
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var out Status
	return &out, c.do(ctx, http.MethodGet, PathStatus, nil, &out)
}

// AddNode adds a node of the cluster.
func (c *Client) AddNode(ctx context.Context, req NodeAdd) (*model.Node, error) {
	var out model.Node
	return &out, c.do(ctx, http.MethodPost, PathNodes, req, &out)
}

// Nodes lists the nodes.
func (c *Client) Nodes(ctx context.Context) ([]model.Node, error) {
	var out []model.Node
	return out, c.do(ctx, http.MethodGet, PathNodes, nil, &out)
}

// Node returns one node.
func (c *Client) Node(ctx context.Context, name string) (*model.Node, error) {
	var out model.Node
	return &out, c.do(ctx, http.MethodGet, PathNodes+"/"+url.PathEscape(name), nil, &out)
}

// UpdateNode changes a peer's WireGuard public key in place.
func (c *Client) UpdateNode(ctx context.Context, name string, req NodeUpdate) (*model.Node, error) {
	var out model.Node
	return &out, c.do(ctx, http.MethodPatch, PathNodes+"/"+url.PathEscape(name), req, &out)
}

// RotateKey gives this node a new WireGuard key pair; the answer has the
// new public key (never the private one).
func (c *Client) RotateKey(ctx context.Context) (*EncryptionInfo, error) {
	var out EncryptionInfo
	return &out, c.do(ctx, http.MethodPost, PathRotateKey, nil, &out)
}

// DeleteNode removes a node (missing is fine).
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, PathNodes+"/"+url.PathEscape(name), nil, nil)
}

// Monitor streams the daemon's monitor events matching q to fn (the first
// is a "stats" line, sent once the subscription is in place) until ctx
// ends or fn returns an error, which Monitor returns.
func (c *Client) Monitor(ctx context.Context, q MonitorQuery, fn func(MonitorEvent) error) error {
	return c.MonitorLines(ctx, q, func(line []byte, _ bool) error {
		var ev MonitorEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("read monitor stream: %w", err)
		}
		return fn(ev)
	})
}

// MonitorLines is Monitor without decoding: fn gets each event as the
// daemon wrote it (one JSON object, without its newline; valid until fn
// returns) and whether more of the stream is already buffered, so that a
// caller writing them out can flush once per batch the daemon sent
// (every 100 ms) rather than once per event.
func (c *Client) MonitorLines(ctx context.Context, q MonitorQuery, fn func(line []byte, more bool) error) error {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("types", strings.Join(q.Types, ","))
	set("reasons", strings.Join(q.Reasons, ","))
	set("endpoint", q.Endpoint)
	set("network", q.Network)
	set("addr", q.Addr)
	set("proto", q.Proto)
	if q.Port != 0 {
		v.Set("port", strconv.Itoa(int(q.Port)))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://xlane"+PathMonitor+"?"+v.Encode(), nil)
	if err != nil {
		return err
	}
	// A stream has no deadline: the client's Timeout would cut it.
	stream := &http.Client{Transport: c.http.Transport}
	resp, err := c.send(stream, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var long []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) { // a line longer than the buffer
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			if ferr := fn(line, br.Buffered() > 0); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read monitor stream: %w", err)
		}
	}
}

// MonitorLineType is the "type" of an event line as the daemon writes it
// (its second field, after "time"): "stats", "drop", ...; "" if the line
// is not one.
func MonitorLineType(line []byte) string {
	const key = `"type":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// Trace runs a packet through the datapath's programs (on copies of its
// state) and returns what each would do.
func (c *Client) Trace(ctx context.Context, req TraceRequest) (*TraceResult, error) {
	var out TraceResult
	return &out, c.do(ctx, http.MethodPost, PathTrace, req, &out)
}
