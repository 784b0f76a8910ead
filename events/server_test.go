package events

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/test/process"
)

// The server answers on its own listener, only at Path, and stops with its
// context.
func TestServerServesThePath(t *testing.T) {
	port, err := process.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "", nil, legacyPod("r-1", "acme"))
	srv := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Handler: e.h}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	post := func(path string) (int, error) {
		body := `{"zen":"hi"}`
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set(HeaderEvent, "ping")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderSignature, Sign([]byte(body), testSecret))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var code int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, err = post(Path); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || code != http.StatusOK {
		t.Fatalf("ping at %s: %d, %v", Path, code, err)
	}
	if code, err := post("/other"); err != nil || code != http.StatusNotFound {
		t.Fatalf("another path: %d, %v; want 404", code, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v after its context ended", err)
	}
}
