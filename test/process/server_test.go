package process_test

import (
	"net/http"
	"net/http/httptest"
)

// newHTTPServer serves h on loopback (plain HTTP: the binary's GitHub transport
// speaks both) until Close, which also ends kept-alive connections.
func newHTTPServer(h http.Handler) *httptest.Server {
	return httptest.NewServer(h)
}
