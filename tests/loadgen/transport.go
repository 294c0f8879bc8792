package loadgen

import (
	"net"
	"net/http"
	"time"
)

// NewTransport returns the HTTP/1.1 keep-alive transport the workers share:
// up to conns idle connections kept per gate (give it the concurrency, so no
// worker ever redials between requests), no proxy, no compression, no HTTP/2,
// 32 KiB socket buffers so large payloads go out in few writes.
func NewTransport(conns int) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	var protos http.Protocols
	protos.SetHTTP1(true)
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          0, // no global limit
		MaxIdleConnsPerHost:   max(conns, 2),
		MaxConnsPerHost:       0,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		DisableCompression:    true,
		Protocols:             &protos,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
		ExpectContinueTimeout: 0,
	}
}

// NewClient returns a client on NewTransport(conns) that does not follow
// redirects (a 3xx is counted as what it is).
func NewClient(conns int) *http.Client {
	return &http.Client{
		Transport:     NewTransport(conns),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
