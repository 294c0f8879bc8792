package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// Cancel and Retry: POST to the job's action path with the key given (or a
// new one from Keys); a transient answer is retried with the same key; a
// conflict is returned at once, matching ErrJobStateConflict.
func TestCancelRetry(t *testing.T) {
	var s seen
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		switch {
		case r.Method != http.MethodPost:
			writeProblem(w, 405, api.CodeMethodNotAllowed, "")
		case r.URL.Path == "/v1/jobs/j1/cancel" && n.Add(1) == 1:
			writeProblem(w, 503, api.CodeUnavailable, "")
		case r.URL.Path == "/v1/jobs/j1/cancel":
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			w.Header().Set(api.HeaderReplayed, "true")
			_, _ = w.Write([]byte(`{"job_id":"j1","type":"demo","status":"committed","state":"cancelled"}` + "\n"))
		case r.URL.Path == "/v1/jobs/j1/retry":
			writeProblem(w, 409, api.CodeJobStateConflict, "")
		default:
			writeProblem(w, 404, api.CodeJobNotFound, "")
		}
	}))
	defer srv.Close()
	ks, err := OpenKeys(filepath.Join(t.TempDir(), "keys.json"), KeysOptions{ClientID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	opts := fastOpts()
	opts.Keys = ks
	c, err := New([]string{srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := c.Cancel(ctx, "j1", testKey)
	if err != nil || res.Job.State != api.JobStatusCancelled || !res.Replayed || res.Key != testKey {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if len(s.keys) != 2 || s.keys[0] != testKey || s.keys[1] != testKey {
		t.Fatalf("keys sent %q, want the same key twice", s.keys)
	}
	if _, err := c.Retry(ctx, "j1", ""); !errors.Is(err, ErrJobStateConflict) {
		t.Fatalf("retry: %v", err)
	}
	if k := s.keys[2]; k == "" || k == testKey {
		t.Fatalf("a retry without a key sent %q, want a new key from Keys", k)
	}
	if _, err := c.Cancel(ctx, "other", testKey); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("cancel of an unknown job: %v", err)
	}
	if _, err := c.Cancel(ctx, "j1", "bad key"); err == nil {
		t.Fatal("an invalid key was sent")
	}
	noKeys, _ := New([]string{srv.URL}, fastOpts())
	if _, err := noKeys.Retry(ctx, "j1", ""); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("no key and no Keys: %v", err)
	}
}
