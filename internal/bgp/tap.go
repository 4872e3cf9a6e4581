package bgp

import (
	"context"
	"log/slog"
	"net/netip"

	gbgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// tapHandler passes GoBGP's log records on to xlaned's log and tells the
// speaker of every NOTIFICATION a session sends or receives. GoBGP v4
// reports an OPEN refused on an outgoing connection (a wrong AS, say)
// nowhere else: its outgoing connection manager sends the NOTIFICATION,
// closes and retries, with no state change and no reason in the peer's
// state; only its log line ("sent notification", Code, Subcode, the
// peer's Key) says it.
type tapHandler struct {
	slog.Handler
	key  string // the peer of the records (GoBGP's logger attribute Key)
	note func(peer netip.Addr, reason string)
}

// Enabled takes GoBGP's Info records whatever the log's level (the
// notifications are Info); Handle passes on what the log wants.
func (h *tapHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h *tapHandler) Handle(ctx context.Context, r slog.Record) error {
	if sent := r.Message == "sent notification"; sent || r.Message == "received notification" {
		key, code, sub := h.key, -1, 0
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "Key":
				key = a.Value.String()
			case "Code":
				code = int(a.Value.Int64())
			case "Subcode":
				sub = int(a.Value.Int64())
			}
			return true
		})
		if a, err := netip.ParseAddr(key); err == nil && code >= 0 {
			h.note(a, notificationReason(sent, code, sub))
		}
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *tapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	key := h.key
	for _, a := range attrs {
		if a.Key == "Key" {
			key = a.Value.String()
		}
	}
	return &tapHandler{Handler: h.Handler.WithAttrs(attrs), key: key, note: h.note}
}

func (h *tapHandler) WithGroup(name string) slog.Handler {
	return &tapHandler{Handler: h.Handler.WithGroup(name), key: h.key, note: h.note}
}

// notificationReason words a NOTIFICATION (RFC 4271 6.x codes).
func notificationReason(sent bool, code, sub int) string {
	if code == gbgp.BGP_ERROR_OPEN_MESSAGE_ERROR && sub == gbgp.BGP_ERROR_SUB_BAD_PEER_AS {
		if sent {
			return downReason("bad-peer-as")
		}
		return "bad peer AS: the peer refused this node's AS number (its configuration for this node has another)"
	}
	dir := "notification received: "
	if sent {
		dir = "notification sent: "
	}
	return dir + gbgp.NewNotificationErrorCode(uint8(code), uint8(sub)).String()
}
