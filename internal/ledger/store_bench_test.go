package ledger

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkDiskLiveKeys: b.N submissions (Reserve + Commit, small payload)
// that stay live, applied in batches of 64 to a disk-backed FSM; then the
// FSM is closed and reopened as a restarting manager would. It reports the
// process's peak RSS, the heap left after a GC, the bytes on disk, how
// long the reopen took until a read was answered, and until the key counts
// were scanned (engine/keys.go; reads go to pebble until then). docs/benchmarks.md has the
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
	f.s.store.Keys().ScanDone() // the key counts, scanned in the background
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
