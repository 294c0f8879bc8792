package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints results as an aligned table, one row per result, latencies
// in milliseconds, followed by a line per result for anything that needs a
// second look: non-2xx answers by status and code, transport errors, keys
// answered with more than one job_id, the longest gap and the disruption.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tmode\trequests\tdropped\tsecs\treq/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\t2xx\treplayed\tnon-2xx\terrors\tkeys\tjob ids/key\t")
	for _, r := range results {
		ids := strconv.FormatInt(r.MaxJobIDsPerKey, 10)
		if r.MaxJobIDsPerKey > 1 {
			ids += " DUP!"
		}
		var errs int64
		for _, n := range r.Errors {
			errs += n
		}
		ok := r.OK()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n",
			r.Name, modeText(r), r.Requests, r.Dropped, r.DurationSec, r.RequestsPerSec,
			msText(r.Latency.P50US), msText(r.Latency.P90US), msText(r.Latency.P99US),
			msText(r.Latency.P999US), msText(r.Latency.MaxUS),
			ok, r.Replayed, r.Answered-ok, errs, r.Keys, ids)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		var notes []string
		if r.ServiceLatency != nil && r.ServiceLatency.Count > 0 {
			notes = append(notes, fmt.Sprintf("service time (from actual send) p50 %s p99 %s max %s ms",
				msText(r.ServiceLatency.P50US), msText(r.ServiceLatency.P99US), msText(r.ServiceLatency.MaxUS)))
		}
		if s := statusText(r); s != "" {
			notes = append(notes, "non-2xx: "+s)
		}
		if len(r.Errors) > 0 {
			notes = append(notes, "errors: "+countsText(r.Errors))
		}
		if r.Gap != nil {
			notes = append(notes, fmt.Sprintf("longest gap without a 2xx: %.1f ms from %.1f ms", r.Gap.LengthMS, r.Gap.StartMS))
		}
		if r.DisruptedAtMS != nil {
			n := fmt.Sprintf("%s at %.1f ms", r.Spec.Disrupt, *r.DisruptedAtMS)
			if r.DisruptError != "" {
				n += " (failed: " + r.DisruptError + ")"
			}
			notes = append(notes, n)
		}
		if r.KeysWithMultipleJobIDs > 0 {
			notes = append(notes, fmt.Sprintf("DUPLICATE JOBS: %d keys answered with more than one job_id", r.KeysWithMultipleJobIDs))
		}
		if r.Interrupted {
			notes = append(notes, "interrupted")
		}
		for _, n := range notes {
			if _, err := fmt.Fprintf(w, "  %s: %s\n", r.Name, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteTimeline prints a result's per-second timeline.
func WriteTimeline(w io.Writer, r Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s second\t2xx\tnon-2xx\terrors\tdropped\tmax ms\t\n", r.Name)
	for _, b := range r.Timeline {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t\n", b.Second, b.OK, b.Failed, b.Errors, b.Dropped, msText(b.MaxLatencyUS))
	}
	return tw.Flush()
}

func modeText(r Result) string {
	if r.Mode == "open" {
		return fmt.Sprintf("open %g/s c=%d", r.Spec.Rate, r.Spec.Concurrency)
	}
	return fmt.Sprintf("closed c=%d", r.Spec.Concurrency)
}

func msText(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 2, 64) }

// statusText renders non-2xx statuses with their problem codes, e.g.
// "503×12 (unavailable×12)".
func statusText(r Result) string {
	var parts []string
	for _, st := range slices.Sorted(maps.Keys(r.Status)) {
		if st >= 200 && st < 300 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d×%d", st, r.Status[st]))
	}
	if len(parts) == 0 {
		return ""
	}
	s := strings.Join(parts, " ")
	if len(r.Codes) > 0 {
		s += " (" + countsText(r.Codes) + ")"
	}
	return s
}

func countsText(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
