package model

import (
	"errors"
	"net/netip"
	"testing"
)

// TestServiceValidate: each rule of a service names its field.
func TestServiceValidate(t *testing.T) {
	b := func(s string, w uint32) Backend { return Backend{Addr: netip.MustParseAddrPort(s), Weight: w} }
	ok := Service{VIP: netip.MustParseAddrPort("10.96.0.1:80"), Proto: "tcp", Backends: []Backend{b("10.1.0.2:80", 1), b("10.1.0.3:80", 0)}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid service: %v", err)
	}
	for name, c := range map[string]struct {
		edit  func(*Service)
		field string
	}{
		"protocol":            {func(s *Service) { s.Proto = "sctp" }, "vip"},
		"no port":             {func(s *Service) { s.VIP = netip.AddrPortFrom(s.VIP.Addr(), 0) }, "vip"},
		"loopback VIP":        {func(s *Service) { s.VIP = netip.MustParseAddrPort("127.0.0.1:80") }, "vip"},
		"timeout alone":       {func(s *Service) { s.AffinityTimeout = 60 }, "affinity_timeout"},
		"timeout too long":    {func(s *Service) { s.Affinity, s.AffinityTimeout = true, MaxAffinityTimeout+1 }, "affinity_timeout"},
		"family differs":      {func(s *Service) { s.Backends = append(s.Backends, b("[fd00::2]:80", 1)) }, "backends"},
		"listed twice":        {func(s *Service) { s.Backends = append(s.Backends, b("10.1.0.2:80", 2)) }, "backends"},
		"weight too high":     {func(s *Service) { s.Backends[0].Weight = MaxWeight + 1 }, "backends"},
		"backend has no port": {func(s *Service) { s.Backends[0].Addr = netip.AddrPortFrom(s.Backends[0].Addr.Addr(), 0) }, "backends"},
	} {
		s := ok
		s.Backends = append([]Backend(nil), ok.Backends...)
		c.edit(&s)
		var fe *FieldError
		if err := s.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
	}
}
