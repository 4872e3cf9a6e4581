package main

// Counting xlaned's LISTs: the API server's audit log, limited to xlaned's
// identity and to list and watch requests. A relist is a list (or a watch
// with sendInitialEvents, client-go's streaming list); a watch resumed
// from a resourceVersion is not one.

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"time"
)

// xlanedUser is xlaned's identity in the control plane (k8senv: the
// service account kube-system/xlane as a static token).
const xlanedUser = "system:serviceaccount:kube-system:xlane"

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + xlanedUser + `"]
  verbs: ["list", "watch"]
- level: None
`

// auditArgs are kube-apiserver's flags for the audit log at path with
// the policy written beside it.
func auditArgs(dir string) ([]string, string, error) {
	pol := dir + "/audit-policy.yaml"
	if err := os.WriteFile(pol, []byte(auditPolicy), 0o600); err != nil {
		return nil, "", err
	}
	path := dir + "/audit.log"
	return []string{"--audit-policy-file=" + pol, "--audit-log-path=" + path, "--audit-log-format=json",
		"--audit-log-maxsize=0"}, path, nil
}

type auditEvent struct {
	Verb       string `json:"verb"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// countLists counts xlaned's relists per resource among the requests the
// API server received in [from, to).
func countLists(path string, from, to time.Time) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.User.Username != xlanedUser {
			continue
		}
		if e.RequestReceived.Before(from) || !e.RequestReceived.Before(to) {
			continue
		}
		// A list is logged once (ResponseComplete), a watch when it
		// starts and when it ends.
		if e.Verb == "list" || e.Verb == "watch" && e.Stage == "ResponseStarted" && strings.Contains(e.RequestURI, "sendInitialEvents=true") {
			out[e.ObjectRef.Resource]++
		}
	}
	return out, sc.Err()
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
