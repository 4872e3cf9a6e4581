package core

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/xlane-dev/xlane/internal/model"
)

// The names the API takes. Features validate their own objects' names with
// the same rules.
var (
	// NameRE: networks, services, nodes, rule sets.
	NameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	// IDRE: endpoint IDs (container IDs, VM names).
	IDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	// IfnameRE: a Linux interface name.
	IfnameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)
)

// HiddenPrefix starts the names of networks the daemon makes for itself
// (the calibration's test bed, internal/calibration): no user's network may
// take one, and user listings (network ls, endpoint ls, status, metrics)
// leave them out.
const HiddenPrefix = "xlcal-"

// Hidden says whether network name is one of the daemon's own.
func Hidden(name string) bool { return strings.HasPrefix(name, HiddenPrefix) }

// AutoMode is the mode `auto` resolves to where the BPF datapath works and
// no calibration ranks another first (the daemon's automode.go; the figures
// behind it in docs/benchmarks.md).
const AutoMode = model.ModeTC

// RandomID is 12 random hex digits (IDs of the daemon's own objects).
func RandomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
