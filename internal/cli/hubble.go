package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/xlane-dev/xlane/internal/api"
)

// printHubble is the status' Hubble line (xlaned --hubble).
func printHubble(w *tabwriter.Writer, h *api.HubbleStatus) {
	if h == nil {
		return
	}
	at := h.Socket
	if h.Listen != "" {
		tls := ""
		if h.TLS {
			tls = " TLS"
		}
		at += fmt.Sprintf(" and %s%s", h.Listen, tls)
	}
	fmt.Fprintf(w, "hubble:\t%s: %d/%d flows in %s, %d seen, %d followers, %d names (%d kept after removal)\n",
		at, h.Flows, h.MaxFlows, humanBytes(h.RingBytes), h.Seen, h.Followers, h.Identities, h.IdentitiesGone)
	if h.Skipped+h.FeedDropped+h.Suppressed+h.RingLost > 0 {
		fmt.Fprintf(w, "hubble lost:\t%d skipped by slow followers, %d not taken in time, %d over the monitor's rate, %d ring full\n",
			h.Skipped, h.FeedDropped, h.Suppressed, h.RingLost)
	}
	if e := h.Export; e != nil {
		fmt.Fprintf(w, "hubble export:\t%s: %d lines, %d flows lost, %d write errors\n", e.Path, e.Lines, e.Lost, e.Errors)
		if e.LastError != "" {
			fmt.Fprintf(w, "hubble export error:\t%s\n", e.LastError)
		}
	}
	if h.Error != "" {
		fmt.Fprintf(w, "hubble error:\t%s\n", h.Error)
	}
}
