package server

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bgp"
	"github.com/xlane-dev/xlane/internal/lbipam"
	"github.com/xlane-dev/xlane/internal/model"
)

// WithBGP serves the BGP speaker's and the LoadBalancer pools' routes in
// front of h (Handler's routes): /v1/bgp/... and /v1/lb-pools. sp is nil
// when xlaned runs no speaker (no --bgp-asn): its status says so and a
// peer is refused as unavailable.
func WithBGP(h http.Handler, sp *bgp.Speaker, pools *lbipam.Pools, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	route := func(pattern string, status int, fn func(*http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			out, err := func() (any, error) {
				if err := limitBody(w, r, maxBody); err != nil {
					return nil, err
				}
				return fn(r)
			}()
			switch {
			case err != nil:
				writeError(w, log, r, err)
			case out == nil:
				w.WriteHeader(http.StatusNoContent)
			default:
				writeJSON(w, status, out)
			}
		})
	}
	speaker := func() (*bgp.Speaker, error) {
		if sp == nil {
			return nil, fmt.Errorf("bgp: this xlaned runs no BGP speaker (start it with --bgp-asn N --bgp-router-id ADDR): %w", model.ErrUnavailable)
		}
		return sp, nil
	}
	route("POST "+api.PathBGPPeers, http.StatusCreated, func(r *http.Request) (any, error) {
		var p model.BGPPeer
		if err := decode(r, &p); err != nil {
			return nil, err
		}
		s, err := speaker()
		if err != nil {
			return nil, err
		}
		out, err := s.AddPeer(p)
		if out != nil {
			out.Password = ""
		}
		return out, err
	})
	route("GET "+api.PathBGPPeers, http.StatusOK, func(r *http.Request) (any, error) {
		if sp == nil {
			return []model.BGPPeer{}, nil
		}
		ps, err := sp.Peers()
		for i := range ps {
			ps[i].Password = ""
		}
		return orEmpty(ps), err
	})
	route("DELETE "+api.PathBGPPeers+"/{addr}", http.StatusNoContent, func(r *http.Request) (any, error) {
		s, err := speaker()
		if err != nil {
			return nil, err
		}
		return nil, s.RemovePeer(r.PathValue("addr"))
	})
	route("GET "+api.PathBGPStatus, http.StatusOK, func(r *http.Request) (any, error) {
		if sp == nil {
			return &api.BGPStatus{Peers: []api.BGPPeerStatus{}, Announced: []api.BGPRoute{}}, nil
		}
		return sp.Status()
	})
	route("POST "+api.PathLBPools, http.StatusCreated, func(r *http.Request) (any, error) {
		var p model.LBPool
		if err := decode(r, &p); err != nil {
			return nil, err
		}
		return pools.Create(p)
	})
	route("GET "+api.PathLBPools, http.StatusOK, func(r *http.Request) (any, error) {
		return pools.List()
	})
	route("DELETE "+api.PathLBPools+"/{name}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, pools.Remove(r.PathValue("name"))
	})
	return mux
}
