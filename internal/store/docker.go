package store

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/xlane-dev/xlane/internal/model"
)

// The Docker driver's buckets. They are created on first write, so a state
// file that never served Docker has none.
var (
	bucketDockerNetworks  = []byte("docker_networks")  // Docker network ID -> DockerNetwork (JSON)
	bucketDockerEndpoints = []byte("docker_endpoints") // Docker endpoint ID -> DockerEndpoint (JSON)
)

// DockerNetwork is what the Docker driver remembers of a network Docker
// created: the xlane network behind it and the Docker options that change
// how the driver answers (gateway, interface prefix, ...).
type DockerNetwork struct {
	ID         string            `json:"id"`      // Docker's network ID (64 hex)
	Network    string            `json:"network"` // the xlane network
	Internal   bool              `json:"internal,omitempty"`
	EnableIPv6 bool              `json:"enable_ipv6,omitempty"`
	ICC        bool              `json:"icc"`       // containers may talk to each other
	IfPrefix   string            `json:"if_prefix"` // container interface name prefix (eth)
	Options    map[string]string `json:"options,omitempty"`
	Created    time.Time         `json:"created"`
}

// DockerEndpoint is what the Docker driver remembers of an endpoint. The
// xlane endpoint has the same ID.
type DockerEndpoint struct {
	ID         string `json:"id"`
	NetworkID  string `json:"network_id"`            // Docker's network ID
	SandboxKey string `json:"sandbox_key,omitempty"` // set by Join, cleared by Leave
	// ExposedPorts are the container's exposed ports as Docker sent them
	// (EXPOSE; nothing to do for them unless published).
	ExposedPorts json.RawMessage `json:"exposed_ports,omitempty"`
	// Ports are the ports published for Docker (-p), as xlane's
	// NODEPORT:PORT/PROTO, withdrawn by RevokeExternalConnectivity.
	Ports []string `json:"ports,omitempty"`
	// Relays are the TCP ports Docker binds to one host address (-p
	// 127.0.0.1:8082:80), as HOSTIP:HOSTPORT:PORT/tcp: a relay in xlaned
	// listens there, nothing is published in the datapath.
	Relays  []string  `json:"relays,omitempty"`
	Created time.Time `json:"created"`
}

func (t *Tx) dockerBucket(name []byte) (*bolt.Bucket, error) {
	if t.tx.Writable() {
		return t.tx.CreateBucketIfNotExists(name)
	}
	return t.tx.Bucket(name), nil
}

// DockerNetwork returns the Docker network with id, or model.ErrNotFound.
func (t *Tx) DockerNetwork(id string) (*DockerNetwork, error) {
	b, err := t.dockerBucket(bucketDockerNetworks)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, model.NotFoundf("docker network %q", id)
	}
	return get[DockerNetwork](b, id, "docker network")
}

// DockerNetworks returns every Docker network, by ID.
func (t *Tx) DockerNetworks() ([]DockerNetwork, error) {
	b, err := t.dockerBucket(bucketDockerNetworks)
	if err != nil || b == nil {
		return nil, err
	}
	return list[DockerNetwork](b, "docker network")
}

// PutDockerNetwork creates or replaces n.
func (t *Tx) PutDockerNetwork(n *DockerNetwork) error {
	b, err := t.dockerBucket(bucketDockerNetworks)
	if err != nil {
		return err
	}
	return put(b, n.ID, n)
}

// DeleteDockerNetwork removes a Docker network record. Missing is not an
// error.
func (t *Tx) DeleteDockerNetwork(id string) error {
	b, err := t.dockerBucket(bucketDockerNetworks)
	if err != nil {
		return err
	}
	return b.Delete([]byte(id))
}

// DockerEndpoint returns the Docker endpoint with id, or model.ErrNotFound.
func (t *Tx) DockerEndpoint(id string) (*DockerEndpoint, error) {
	b, err := t.dockerBucket(bucketDockerEndpoints)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, model.NotFoundf("docker endpoint %q", id)
	}
	return get[DockerEndpoint](b, id, "docker endpoint")
}

// DockerEndpoints returns every Docker endpoint, by ID.
func (t *Tx) DockerEndpoints() ([]DockerEndpoint, error) {
	b, err := t.dockerBucket(bucketDockerEndpoints)
	if err != nil || b == nil {
		return nil, err
	}
	return list[DockerEndpoint](b, "docker endpoint")
}

// PutDockerEndpoint creates or replaces e.
func (t *Tx) PutDockerEndpoint(e *DockerEndpoint) error {
	b, err := t.dockerBucket(bucketDockerEndpoints)
	if err != nil {
		return err
	}
	return put(b, e.ID, e)
}

// DeleteDockerEndpoint removes a Docker endpoint record. Missing is not an
// error.
func (t *Tx) DeleteDockerEndpoint(id string) error {
	b, err := t.dockerBucket(bucketDockerEndpoints)
	if err != nil {
		return err
	}
	return b.Delete([]byte(id))
}
