package runner

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/once-dev/once/tests/chaos/checker"
	"github.com/once-dev/once/tests/chaos/history"
	"github.com/once-dev/once/tests/chaos/nemesis"
	"github.com/once-dev/once/tests/chaos/workload"
)

// Summary is what a run did and found.
type Summary struct {
	Seed    uint64 `json:"seed"`
	Dir     string `json:"dir"`
	Clients int    `json:"clients"`
	// Duration is the workload's window as asked; Ran is how long the
	// workload actually ran (shorter with Options.Rounds; longer by the
	// submissions in flight at the end); Elapsed is the whole run, from the
	// cluster's start to the end of the check.
	Duration time.Duration `json:"duration_ns"`
	Ran      time.Duration `json:"ran_ns"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// Start is the wall-clock start of the history's monotonic clock: an
	// offset in the history plus Start is a time in the processes' logs.
	Start time.Time `json:"start"`
	// Requests is the number of HTTP requests the workload sent (the submit
	// operations of the history); Workload has its per-submission counts.
	Requests int            `json:"requests"`
	Workload workload.Stats `json:"workload"`
	// Answers counts the requests by what they were answered: "201",
	// "201 replayed", "503 unavailable", "timeout", "transport error", ...
	Answers map[string]int `json:"answers"`
	// Faults counts the faults injected by kind; Events lists them.
	Faults map[nemesis.Kind]int `json:"faults"`
	Events []nemesis.Event      `json:"events"`
	// PortClashes counts processes the nemesis started again because their
	// port had been taken while they were down (nemesis.Nemesis.PortClashes):
	// a limit of the harness, not a fault of once.
	PortClashes int `json:"port_clashes,omitempty"`
	// Lists counts the keys of a MultiDC run by the datacenters their
	// submissions named ("dc1,dc2", "omitted"); Homes counts the
	// omitted-list keys by the datacenter that admitted them ("none": no
	// job anywhere, the client gave up).
	Lists map[string]int `json:"lists,omitempty"`
	Homes map[string]int `json:"homes,omitempty"`
	// Check is the checker's result; nil when the check could not run.
	Check *checker.Result `json:"check"`
	// Workers is what the run's workers did (Options.Workers), checked by
	// rule (i); nil without workers.
	Workers *checker.WorkerCounts `json:"workers,omitempty"`
	// Errors are what went wrong with the run itself (not violations).
	Errors []string `json:"errors,omitempty"`
}

// Violations is the number of violations the checker found.
func (s *Summary) Violations() int {
	if s.Check == nil {
		return 0
	}
	return len(s.Check.Violations)
}

// OK reports whether the run completed, was checked, and broke no rule.
func (s *Summary) OK() bool { return len(s.Errors) == 0 && s.Check != nil && s.Check.OK() }

// FaultCount is the number of faults injected.
func (s *Summary) FaultCount() int {
	n := 0
	for _, c := range s.Faults {
		n += c
	}
	return n
}

// Answer classifies one request's outcome for Summary.Answers.
func Answer(op history.Op) string {
	switch {
	case !op.Done:
		return "not completed"
	case op.Timeout:
		return "timeout"
	case op.Err != "":
		return "transport error"
	case op.Status == 201 && op.Replayed == "true":
		return "201 replayed"
	case op.Code != "":
		return strconv.Itoa(op.Status) + " " + op.Code
	}
	return strconv.Itoa(op.Status)
}

func (s *Summary) countAnswers(ops []history.Op) {
	s.Answers = map[string]int{}
	s.Requests = 0
	lists := map[string]int{}
	seen := map[[2]string]bool{}
	for _, op := range ops {
		if op.Kind != history.KindSubmit {
			continue
		}
		s.Requests++
		s.Answers[Answer(op)]++
		if k := [2]string{op.Tenant, op.Key}; !seen[k] {
			seen[k] = true
			list := strings.Join(op.Datacenters, ",")
			if list == "" {
				list = "omitted"
			}
			lists[list]++
		}
	}
	if len(lists) > 1 {
		s.Lists = lists
	}
}

// String is the printable summary: requests, answers, faults, the checker's
// verdict with every violation and its history lines, and errors.
func (s *Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "once chaos run: seed %d, %d clients, workload ran %v (window %v), %v in all\n", s.Seed, s.Clients,
		s.Ran.Round(100*time.Millisecond), s.Duration, s.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "  directory   %s (history: %s)\n", s.Dir, HistoryFile)
	w := s.Workload
	fmt.Fprintf(&b, "  requests    %d for %d submissions (%d duplicated through the other gate); paths: %d committed, %d rejected, %d failed, %d unresolved\n",
		s.Requests, w.Submissions, w.Duplicated, w.Committed, w.Rejected, w.Failed, w.Unresolved)
	fmt.Fprintf(&b, "  answers    ")
	for _, a := range sortedKeys(s.Answers) {
		fmt.Fprintf(&b, " %s: %d;", a, s.Answers[a])
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  faults      %d injected:", s.FaultCount())
	for _, k := range append(slices.Clone(nemesis.AllKinds), federationKinds...) {
		if n, ok := s.Faults[k]; ok {
			fmt.Fprintf(&b, " %s %d;", k, n)
		}
	}
	if s.PortClashes > 0 {
		fmt.Fprintf(&b, " (%d restarts after a port clash)", s.PortClashes)
	}
	b.WriteString("\n")
	if len(s.Lists) > 0 {
		fmt.Fprintf(&b, "  lists      ")
		for _, l := range sortedKeys(s.Lists) {
			fmt.Fprintf(&b, " [%s]: %d;", l, s.Lists[l])
		}
		if len(s.Homes) > 0 {
			b.WriteString(" omitted lists' homes:")
			for _, h := range sortedKeys(s.Homes) {
				fmt.Fprintf(&b, " %s %d;", h, s.Homes[h])
			}
		}
		b.WriteString("\n")
	}
	if wc := s.Workers; wc != nil {
		fmt.Fprintf(&b, "  workers     %d jobs run to an end with %d handler runs (%d redeliveries)\n", wc.Jobs, wc.Runs, wc.Redeliveries)
	}
	switch {
	case s.Check == nil:
		b.WriteString("  violations  not checked\n")
	default:
		fmt.Fprintf(&b, "  violations  %d\n", len(s.Check.Violations))
		b.WriteString("  checker     ")
		b.WriteString(strings.ReplaceAll(s.Check.Summary(), "\n", "\n  "))
		b.WriteString("\n")
	}
	for _, e := range s.Errors {
		for l := range strings.SplitSeq(e, "\n") {
			fmt.Fprintf(&b, "  error       %s\n", l)
		}
	}
	switch {
	case s.OK():
		b.WriteString("PASS: zero violations")
	case s.Violations() > 0:
		fmt.Fprintf(&b, "FAIL: %d violations; reproduce with -seed %d, re-check with oncechaos -recheck %s", s.Violations(), s.Seed, s.Dir)
	default:
		fmt.Fprintf(&b, "FAIL: the run did not complete; reproduce with -seed %d", s.Seed)
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
