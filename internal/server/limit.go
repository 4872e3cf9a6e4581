package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/model"
)

// Request body limits. A refused body must cost little: a declared length
// over the limit is refused before a byte is read, a body that turns out
// larger is cut at the limit (http.MaxBytesReader), and a rule set with
// more rules than the datapath holds is refused while counting, before its
// rules are decoded. (Decoding a 100,000-rule file only to refuse it left
// xlaned ~150 MB larger: Go keeps freed heap for a while.)
const (
	// maxBody bounds request bodies of every path but the firewall's.
	maxBody = 1 << 20
	// maxFirewallBody bounds firewall request bodies: 16,384 rules
	// (firewall.MaxRules) of ~1 KB of JSON each, names, comments and lists
	// included; the CLI sends blocklists in chunks of 50,000 prefixes
	// (~2.3 MB).
	maxFirewallBody = 16 << 20
	// maxServicesBody bounds a services apply: 262,144 services
	// (the datapath's most) of ~250 bytes of JSON. (Measured: 100,000
	// services of three backends are 15 MB, 21 MB indented; 16,384 rules
	// of six prefixes, three port ranges and a comment 5.7 MB.)
	maxServicesBody = 64 << 20
)

// ErrTooLarge is a request body over its path's limit (HTTP 413).
var ErrTooLarge = errors.New("request body too large")

func tooLarge(limit int64) error {
	return fmt.Errorf("%w: the limit of this API path is %d bytes", ErrTooLarge, limit)
}

// limitBody refuses a request whose declared length exceeds limit and cuts
// the body off at limit.
func limitBody(w http.ResponseWriter, r *http.Request, limit int64) error {
	if r.ContentLength > limit {
		return tooLarge(limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return nil
}

// decodeErr turns a decode error into the API's: 413 for a body over the
// limit, else a field error.
func decodeErr(err error, limit int64) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return tooLarge(limit)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return model.Fieldf(te.Field, "has the wrong type: want %s", te.Type)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return model.Fieldf(strings.Trim(f, `"`), "unknown field")
	}
	var fe *model.FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return model.Fieldf("body", "not valid JSON: %v", err)
}

// ruleCount is the number of elements of a JSON array, counted without
// decoding them; -1 when raw is not an array (the decode that follows
// says what is wrong).
func ruleCount(raw json.RawMessage, stopAfter int) int {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return -1
	}
	n := 0
	var skip json.RawMessage
	for dec.More() && n <= stopAfter {
		if err := dec.Decode(&skip); err != nil {
			return -1
		}
		n++
	}
	return n
}

// checkRuleCount refuses a "rules" array longer than the datapath holds
// before it is decoded.
func checkRuleCount(raw json.RawMessage) error {
	if n := ruleCount(raw, firewall.MaxRules); n > firewall.MaxRules {
		return model.Fieldf("rules", "over %d: the datapath holds at most %d rules", firewall.MaxRules, firewall.MaxRules)
	}
	return nil
}
