package manager

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/tracing"
)

// batcher groups the commands of concurrent submissions into batch entries
// (ledger.AdmitBatch, ledger.WorkerBatch): group commit. One goroutine per
// batcher proposes: while its entry is in flight (replicated, fsynced on a
// quorum, applied), new commands queue, and as soon as it returns they go
// out together in the next entry, up to MANAGER_BATCH_MAX_ITEMS and
// MANAGER_BATCH_MAX_BYTES. An idle leader proposes a lone command at once (as
// a single command: no timer, no batch overhead). That goroutine is the only
// waiter on the entry's future; each submitter waits on its own buffered
// channel, so giving up (its context ends) costs nothing: its command still
// applies, and the ledger answers the retry with its outcome.
//
// A submitter is answered only after the entry holding its command is
// committed on a quorum and applied, exactly as with a single command.
type batcher struct {
	m    *Manager
	kind ledger.CommandType // of its batch entries: TypeAdmitBatch or TypeWorkerBatch
	wake chan struct{}      // capacity 1: work queued

	mu    sync.Mutex
	queue []*batchItem

	// spare is the slice of the last batch proposed, emptied, which take
	// reuses: run alone takes and proposes, one batch at a time.
	spare []*batchItem
}

// batchItem is one submission's command, encoded once by its submitter.
type batchItem struct {
	data []byte
	// done is closed once result is set (finish, called once): a channel
	// of no element is one allocation, one of batchDone two.
	done   chan struct{}
	result batchDone
	// then, when set, is given the command's result once applied, whether
	// or not its submitter still waits (applyThen).
	then func(ledger.Result)
}

// finish hands the item its result: to then (once applied) and to its
// submitter.
func (it *batchItem) finish(d batchDone) {
	if it.then != nil && d.err == nil {
		it.then(d.res)
	}
	it.result = d
	close(it.done)
}

type batchDone struct {
	res ledger.Result
	err error
}

func newBatcher(m *Manager, kind ledger.CommandType) *batcher {
	return &batcher{m: m, kind: kind, wake: make(chan struct{}, 1)}
}

// apply proposes cmd in the next batch and waits for its own result, as
// Manager.apply does for a single command.
func (b *batcher) apply(ctx context.Context, cmd ledger.Command) (ledger.Result, error) {
	return b.applyThen(ctx, cmd, nil)
}

// applyThen is apply, and then, when not nil, is given cmd's result once it
// is applied, on the proposer's goroutine (it must not block), even after
// ctx has ended: what must follow the command's effect (waking the leases
// waiting for a job it queued) does not depend on its caller still waiting.
func (b *batcher) applyThen(ctx context.Context, cmd ledger.Command, then func(ledger.Result)) (ledger.Result, error) {
	select {
	case <-b.m.shutdown:
		return ledger.Result{}, errShuttingDown
	default:
	}
	it := &batchItem{data: ledger.Encode(cmd), done: make(chan struct{}), then: then}
	b.mu.Lock()
	b.queue = append(b.queue, it)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-it.done:
		return it.result.res, it.result.err
	case <-ctx.Done():
		return ledger.Result{}, endedBeforeApplied(ctx)
	case <-b.m.shutdown:
		return ledger.Result{}, errShuttingDown
	}
}

// run proposes batches until the manager shuts down.
func (b *batcher) run() {
	for {
		select {
		case <-b.wake:
		case <-b.m.shutdown:
			b.failQueued()
			return
		}
		for {
			batch := b.take()
			if len(batch) == 0 {
				break
			}
			b.propose(batch)
			clear(batch) // no finished item kept alive
			b.spare = batch[:0]
		}
	}
}

// take removes the next batch from the queue: at least one item, then as many
// as the bounds allow.
func (b *batcher) take() []*batchItem {
	maxItems, maxBytes := b.m.cfg.BatchMaxItems, b.m.cfg.BatchMaxBytes
	if maxItems <= 0 {
		maxItems = DefaultBatchMaxItems
	}
	if maxBytes <= 0 {
		maxBytes = DefaultBatchMaxBytes
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n, size := 0, 0
	for n < len(b.queue) && n < maxItems {
		sz := len(b.queue[n].data) + 4
		if n > 0 && size+sz > maxBytes {
			break
		}
		size += sz
		n++
	}
	batch := append(b.spare[:0], b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n) // clears the tail it vacates
	return batch
}

func (b *batcher) failQueued() {
	b.mu.Lock()
	q := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, it := range q {
		it.finish(batchDone{err: errShuttingDown})
	}
}

// propose proposes one entry for the batch, waits for it to be applied and
// hands each item its result.
func (b *batcher) propose(batch []*batchItem) {
	var data []byte
	if len(batch) == 1 {
		data = batch[0].data
	} else {
		items := make([][]byte, len(batch))
		for i, it := range batch {
			items[i] = it.data
		}
		data = ledger.EncodeBatch(b.kind, items)
	}
	res, err := b.m.applyEntry(data)
	switch {
	case err != nil:
	case len(batch) == 1:
		batch[0].finish(commandResult(res))
		return
	case res.Outcome != ledger.OutcomeBatch || len(res.Items) != len(batch):
		err = rpc.Errorf(rpc.CodeInternal, "ledger refused the batch: %s %v", res.Outcome, res.Err)
		b.m.log.Error("batch entry refused", logging.KeyError, err)
	default:
		for i, it := range batch {
			it.finish(commandResult(res.Items[i]))
		}
		return
	}
	for _, it := range batch {
		it.finish(batchDone{err: err})
	}
}

// ApplyError is the error a caller gets for err, a Raft future's failure on
// this node (for a raft.Apply, every submission of the entry): not_leader
// or unavailable. It leaves the serving term alone: Raft is no longer
// leader by the time it fails a future for leadership (CheckLeader looks at
// that first), and a failure that reaches its caller late, after this node
// has won and served a newer term, must not stop that term's serving.
func (m *Manager) ApplyError(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return m.notLeader()
	}
	return rpc.Errorf(rpc.CodeUnavailable, "raft apply: %v", err)
}

// tracedApply is b.apply in a span named name (internal/tracing): the time
// from proposing cmd, through the batch it joins, its Raft commit and its
// apply to the ledger, to its result.
func (m *Manager) tracedApply(ctx context.Context, name string, b *batcher, cmd ledger.Command) (ledger.Result, error) {
	ctx, span := tracing.Span(ctx, name)
	defer span.End()
	res, err := b.apply(ctx, cmd)
	switch {
	case !span.IsRecording():
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetAttributes(attribute.String("once.ledger_outcome", res.Outcome.String()))
	}
	return res, err
}
