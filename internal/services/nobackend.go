package services

import "github.com/xlane-dev/xlane/internal/model"

// What a new flow to a service VIP without backends gets (Config.
// ServiceNoBackend, xlaned --service-no-backend).
const (
	// NoBackendReject answers it as kube-proxy does: a TCP RST, an ICMP
	// port unreachable for the rest (the default).
	NoBackendReject = "reject"
	// NoBackendDrop drops it.
	NoBackendDrop = "drop"
)

// ParseNoBackend validates xlaned --service-no-backend ("" is the default,
// reject) and says whether the datapath answers.
func ParseNoBackend(s string) (bool, error) {
	switch s {
	case "", NoBackendReject:
		return true, nil
	case NoBackendDrop:
		return false, nil
	}
	return false, model.Fieldf("service-no-backend", "%q: want reject or drop", s)
}
