package bpf

import (
	"slices"
	"testing"
)

// TestEnumNamesFromBTF: every value of the enums whose names the control
// plane shows (flows, firewall rules and events) has a name read from the
// object's BTF, and the names are the ones users see.
func TestEnumNamesFromBTF(t *testing.T) {
	for _, c := range []struct {
		enum string
		want []string
		vals []uint64 // the Go constants of the enum
	}{
		{"ct_state", []string{"new", "established", "closing", "closed"},
			[]uint64{uint64(CTNew), uint64(CTEstablished), uint64(CTClosing), uint64(CTClosed)}},
		{"fw_action", []string{"allow", "drop", "reject", "log", "pass"},
			[]uint64{uint64(FwAllow), uint64(FwDrop), uint64(FwReject), uint64(FwLog), uint64(FwPass)}},
	} {
		names, err := enumNames(loadTc, c.enum)
		if err != nil {
			t.Fatal(err)
		}
		for v, n := range names {
			if n == "" {
				t.Errorf("enum %s: value %d has no name", c.enum, v)
			}
		}
		for i, v := range c.vals {
			if v >= uint64(len(names)) || names[v] != c.want[i] {
				t.Errorf("enum %s: value %d named %q, want %q (names %q)", c.enum, v, nameOf(names, v), c.want[i], names)
			}
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("enum %s: names %q, want %q (a value added: name it here and where it is shown)", c.enum, names, c.want)
		}
	}
	if CTStateName(uint8(CTEstablished)) != "established" || FwActionName(FwReject) != "reject" || FwActionName(200) != "200" {
		t.Errorf("CTStateName/FwActionName: %q %q %q", CTStateName(uint8(CTEstablished)), FwActionName(FwReject), FwActionName(200))
	}
}
