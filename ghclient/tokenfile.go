package ghclient

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// tokenRecheck is how often the token file's mtime and size are checked; a
// rotated Secret reaches the pod's volume within a minute or so anyway.
const tokenRecheck = 5 * time.Second

// fileToken is a token read from a file and re-read when the file changes.
type fileToken struct {
	path string
	now  func() time.Time

	mu      sync.Mutex
	token   string
	stamp   fileStamp
	checked time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func newFileToken(path string, now func() time.Time) (*fileToken, error) {
	f := &fileToken{path: path, now: now}
	tok, st, err := readToken(path)
	if err != nil {
		return nil, &fieldError{FieldToken, err}
	}
	f.token, f.stamp, f.checked = tok, st, now()
	return f, nil
}

func readToken(path string) (string, fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fileStamp{}, fmt.Errorf("token file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fileStamp{}, fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fileStamp{}, fmt.Errorf("token file %s is empty", path)
	case strings.ContainsAny(tok, "\r\n"):
		return "", fileStamp{}, fmt.Errorf("token file %s holds more than one line", path)
	}
	return tok, fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// get returns the token, re-reading the file when its mtime or size changed
// (checked at most every tokenRecheck). A file that cannot be read keeps the
// last good token: a Secret update is not atomic for every reader.
func (f *fileToken) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if now.Sub(f.checked) < tokenRecheck {
		return f.token
	}
	f.checked = now
	fi, err := os.Stat(f.path)
	if err != nil || (fileStamp{mod: fi.ModTime(), size: fi.Size()}) == f.stamp {
		return f.token
	}
	f.reloadLocked()
	return f.token
}

// reload re-reads the file at once (after a 401) and reports whether the
// token changed.
func (f *fileToken) reload() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.token
	f.checked = f.now()
	f.reloadLocked()
	return f.token, f.token != old
}

func (f *fileToken) reloadLocked() {
	if tok, st, err := readToken(f.path); err == nil {
		f.token, f.stamp = tok, st
	}
}

// tokenTransport authenticates with the file's current token and, on a 401,
// re-reads the file once and retries when the token changed.
type tokenTransport struct {
	src  *fileToken
	next http.RoundTripper
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(withToken(req, t.src.get()))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	fresh, changed := t.src.reload()
	if !changed || !rewindable(req) {
		return resp, nil
	}
	retry := withToken(req, fresh)
	if req.GetBody != nil {
		body, berr := req.GetBody()
		if berr != nil {
			return resp, nil
		}
		retry.Body = body
	}
	// The 401 is answered: drop it for the retry's answer.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	return t.next.RoundTrip(retry)
}

func rewindable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// withToken clones req (RoundTrippers must not modify it) with the token set.
func withToken(req *http.Request, token string) *http.Request {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}
