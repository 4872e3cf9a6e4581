package wireguard

import (
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn/bindtest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestVerdict: a peer's session as the datapath takes it, strict and not.
func TestVerdict(t *testing.T) {
	now := time.Now()
	rotated := now.Add(-10 * time.Second)
	for _, tc := range []struct {
		name        string
		since       time.Duration // the peer set, before now
		hs          time.Duration // the last handshake, before now (0: none)
		off         bool          // not on the device
		keyed       time.Time
		state       string // not strict (strict: StateDropped for StateCleartext)
		reason      string
		strictState string
	}{
		{"fresh handshake", time.Hour, time.Second, false, time.Time{}, StateEncrypted, "", StateEncrypted},
		{"within the grace", time.Second, 0, false, time.Time{}, StatePending, ReasonNoHandshake, StatePending},
		{"no handshake after the grace", 10 * time.Second, 0, false, time.Time{}, StateCleartext, ReasonNoHandshake, StateDropped},
		{"expired, no grace", time.Second, 200 * time.Second, false, time.Time{}, StateCleartext, ReasonStale, StateDropped},
		{"not on the device", time.Hour, 0, true, time.Time{}, StateCleartext, ReasonMissing, StateDropped},
		// A handshake older than this node's key is the old key's.
		{"before a rotation", time.Second, 20 * time.Second, false, rotated, StatePending, ReasonNoHandshake, StatePending},
		{"before a rotation, grace over", 7 * time.Second, 20 * time.Second, false, rotated, StateCleartext, ReasonNoHandshake, StateDropped},
		{"after a rotation", 7 * time.Second, 5 * time.Second, false, rotated, StateEncrypted, "", StateEncrypted},
	} {
		for _, strict := range []bool{false, true} {
			tun := &Tunnel{cfg: Config{Strict: strict}, keyed: tc.keyed}
			var live wgtypes.Peer
			if tc.hs != 0 {
				live.LastHandshakeTime = now.Add(-tc.hs)
			}
			state, reason := tun.verdict(&session{since: now.Add(-tc.since)}, live, !tc.off, now)
			want := tc.state
			if strict {
				want = tc.strictState
			}
			if state != want || reason != tc.reason {
				t.Errorf("%s (strict %v): %s, %q; want %s, %q", tc.name, strict, state, reason, want, tc.reason)
			}
		}
	}
}

// TestCheckCourse: two embedded devices on an in-memory bind. a knows b
// by a wrong key: pending within the grace (its traffic into WireGuard),
// then dropped (strict) or cleartext, which Check reports once; with the
// right key the daemon's nudges make the handshake (no traffic needed)
// and Check reports the peer back in WireGuard. A rotation of a's key
// voids the session: pending again, then not encrypted.
func TestCheckCourse(t *testing.T) {
	for _, strict := range []bool{true, false} {
		binds := bindtest.NewChannelBinds()
		a, _ := newTestDevice(t, binds[0])
		b, _ := newTestDevice(t, binds[1])
		ka, kb := mustKey(t), mustKey(t)
		aAddr, bAddr := netip.MustParseAddr("10.244.1.0"), netip.MustParseAddr("10.244.2.0")
		pa, pb := 1, 2
		wrong := mustKey(t).PublicKey()
		peerOf := func(k Key, port int, allowed netip.Addr) wgtypes.PeerConfig {
			return wgtypes.PeerConfig{PublicKey: k, Endpoint: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
				AllowedIPs: []net.IPNet{*hostNet(allowed)}}
		}
		if err := a.configure(wgtypes.Config{PrivateKey: &ka, ListenPort: &pa, Peers: []wgtypes.PeerConfig{peerOf(wrong, pa, bAddr)}}); err != nil {
			t.Fatal(err)
		}
		if err := b.configure(wgtypes.Config{PrivateKey: &kb, ListenPort: &pb, Peers: []wgtypes.PeerConfig{peerOf(ka.PublicKey(), pb, aAddr)}}); err != nil {
			t.Fatal(err)
		}
		tun := &Tunnel{cfg: Config{Strict: strict, Log: slog.New(slog.DiscardHandler)}, eng: a, pub: ka.PublicKey(),
			peers: map[string]Peer{"b": {Node: "b", PublicKey: wrong}}, sess: map[string]*session{}}
		base := time.Now()
		tun.resetSession("b", base)
		tun.sess["b"].course = "wg"
		check := func(at time.Duration, wantChanged bool, wantState string) {
			t.Helper()
			changed, err := tun.Check(base.Add(at))
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Equal(changed, []string{"b"}); got != wantChanged {
				t.Errorf("strict %v, at %v: changed %v, want a change %v", strict, at, changed, wantChanged)
			}
			if s := tun.sess["b"].state; s != wantState {
				t.Errorf("strict %v, at %v: state %s, want %s", strict, at, s, wantState)
			}
		}
		notEncrypted := StateCleartext
		if strict {
			notEncrypted = StateDropped
		}
		check(time.Second, false, StatePending)
		if through, _ := tun.Encrypts("b"); !through {
			t.Errorf("strict %v: pending, not through WireGuard", strict)
		}
		check(7*time.Second, true, notEncrypted)
		check(8*time.Second, false, notEncrypted)
		if through, s := tun.Encrypts("b"); through || s != strict {
			t.Errorf("strict %v: Encrypts %v, %v after the grace with a wrong key", strict, through, s)
		}
		if st := tun.Status(); len(st.Peers) != 1 || st.Peers[0].State != notEncrypted || st.Peers[0].Reason != ReasonNoHandshake || st.Peers[0].Detail == "" ||
			st.Strict != strict || (st.Cleartext == 1) == strict {
			t.Errorf("strict %v: status %+v", strict, st)
		}
		// The right key: the next nudge (5 s after the last) makes the
		// handshake.
		if err := a.configure(wgtypes.Config{ReplacePeers: true, Peers: []wgtypes.PeerConfig{peerOf(kb.PublicKey(), pa, bAddr)}}); err != nil {
			t.Fatal(err)
		}
		tun.peers["b"] = Peer{Node: "b", PublicKey: kb.PublicKey()}
		at, back := 13*time.Second, false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !back; time.Sleep(20 * time.Millisecond) {
			changed, err := tun.Check(base.Add(at))
			if err != nil {
				t.Fatal(err)
			}
			back = slices.Equal(changed, []string{"b"})
		}
		if through, _ := tun.Encrypts("b"); !back || !through || tun.sess["b"].state != StateEncrypted {
			t.Fatalf("strict %v: with the right key no handshake from the nudge: state %s", strict, tun.sess["b"].state)
		}
		// A rotation: the old key's session is void.
		k2 := mustKey(t)
		if err := tun.SetPrivateKey(k2); err != nil {
			t.Fatal(err)
		}
		if tun.PublicKey() != k2.PublicKey() {
			t.Errorf("public key %s after the rotation, want %s", tun.PublicKey(), k2.PublicKey())
		}
		base = time.Now()
		check(time.Second, false, StatePending)
		check(7*time.Second, true, notEncrypted)
	}
}
