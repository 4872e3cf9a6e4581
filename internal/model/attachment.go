package model

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// Attachment is what a CNI runtime knows an endpoint by: the container and
// the interface name inside it (the spec's attachment key), and the CNI
// network (the conflist's name) that added it, which its GC is scoped to.
type Attachment struct {
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
	CNINetwork  string `json:"cni_network"`
}

// containerIDRE is the spec's container ID: alphanumeric plus '_', '.', '-'
// (libcni refuses anything else).
var containerIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidContainerID checks a CNI container ID.
func ValidContainerID(id string) error {
	if !containerIDRE.MatchString(id) {
		return Fieldf("container_id", "%q: must be letters, digits, '_', '.' or '-', starting with a letter or digit", id)
	}
	return nil
}

// AttachmentID is the endpoint ID of a CNI attachment: CONTAINERID:IFNAME,
// readable in `xlane endpoint ls`, or "cni-" and a hash of both where that
// would not fit an endpoint ID (128 characters). The same key always gives
// the same ID, so DEL and CHECK find the endpoint without a lookup table.
func AttachmentID(containerID, ifname string) string {
	if id := containerID + ":" + ifname; len(id) <= 128 {
		return id
	}
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return "cni-" + hex.EncodeToString(sum[:16])
}
