package server

import (
	"net/http"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
)

// attachmentRoutes serves xlane-cni: endpoints keyed by container ID and
// interface name (api.PathAttachments).
func attachmentRoutes(route func(string, int, func(*http.Request) (any, error)), d *daemon.Daemon) {
	route("POST "+api.PathAttachments, http.StatusCreated, func(r *http.Request) (any, error) {
		var req api.AttachmentAdd
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		e, err := d.AddAttachment(req)
		if err != nil {
			return nil, err
		}
		return d.Endpoint(e.ID)
	})
	route("POST "+api.PathAttachments+"/gc", http.StatusOK, func(r *http.Request) (any, error) {
		var req api.AttachmentGC
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		return d.GCAttachments(req)
	})
	route("GET "+api.PathAttachments+"/status", http.StatusOK, func(r *http.Request) (any, error) {
		return d.AttachmentStatus(r.URL.Query().Get("network"))
	})
	route("GET "+api.PathAttachments+"/{container}/{ifname}", http.StatusOK, func(r *http.Request) (any, error) {
		return d.Attachment(r.PathValue("container"), r.PathValue("ifname"))
	})
	route("DELETE "+api.PathAttachments+"/{container}/{ifname}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, d.RemoveAttachment(r.PathValue("container"), r.PathValue("ifname"))
	})
}
