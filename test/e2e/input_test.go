package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// A word that is not a flag ends Go's flag parsing: xlaned refuses it
// instead of starting without the flags after it (here --uplink).
func TestXlanedRefusesPositionalArgs(t *testing.T) {
	netns := newNetns(t, "args")
	dir := t.TempDir()
	socket := filepath.Join(dir, "xlane.sock")
	pinDir := "/sys/fs/bpf/xle-" + suffix()
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	cmd := inNS(netns, filepath.Join(binDir, "xlaned"), "--state", filepath.Join(dir, "state.db"), "--socket", socket,
		"--pin-dir", pinDir, "--docker-plugin-socket=", "--calibrate-at-start=false",
		"--metrics-addr", "127.0.0.1:9643", "stray", "--uplink", "xle-no-such-dev")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("xlaned with a stray argument exited 0:\n%s", &out)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("xlaned with a stray argument started (it ignored the flags after it):\n%s", &out)
	}
	if want := `unexpected argument "stray"`; !strings.Contains(out.String(), want) {
		t.Errorf("xlaned output %q, want it to contain %q", &out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err == nil {
		t.Errorf("xlaned created its state file before refusing its arguments")
	}
}

// CNI ADD with CNI_NETNS the plugin's own namespace (the node's, where
// xlaned runs too) or the machine's root namespace is refused with the
// spec's error 4 naming CNI_NETNS, before anything is made: no network,
// no attachment, no device, and the plugin prints nothing but the error.
func TestCNIAddOwnNetns(t *testing.T) {
	n := newNode(t)
	xnet := "own" + suffix()
	conf := `{"cniVersion":"1.1.0","name":"own","type":"xlane-cni","socket":"` + n.socket + `","network":"` + xnet +
		`","subnets":["10.213.0.0/24","fd00:213::/64"]}`
	before := runIn(t, n.netns, "ip", "-o", "link")
	// The runtime (and so the plugin) in a namespace of its own, not
	// xlaned's: only the plugin knows it is its own.
	runtimeNS := newNetns(t, "rt")
	for _, tc := range []struct{ name, pluginNS, netns string }{
		{"node's", n.netns, nsPath(n.netns)},
		{"self", n.netns, "/proc/self/ns/net"},
		{"root", n.netns, "/proc/1/ns/net"},
		{"runtime's", runtimeNS, nsPath(runtimeNS)},
	} {
		netns := tc.netns
		t.Run(tc.name, func(t *testing.T) {
			c := inNS(tc.pluginNS, filepath.Join(binDir, "xlane-cni"))
			c.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID=ctr-own", "CNI_NETNS="+netns,
				"CNI_IFNAME=eth0", "CNI_PATH="+binDir)
			c.Stdin = strings.NewReader(conf)
			var stdout, stderr bytes.Buffer
			c.Stdout, c.Stderr = &stdout, &stderr
			if err := c.Run(); err == nil {
				t.Fatalf("ADD with CNI_NETNS=%s succeeded: %s", netns, &stdout)
			}
			// Before: a success result, then an error, exit 1.
			var e types.Error
			dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
			if err := dec.Decode(&e); err != nil || dec.More() {
				t.Fatalf("ADD with CNI_NETNS=%s: stdout is not one spec error (%v): %q; stderr %q", netns, err, stdout.String(), &stderr)
			}
			if e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, "CNI_NETNS") {
				t.Errorf("ADD with CNI_NETNS=%s: %+v, want code 4 naming CNI_NETNS", netns, e)
			}
		})
	}
	// xlaned refuses its own namespace itself (a client other than
	// xlane-cni), before it creates the network.
	_, err := n.client().AddAttachment(context.Background(), api.AttachmentAdd{ContainerID: "ctr-own", IfName: "eth0",
		Netns: nsPath(n.netns), CNINetwork: "own", Network: xnet, Create: &api.NetworkCreate{Subnets: []string{"10.213.0.0/24"}}})
	var re *api.RemoteError
	if !errors.As(err, &re) || re.Error_.Field != "netns" {
		t.Errorf("API attachment into xlaned's own namespace: %v, want an error of field netns", err)
	}
	if _, err := n.client().Attachment(context.Background(), "ctr-own", "eth0"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("attachment after the refused ADDs: %v, want not found", err)
	}
	if _, err := n.client().Network(context.Background(), xnet); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("network after the refused ADDs: %v, want not found (nothing made)", err)
	}
	if after := runIn(t, n.netns, "ip", "-o", "link"); after != before {
		t.Errorf("refused ADDs changed the node's links:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
