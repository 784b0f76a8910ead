package events

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// MaxConnections bounds the connections served at once: GitHub opens a few.
const MaxConnections = 128

// maxHeaderBytes bounds a request's headers: GitHub's are about 1 KiB.
const maxHeaderBytes = 16 << 10

// Server serves the endpoint on a listener of its own (--events-bind-address),
// on every replica: a delivery is applied by whichever replica receives it.
type Server struct {
	Addr    string
	Handler http.Handler
}

var (
	_ manager.Runnable               = &Server{}
	_ manager.LeaderElectionRunnable = &Server{}
)

// NeedLeaderElection is false: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("--events-bind-address: %w", err)
	}
	// Connections beyond MaxConnections wait in the kernel's backlog: each
	// holds at most its headers, so memory stays bounded whoever connects.
	ln = netutil.LimitListener(ln, MaxConnections)
	mux := http.NewServeMux()
	mux.Handle(Path, s.Handler)
	// GitHub sends a few KiB and waits 10 s for the answer: a sender slower
	// than that is not GitHub, and holds a delivery slot no longer.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: maxHeaderBytes}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("events server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("events server: %w", err)
	}
	return nil
}
