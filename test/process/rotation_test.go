package process_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// TestCertificateRotation replaces tls.crt and tls.key while requests flow
// from several goroutines: first with a new certificate from the same CA, then
// with one from a new CA (the clients trust both). New connections must get
// the new certificate without a restart, and no request may fail.
func TestCertificateRotation(t *testing.T) {
	gh, url := newFake(t)
	files := newFiles(t)
	secondCA := newCA(t, "runner-guard-ca-2")
	// Trust both CAs from the start: a pool must not change while in use.
	files.Pool.AddCert(secondCA.Certificate())
	e := startWith(t, gh, url, files)

	serial := func() (*big.Int, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.proc.WebhookAddr,
			&tls.Config{RootCAs: files.Pool, ServerName: "127.0.0.1"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	first, err := serial()
	if err != nil {
		t.Fatal(err)
	}

	// Requests flow from several goroutines: some keep connections alive (old
	// certificate), some dial a new connection per request.
	body, err := process.DeleteReviewJSON(process.Review{Pod: fixture.MakePod("apps", "web").Running().Obj()})
	if err != nil {
		t.Fatal(err)
	}
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: files.Pool}, DisableKeepAlives: true}}
	defer fresh.CloseIdleConnections()
	var (
		stop     atomic.Bool
		sent     atomic.Int64
		failures atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for w := range 6 {
		c := e.proc.Client
		if w%2 == 1 {
			c = fresh
		}
		wg.Go(func() {
			for !stop.Load() {
				resp, err := process.Send(context.Background(), c, e.proc.WebhookURL, body)
				if err == nil && !resp.Allowed {
					err = fmt.Errorf("denied: %s", resp.Result.Message)
				}
				if err != nil {
					failures.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
				sent.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	rotate := func(name string, ca *certs.CA, prev *big.Int) *big.Int {
		t.Helper()
		b, err := ca.Issue(certs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		leaf := fixture.ParseCert(t, b.CertPEM)
		if leaf.SerialNumber.Cmp(prev) == 0 {
			t.Fatal("new certificate has the old serial")
		}
		time.Sleep(200 * time.Millisecond) // let requests flow on the old certificate
		began := time.Now()
		if err := b.WriteDir(files.CertDir); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := serial()
			if err != nil {
				t.Fatalf("%s: dial after rotation: %v", name, err)
			}
			if got.Cmp(leaf.SerialNumber) == 0 {
				t.Logf("%s: new connections get serial %x after %s", name, got, time.Since(began).Round(time.Millisecond))
				return got
			}
			if time.Since(began) > 15*time.Second {
				t.Fatalf("%s: still serving serial %x 15s after rotation, want %x", name, got, leaf.SerialNumber)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	second := rotate("same CA", files.CA, first)
	rotate("new CA", secondCA, second)
	time.Sleep(300 * time.Millisecond) // requests on the newest certificate too
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed during rotation; first: %v", n, sent.Load(), firstErr)
	}
	t.Logf("%d requests during two rotations, none failed", sent.Load())
	if sent.Load() < 20 {
		t.Errorf("only %d requests flowed during rotation", sent.Load())
	}
}
