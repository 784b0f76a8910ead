// Command fakegithub serves the fake GitHub runners API (ghclient/ghfake) as a
// process, with its /_fake/ control endpoints, for e2e runs against a real
// cluster (make e2e-kind) where the webhook reaches it through a Service.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

func main() {
	listen := flag.String("listen", ":8080", "Address to serve the fake GitHub API and its /_fake/ controls on.")
	tokenFile := flag.String("token-file", "", "File holding the token requests must carry (Authorization: Bearer TOKEN); empty turns authentication off.")
	flag.Parse()

	// As strict as GitHub, but for authentication when no token is given:
	// the scopes the tests use are registered over /_fake/ (runners, scopes).
	var opts []ghfake.Option
	if *tokenFile == "" {
		opts = append(opts, ghfake.WithAuthOff())
	}
	fake := ghfake.New(opts...)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fakegithub: --token-file: %v\n", err)
			os.Exit(1)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			fmt.Fprintf(os.Stderr, "fakegithub: --token-file: %s is empty\n", *tokenFile)
			os.Exit(1)
		}
		fake.SetToken(token)
	}
	srv := &http.Server{Addr: *listen, Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("fake GitHub serving on %s", *listen)
	if err := serve(srv); err != nil {
		fmt.Fprintf(os.Stderr, "fakegithub: %v\n", err)
		os.Exit(1)
	}
}

// serve runs srv until SIGINT or SIGTERM, then shuts it down gracefully.
func serve(srv *http.Server) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
