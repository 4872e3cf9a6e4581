package wireguard

import (
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/xlane-dev/xlane/internal/model"
)

// Key is a WireGuard key (wgtypes.Key: 32 bytes, base64 in text).
type Key = wgtypes.Key

// GenerateKey makes a new private key.
func GenerateKey() (Key, error) { return wgtypes.GeneratePrivateKey() }

// ParsePublicKey reads a public key given as field ("" is missing): 44
// characters of base64 for 32 bytes, not all zero.
func ParsePublicKey(field, s string) (Key, error) {
	if s == "" {
		return Key{}, model.Fieldf(field, "missing: encryption is on (xlaned --encryption wireguard): give the node's WireGuard public key (xlane status on that node shows it)")
	}
	k, err := wgtypes.ParseKey(s)
	if err != nil {
		return Key{}, model.Fieldf(field, "%q: not a WireGuard public key (44 characters of base64 for 32 bytes)", s)
	}
	if k == (Key{}) {
		return Key{}, model.Fieldf(field, "%q: the all-zero key is no key", s)
	}
	return k, nil
}
