package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd starts a single-member etcd on loopback, embedded so the
// environment needs no etcd package of a matching version from the OS.
// The version is the one k8s.io/kubernetes itself is tested with (go.mod).
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	dataDir := fs.String("data-dir", "", "etcd data directory")
	client := fs.String("listen-client-url", "http://127.0.0.1:2379", "client URL (loopback only)")
	peer := fs.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL (loopback only)")
	_ = fs.Parse(args)
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "slurmkube"
	cfg.Dir = *dataDir
	cfg.LogLevel = "warn"
	cu, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd: bad client url:", err)
		return 2
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd: bad peer url:", err)
		return 2
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// A test cluster: keep the database small and compact often.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.QuotaBackendBytes = 2 << 30
	cfg.UnsafeNoFsync = true // test data only; avoids fsync stalls on a shared disk
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd: start:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd ready on", cu.String())
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-stop:
		return 0
	}
}
