//go:build ignore

// Command xlane-etcd runs an embedded etcd (go.etcd.io/etcd/server/v3/embed)
// for the Kubernetes tests' kube-apiserver: one member, one data directory,
// plain HTTP on the addresses given. scripts/k8s-bins.sh compiles it inside
// the Kubernetes build tree, whose go.mod already requires etcd's server
// module at the version Kubernetes tests with; the ignore tag keeps it out
// of xlane's own module (and go.mod).
//
//	xlane-etcd --data-dir DIR --client-url http://127.0.0.1:2379 --peer-url http://127.0.0.1:2380
//
// It prints "ready" once etcd serves, and stops on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dir := flag.String("data-dir", "", "data directory")
	client := flag.String("client-url", "http://127.0.0.1:2379", "client URL (listen and advertise)")
	peer := flag.String("peer-url", "http://127.0.0.1:2380", "peer URL (listen and advertise)")
	flag.Parse()
	cu, err := url.Parse(*client)
	if err != nil {
		log.Fatalf("--client-url: %v", err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		log.Fatalf("--peer-url: %v", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "xlane"
	cfg.Dir = *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "error"
	// A test cluster's data is thrown away: no fsync.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case <-time.After(2 * time.Minute):
		e.Server.Stop()
		log.Fatal("etcd did not become ready in 2 minutes")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}
