// Package chaos is the home of once's fault-testing harness, built the way
// Jepsen and etcd's robustness tests are: clients submit work while faults are
// injected, every request and its answer is written to a history, and after the
// cluster heals a checker reads the cluster back through the public API and
// proves the contract's guarantees (docs/api.md, "Guarantees") against that
// history.
//
// The pieces live in subpackages named for what they are:
//
//   - history: the concurrency-safe operation recorder and its JSON-lines format.
//   - workload: logical clients that submit jobs with structured idempotency
//     keys, retry with the same key and body, and deliberately duplicate
//     submissions through other gates.
//   - checker: the rules (a)–(g) checked after the run, against the recorded
//     history and the cluster's read endpoints.
//   - fakegate: an in-memory gate that implements the HTTP contract simply, with
//     injectable faults and bugs, used to test the other three.
//
// The nemesis that kills, pauses and partitions real processes plugs in on top:
//
//	w, err := workload.New(workload.Config{GateURLs: urls, Clients: 8, Duration: time.Minute})
//	rec := history.NewRecorder()
//	stats, err := w.Run(ctx, rec)            // faults are injected meanwhile
//	// ... heal the cluster ...
//	res, err := checker.Check(ctx, checker.Config{GateURL: urls[0]}, rec.Ops())
//
// README.md in this directory describes the workload, the history format and
// each checker rule.
package chaos
