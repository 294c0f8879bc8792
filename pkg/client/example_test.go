package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// fakeGate stands in for a gate (make run starts real ones on :8080 and
// :8081): it answers every submission with a job.
func fakeGate() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(api.HeaderIdempotencyKey) == "" {
			w.Header().Set("Content-Type", api.ContentTypeProblem)
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.Problem{Status: 400, Code: api.CodeIdempotencyKeyMissing})
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		w.Header().Set(api.HeaderReplayed, "false")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.Job{JobID: "01a20087-00af-7408-a87b-1180decbaa77", Type: "send_invoice", Status: api.JobStatusCommitted})
	}))
}

func Example() {
	gate := fakeGate()
	defer gate.Close()
	dir, _ := os.MkdirTemp("", "once-example")
	defer os.RemoveAll(dir)

	// The key source keeps the client id and the reserved sequences in a
	// file; keep it across restarts.
	ks, err := client.OpenKeys(filepath.Join(dir, "once-keys.json"), client.KeysOptions{ClientID: "billing.host1"})
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New([]string{gate.URL /*, "http://gate2:8080" */}, client.Options{Keys: ks})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Submit(context.Background(), api.JobRequest{Type: "send_invoice", Payload: json.RawMessage(`{"order":"ORD-123"}`)})
	var pe *client.Error
	switch {
	case errors.Is(err, client.ErrJobRejected) && errors.As(err, &pe):
		fmt.Println("rejected:", pe.Reason)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(res.Job.JobID, res.Job.Status, res.Replayed)
	}
	// Output: 01a20087-00af-7408-a87b-1180decbaa77 committed false
}

func ExampleError() {
	err := error(&client.Error{Status: 422, Code: api.CodeIdempotencyKeyReused, Detail: "this idempotency key was used with a different request"})
	fmt.Println(errors.Is(err, client.ErrKeyReused), errors.Is(err, client.ErrKeyExpired))
	// Output: true false
}
