package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
//	go test -tags hashicorpmetrics -run '^$' -bench StoreEngines -benchtime 200000x ./internal/ledger/
func BenchmarkStoreEngines(b *testing.B) {
	type engine struct {
		name string
		open func(dir string) (kvTxn, func())
	}
	engines := []engine{
		{"pebble", func(dir string) (kvTxn, func()) {
			st, err := openStore(dir, StoreOptions{})
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

type pebbleTxn struct{ st *store }

func (t *pebbleTxn) begin()            { t.st.begin() }
func (t *pebbleTxn) get(k []byte) bool { return getFrom(t.st.r, k, nil) }
func (t *pebbleTxn) set(k, v []byte)   { t.st.set(k, v) }
func (t *pebbleTxn) del(k []byte)      { t.st.delete(k) }
func (t *pebbleTxn) commit()           { t.st.commit() }

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

// BenchmarkDiskLiveKeys: b.N submissions (Reserve + Commit, small payload)
// that stay live, applied in batches of 64 to a disk-backed FSM; then the
// FSM is closed and reopened as a restarting manager would. It reports the
// process's peak RSS, the heap left after a GC, the bytes on disk, how
// long the reopen took until a read was answered, and until the key counts
// were scanned (keys.go; reads go to pebble until then). docs/benchmarks.md has the
// 10 M figures:
//
//	go test -tags hashicorpmetrics -run '^$' -bench DiskLiveKeys -benchtime 10000000x -timeout 2h ./internal/ledger/
func BenchmarkDiskLiveKeys(b *testing.B) {
	dir := b.TempDir()
	f, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	g := &benchLog{live: 1 << 40} // TTLs beyond any run
	var scratch []*raft.Log
	logs := make([]*raft.Log, 0, 64*2+2)
	firstKey := ""
	for done := 0; done < b.N; {
		logs = logs[:0]
		for ; len(logs) < 64 && done < b.N; done++ {
			logs = append(logs, g.next(scratch)...)
		}
		if firstKey == "" {
			r, _ := DecodeCommand(logs[0].Data)
			firstKey = r.(Admit).Reserve.Key
		}
		f.ApplyBatch(logs)
	}
	b.StopTimer()
	if st := f.Stats(); st.Entries != b.N || st.Jobs != b.N {
		b.Fatalf("%d entries and %d jobs live after %d submissions", st.Entries, st.Jobs, b.N)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	f, err = Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, ok := f.Entry("acme", firstKey); !ok {
		b.Fatal("the first key is missing after reopen")
	}
	reopen := time.Since(start)
	defer f.Close()
	f.s.store.keys.scanDone() // the key counts, scanned in the background
	counted := time.Since(start)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(peakRSS(b))/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(dirBytes(b, dir))/(1<<20), "disk-MiB")
	b.ReportMetric(float64(reopen.Milliseconds()), "reopen-ms")
	b.ReportMetric(float64(counted.Milliseconds()), "counted-ms")
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(b *testing.B) int64 {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
