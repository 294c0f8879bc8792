package benchrun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// clockTick is the kernel's USER_HZ, the unit of the CPU times in
// /proc/<pid>/stat and /proc/stat. It is 100 on every Linux this runs on
// (glibc's sysconf(_SC_CLK_TCK) has returned the constant since 2.6).
const clockTick = 100

// procCPU returns a process's CPU time (user + system) in clock ticks, from
// /proc/<pid>/stat (pid 0: this process).
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// parseProcStat reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat
// line. The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command field")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, f[11]; stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("proc stat: %w", err)
	}
	return u + s, nil
}

// procIO returns a process's read- and write-class system calls (syscr +
// syscw of /proc/<pid>/io: read, write and their vector and positional
// forms, on files and sockets alike; not fsync, futex or epoll_wait).
func procIO(pid int) (int64, error) {
	b, err := os.ReadFile(procPath(pid, "io"))
	if err != nil {
		return 0, err
	}
	return parseProcIO(b)
}

func parseProcIO(b []byte) (int64, error) { return sumFields(b, "proc io", "syscr", "syscw") }

// procSwitches returns a process's context switches, voluntary (a thread
// blocked: a wake-up later) and involuntary (preempted), summed over its
// threads (/proc/<pid>/task/*/status): a goroutine hand-off that parks or
// wakes an OS thread is one. Threads that exited are not counted; the Go
// runtime keeps its threads.
func procSwitches(pid int) (int64, error) {
	dir := procPath(pid, "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited meanwhile
		}
		n, err := parseSwitches(b)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

func parseSwitches(b []byte) (int64, error) {
	return sumFields(b, "proc status", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
}

// sumFields sums the integer values of the "name: value" lines of b named
// a and b; both must be there. what names the file in errors.
func sumFields(text []byte, what, a, b string) (int64, error) {
	var sum int64
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != a && name != b) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", what, name, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("%s: %s or %s missing", what, a, b)
	}
	return sum, nil
}

// procMem returns a process's resident set size and its high-water mark, in
// bytes, from /proc/<pid>/status (VmRSS, VmHWM).
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(procPath(pid, "status"))
	if err != nil {
		return 0, 0, err
	}
	return parseProcStatus(b)
}

func parseProcStatus(b []byte) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	found := 0
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("proc status: %s: unexpected %q", name, val)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("proc status: %s: %w", name, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("proc status: VmRSS or VmHWM missing")
	}
	return rss, hwm, nil
}

// systemCPU returns the machine's busy and total CPU time in clock ticks, all
// CPUs together, from the first line of /proc/stat. Busy is everything but
// idle and iowait.
func systemCPU() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseSystemStat(b)
}

func parseSystemStat(b []byte) (busy, total int64, err error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, errors.New("/proc/stat: no cpu line")
	}
	// user nice system idle iowait irq softirq steal guest guest_nice; guest
	// time is already counted in user, so stop at steal.
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

func procPath(pid int, file string) string {
	if pid == 0 {
		return "/proc/self/" + file
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// loadAvg returns /proc/loadavg's three averages as text ("0.52 0.58 0.59").
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if name, val, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return ""
}

// memTotal returns MemTotal from /proc/meminfo in bytes.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if name, val, ok := strings.Cut(sc.Text(), ":"); ok && name == "MemTotal" {
			f := strings.Fields(val)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return 0
}

// kernelRelease returns /proc/sys/kernel/osrelease.
func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// parseMetrics sums a Prometheus text exposition's samples by sample name
// (over all label sets), keeping the names accept selects. It parses with
// prometheus/common's expfmt (which replaced a hand-written parser here): a
// histogram or summary family F gives the samples F_count and F_sum. An
// exposition that does not parse gives what was read before the error.
func parseMetrics(b []byte, accept func(name string) bool) map[string]float64 {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, _ := parser.TextToMetricFamilies(bytes.NewReader(b))
	out := map[string]float64{}
	add := func(name string, v float64) {
		if accept(name) {
			out[name] += v
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				add(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				add(name, m.GetGauge().GetValue())
			case m.Untyped != nil:
				add(name, m.GetUntyped().GetValue())
			case m.Histogram != nil:
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
				add(name+"_sum", m.GetHistogram().GetSampleSum())
			case m.Summary != nil:
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
				add(name+"_sum", m.GetSummary().GetSampleSum())
			}
		}
	}
	return out
}

// fsType returns the type of the file system holding path (the longest
// mount point of /proc/mounts that contains it), e.g. "ext4" or "tmpfs": an
// fsync on tmpfs costs nothing, which changes every figure.
func fsType(path string) string {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return ""
	}
	best, typ := -1, ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, typ = len(mp), f[2]
		}
	}
	return typ
}
