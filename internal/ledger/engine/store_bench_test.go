package engine

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkStoreEngines compares the two embedded stores the ledger could
// keep its tables in, on the key-value operations one submission costs on
// the apply path (what diskindex.go does for a Reserve and its Commit: the
// entry read and written twice, its expiry and pending orders, the job and
// its three orders), one transaction per 64 submissions (a Raft apply
// batch), without fsync (the Raft log is the durable record). One op is one
// submission; docs/benchmarks.md has the figures that chose pebble:
//
//	go test -tags hashicorpmetrics -run '^$' -bench StoreEngines -benchtime 200000x ./internal/ledger/engine/
func BenchmarkStoreEngines(b *testing.B) {
	type engine struct {
		name string
		open func(dir string) (kvTxn, func())
	}
	engines := []engine{
		{"pebble", func(dir string) (kvTxn, func()) {
			st, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			return &pebbleTxn{st: st}, func() { _ = st.close(true) }
		}},
		{"bbolt", func(dir string) (kvTxn, func()) {
			db, err := bolt.Open(filepath.Join(dir, "bench.db"), 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
			if err != nil {
				b.Fatal(err)
			}
			return &boltTxn{db: db}, func() { _ = db.Close() }
		}},
	}
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			kv, closeKV := e.open(b.TempDir())
			defer closeKV()
			entry := bytes.Repeat([]byte("e"), 260) // an entry record with a small payload
			job := bytes.Repeat([]byte("j"), 200)
			// Entries and jobs are keyed by idempotency key and job ID (in no
			// time order: many clients); the orders by time or Seq.
			key := func(p byte, i int) []byte {
				if p == 'e' || p == 'j' {
					return fmt.Appendf([]byte{p}, "acme\x00\x01client-%016x", uint64(i)*0x9e3779b97f4a7c15)
				}
				return fmt.Appendf([]byte{p}, "%012d", i)
			}
			run := func(from, to int) {
				for i := from; i < to; i += 64 {
					kv.begin()
					for n := i; n < min(to, i+64); n++ {
						kv.get(key('e', n)) // Reserve: the key's entry (absent)
						kv.set(key('e', n), entry)
						kv.set(key('x', n), key('e', n))
						kv.set(key('p', n), key('e', n))
						kv.get(key('e', n)) // an entry read again
						kv.get(key('j', n)) // the job ID (absent)
						kv.set(key('e', n), entry)
						kv.del(key('x', n))
						kv.set(key('x', n+1<<40), key('e', n))
						kv.del(key('p', n))
						kv.set(key('j', n), job)
						kv.set(key('s', n), key('j', n))
						kv.set(key('t', n), key('j', n))
						kv.set(key('y', n), key('j', n))
					}
					kv.commit()
				}
			}
			run(-100_000, 0) // a state of 100k submissions first
			b.ResetTimer()
			run(0, b.N)
		})
	}
}

// kvTxn is the benchmark's view of an engine: one write transaction at a
// time, reads seeing its own writes.
type kvTxn interface {
	begin()
	get(k []byte) bool
	set(k, v []byte)
	del(k []byte)
	commit()
}

type pebbleTxn struct{ st *Store }

func (t *pebbleTxn) begin()            { t.st.Begin() }
func (t *pebbleTxn) get(k []byte) bool { return getFrom(t.st.r, k, nil) }
func (t *pebbleTxn) set(k, v []byte)   { t.st.Set(k, v) }
func (t *pebbleTxn) del(k []byte)      { t.st.Delete(k) }
func (t *pebbleTxn) commit()           { t.st.Commit() }

type boltTxn struct {
	db *bolt.DB
	tx *bolt.Tx
	bk *bolt.Bucket
}

func (t *boltTxn) begin() {
	tx, err := t.db.Begin(true)
	if err != nil {
		panic(err)
	}
	t.tx = tx
	if t.bk, err = tx.CreateBucketIfNotExists([]byte("ledger")); err != nil {
		panic(err)
	}
}
func (t *boltTxn) get(k []byte) bool { return t.bk.Get(k) != nil }
func (t *boltTxn) set(k, v []byte) {
	if err := t.bk.Put(k, v); err != nil {
		panic(err)
	}
}
func (t *boltTxn) del(k []byte) {
	if err := t.bk.Delete(k); err != nil {
		panic(err)
	}
}
func (t *boltTxn) commit() {
	if err := t.tx.Commit(); err != nil {
		panic(err)
	}
}
