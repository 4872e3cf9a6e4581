package api

// Feature is one kernel feature xlaned probed at start (internal/features):
// whether this node has it, the oldest kernel of the matrix that does, why
// it is missing, and what in xlane needs it.
type Feature struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Since     string `json:"since,omitempty"`
	Detail    string `json:"detail,omitempty"`
	Uses      string `json:"uses,omitempty"`
}
