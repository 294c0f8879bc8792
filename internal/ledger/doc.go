// Package ledger is the manager's idempotency ledger: the deterministic Raft FSM
// that is the authority on every idempotency key and
// every job of a datacenter.
//
// It holds three tables:
//   - entries, keyed by (tenant, key): PENDING → COMMITTED | REJECTED, each with
//     a leader-stamped ExpiresAt after which it is removed;
//   - jobs, keyed by (tenant, job ID), created by Commit, ordered per tenant by
//     Seq (the raft index of the Commit), kept until their own retention. A
//     job committed by a Commit with Queue is in the worker lifecycle (jobs.go):
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
//	fut := r.Apply(ledger.Encode(ledger.Reserve{Tenant: t, Key: k, ...}), timeout)
//	res := fut.Response().(ledger.Result) // after fut.Error() == nil
//	switch res.Outcome { case ledger.OutcomeReserved: /* admission */ ... }
//	// then ledger.Commit{...} or ledger.Reject{...} with the same JobID.
//
//	// on becoming leader: for each e in fsm.Pending(), re-run admission and
//	// propose Commit or Reject with e.JobID; while leading, the same for
//	// fsm.PendingBefore(now - grace) (orphans of failed submissions).
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
