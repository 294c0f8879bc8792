package localcluster

import (
	"net/http"
	"time"
)

// GateClient is an HTTP client for the cluster's gates (GateURLs), on the
// harness's own transport: with TLS it trusts the cluster CA, so tests never
// build a client of their own. timeout bounds each request.
func (c *Cluster) GateClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: c.client.Transport}
}
