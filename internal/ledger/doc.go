// Package ledger is the manager's idempotency ledger: the deterministic Raft FSM
// that is the authority on every idempotency key and
// every job of a datacenter.
//
// It holds three tables:
//   - entries, keyed by (tenant, key): COMMITTED or REJECTED by the Admit that
//     took the key (or CLAIMED by a Claim), each with a leader-stamped
//     ExpiresAt after which it is removed;
//   - jobs, keyed by (tenant, job ID), created by an Admit's Commit, ordered
//     per tenant by Seq (the raft index of the Admit), kept until their own
//     retention. A job committed with Queue is in the worker lifecycle (jobs.go):
//     QUEUED → RUNNING (Lease, under a leader-stamped lease; Heartbeat) →
//     SUCCEEDED (Complete) | FAILED | DEAD (Fail, or an expired lease:
//     ExpireLeases), retained only once finished;
//   - watermarks, keyed by (tenant, client_id, nonce): which sequences of a
//     structured-key client committed, exactly within a window below the
//     highest, so that a late retry of one is refused (OutcomeKeyExpired)
//     instead of executed twice, while one that never ran is judged afresh.
//
// How the manager uses it:
//
//	fsm := ledger.New(ledger.Options{OnChange: wakeWaiters})
//	r, _ := raft.NewRaft(conf, fsm, logs, stable, snaps, transport)
//
//	// a submission, at the leader:
//	// admission decides the verdict, then one entry takes the key with it:
//	fut := r.Apply(ledger.Encode(ledger.Admit{
//		Reserve: ledger.Reserve{Tenant: t, Key: k, JobID: id, ...},
//		Outcome: ledger.Commit{Tenant: t, Key: k, JobID: id, ...}, // or a ledger.Reject
//	}), timeout)
//	res := fut.Response().(ledger.Result) // after fut.Error() == nil
//	switch res.Outcome { case ledger.OutcomeCommitted: ...; case ledger.OutcomeExists: ... }
//
//	// every cleanup interval, when fsm.NextExpiry() is due or the oldest
//	// watermark (fsm.OldestWatermark()) is WatermarkTTL old: propose Expire.
//	// Options.OnHalt: a committed entry this build cannot decode; stop.
//	// when fsm.NextLeaseExpiry() is due: propose ExpireLeases.
//	// reads: fsm.Entry, fsm.Job, fsm.ListJobs, fsm.Stats.
//
// The FSM type documents the raft contract; docs/ledger.md documents the states,
// the commands and their binary layout, the compatibility rules, the snapshot
// format and what survives which crash.
package ledger
