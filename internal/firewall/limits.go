package firewall

import "github.com/xlane-dev/xlane/internal/bpf"

// MaxRules is how many rules the datapath's firewall holds (FW_MAX_RULES,
// bpf/lib/fw.h): what the API refuses beyond, before compiling.
const MaxRules = bpf.FwMaxRules
