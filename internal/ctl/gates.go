package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/pkg/keys"
)

// client returns a pkg/client for the gates; keys, when set, makes the keys
// of submissions.
func (g *globals) client(keys *client.Keys) (*client.Client, error) {
	c, err := client.New(g.gates, client.Options{Keys: keys, Token: g.token, MaxAttempts: 5})
	if err != nil {
		return nil, usagef("--gates: %v", err)
	}
	return c, nil
}

// withGates runs do with a gate client and the command's context.
func (g *globals) withGates(cmd *cobra.Command, keys *client.Keys, do func(context.Context, *client.Client) error) error {
	c, err := g.client(keys)
	if err != nil {
		return err
	}
	ctx, cancel := g.context(cmd)
	defer cancel()
	return do(ctx, c)
}

func submitCmd(g *globals) *cobra.Command {
	var typ, payload, key, keysFile string
	var dcs []string
	cmd := &cobra.Command{
		Use:   "submit --type T [--payload JSON] [--key K] [--datacenter dc ...]",
		Short: "Submit a job (retried with the same key until the gates answer for good)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if typ == "" {
				return usagef("--type is required")
			}
			if err := noEmptyName(cmd, "datacenter", "datacenter name", dcs); err != nil {
				return err
			}
			// --payload "" would submit the job without a payload.
			if err := noEmptyValue(cmd, "payload", "payload", payload); err != nil {
				return err
			}
			if err := noEmptyKeyFlags(cmd, key, keysFile); err != nil {
				return err
			}
			job := api.JobRequest{Type: typ, Datacenters: dcs}
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return usagef("--payload is not JSON: %s", payload)
				}
				job.Payload = json.RawMessage(payload)
			}
			keys, err := keysUnless(key, keysFile)
			if err != nil {
				return err
			}
			return g.withGates(cmd, keys, func(ctx context.Context, c *client.Client) error {
				var res *client.Result
				var err error
				if key != "" {
					res, err = c.SubmitWithKey(ctx, key, job)
				} else {
					res, err = c.Submit(ctx, job)
				}
				if err != nil {
					return err
				}
				return g.print(res, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "JOB ID\tKEY\tSTATUS\tREPLAYED")
					fmt.Fprintf(w, "%s\t%s\t%s\t%v\n", res.Job.JobID, res.Key, res.Job.Status, res.Replayed)
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&typ, "type", "", "the job's type (required)")
	f.StringVar(&payload, "payload", "", "the job's payload, JSON")
	f.StringVar(&key, "key", "", "the Idempotency-Key; default: a new key from the keys file")
	f.StringVar(&keysFile, "keys-file", "", "the keys file (client id and sequence); default: <user config dir>/oncectl/keys")
	f.StringSliceVar(&dcs, "datacenter", nil, "a datacenter the job must run in (repeatable); default: the gate's own")
	return cmd
}

func jobCmd(g *globals) *cobra.Command {
	job := &cobra.Command{Use: "job", Aliases: []string{"jobs"}, Short: "Read, cancel and retry jobs"}
	get := &cobra.Command{
		Use:   "get JOB_ID",
		Short: "Show one job",
		Args:  exactArgs(1, "one job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withGates(cmd, nil, func(ctx context.Context, c *client.Client) error {
				j, err := c.GetJob(ctx, args[0])
				if err != nil {
					return err
				}
				return g.print(j, func(w *tabwriter.Writer) { jobTable(w, []api.Job{*j}) })
			})
		},
	}
	var opts client.ListOptions
	var max int
	list := &cobra.Command{
		Use:   "list [--type T] [--status S] [--max N] [--newest-first]",
		Short: "List jobs, newest admission last (or first), following the gate's pages",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if max < 1 {
				return usagef("--max %d: want at least 1", max)
			}
			// A filter given "" would list every job.
			for _, f := range []struct{ flag, value string }{{"type", opts.Type}, {"status", opts.Status}, {"state", opts.State}} {
				if err := noEmptyValue(cmd, f.flag, f.flag, f.value); err != nil {
					return err
				}
			}
			return g.withGates(cmd, nil, func(ctx context.Context, c *client.Client) error {
				jobs := []api.Job{}
				for j, err := range c.ListJobs(ctx, opts) {
					if err != nil {
						return err
					}
					jobs = append(jobs, j)
					if len(jobs) == max {
						break
					}
				}
				return g.print(jobs, func(w *tabwriter.Writer) { jobTable(w, jobs) })
			})
		},
	}
	list.Flags().StringVar(&opts.Type, "type", "", "only jobs of this type")
	list.Flags().StringVar(&opts.Status, "status", "", "only jobs of this status: committed is every job, another none (a lifecycle state is --state)")
	list.Flags().StringVar(&opts.State, "state", "", "only jobs in this worker lifecycle state: queued, running, succeeded, failed, dead or cancelled")
	list.Flags().IntVar(&max, "max", 100, "stop after this many jobs")
	list.Flags().BoolVar(&opts.Desc, "newest-first", false, "list the newest jobs first (with --max: the newest N)")
	var interval time.Duration
	var dcs []string
	watch := &cobra.Command{
		Use:   "watch JOB_ID [--datacenters dc1,dc2]",
		Short: "Follow a job until every datacenter holds it",
		Long: `Follow a job until each of --datacenters holds it (default: the datacenters
its submission named, its named_datacenters; a job of one datacenter, that one): one line
whenever what the datacenters hold changes (a datacenter that was unreachable
at submission gets the job later, from the other datacenters' outboxes).
Exits 0 once every datacenter holds the job, 1 when --timeout passes first or
the job is not found anywhere (gates that do not answer for a while are
asked again after --interval).`,
		Args: exactArgs(1, "one job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usagef("--interval %v: want a positive duration", interval)
			}
			// An empty name would read the gate's own copy (?datacenter=
			// empty is no datacenter named) and print it as "=committed".
			if err := noEmptyName(cmd, "datacenters", "datacenter name", dcs); err != nil {
				return err
			}
			return g.withGates(cmd, nil, func(ctx context.Context, c *client.Client) error {
				return g.watchJob(ctx, c, args[0], dcs, interval)
			})
		},
	}
	watch.Flags().DurationVar(&interval, "interval", time.Second, "how often to read the job")
	watch.Flags().StringSliceVar(&dcs, "datacenters", nil, "the datacenters that must hold the job (default: those its submission named)")
	return withSubcommands(job, get, list, watch,
		jobActionCmd(g, "cancel", "Cancel a queued job: it ends cancelled and is never leased", (*client.Client).Cancel),
		jobActionCmd(g, "retry", "Give a failed or dead job a new attempt under the same job ID (queued again)", (*client.Client).Retry),
		workCmd(g))
}

// noEmptyName refuses a list flag given an empty name: an entry of
// "dc1,,dc2", or the flag given "" (an unset shell variable), which pflag
// reads as no name at all, the command's default (the gate's own
// datacenter for submit, every type for job work) rather than the one meant.
// what names an entry ("datacenter name").
func noEmptyName(cmd *cobra.Command, flag, what string, names []string) error {
	if slices.Contains(names, "") || cmd.Flags().Changed(flag) && len(names) == 0 {
		return usagef("--%s %q: an empty %s", flag, strings.Join(names, ","), what)
	}
	return nil
}

// noEmptyValue is noEmptyName for a flag of one value: given "" (an unset
// shell variable), it would be taken for the flag not given, the command's
// default (every job for job list --type, a new key for --key) rather than
// the value meant. Not given, the flag keeps its default.
func noEmptyValue(cmd *cobra.Command, flag, what, value string) error {
	if !cmd.Flags().Changed(flag) {
		return nil
	}
	return noEmptyName(cmd, flag, what, []string{value})
}

// noEmptyKeyFlags refuses --key "" and --keys-file "": the first would take
// a new key from the keys file, and a run repeated to retry an action would
// act again (a second job for submit) rather than replay the first; the
// second would use the default keys file.
func noEmptyKeyFlags(cmd *cobra.Command, key, keysFile string) error {
	if err := noEmptyValue(cmd, "key", "idempotency key", key); err != nil {
		return err
	}
	return noEmptyValue(cmd, "keys-file", "file name", keysFile)
}

// keysUnless opens the keys file when no --key was given: the client then
// takes a new key from it. A --key given must be a key (docs/api.md): a
// malformed one is a bad command line, and nothing is sent. The keys file
// is keysFile, by default where oncectl keeps its client id and sequence
// (pkg/client's Keys file), so that its submissions have keys that never
// repeat. The directories it creates for the file are made durable
// (atomicfile.MkdirAll): a crash must not take away the directory, and
// with it the file's reservation of sequences.
func keysUnless(key, keysFile string) (*client.Keys, error) {
	if key != "" {
		if _, err := keys.Parse(key); err != nil {
			return nil, usagef("--key %q: %v", key, err)
		}
		return nil, nil
	}
	if keysFile == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return nil, usagef("no place for the keys file (give --keys-file): %v", err)
		}
		keysFile = filepath.Join(dir, "oncectl", "keys")
	}
	if err := atomicfile.MkdirAll(filepath.Dir(keysFile), 0o700); err != nil {
		return nil, usagef("--keys-file: %v", err)
	}
	k, err := client.OpenKeys(keysFile, client.KeysOptions{})
	if err != nil {
		// Nothing was sent: another --keys-file, or --key, is the way on.
		return nil, usagef("--keys-file: %v", err)
	}
	return k, nil
}

// jobActionCmd is job cancel or job retry: the action under --key, or a new
// key from the keys file, retried with that key until the gates answer for
// good; it prints the job as it is after the action.
func jobActionCmd(g *globals, action, short string, do func(*client.Client, context.Context, string, string) (*client.Result, error)) *cobra.Command {
	var key, keysFile string
	cmd := &cobra.Command{
		Use:   action + " JOB_ID [--key K]",
		Short: short,
		Args:  exactArgs(1, "one job ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := noEmptyKeyFlags(cmd, key, keysFile); err != nil {
				return err
			}
			keys, err := keysUnless(key, keysFile)
			if err != nil {
				return err
			}
			return g.withGates(cmd, keys, func(ctx context.Context, c *client.Client) error {
				res, err := do(c, ctx, args[0], key)
				if err != nil {
					return err
				}
				return g.print(res, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "JOB ID\tKEY\tSTATE\tATTEMPTS\tREPLAYED")
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%v\n", res.Job.JobID, res.Key, res.Job.State, res.Job.Attempts, res.Replayed)
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&key, "key", "", "the Idempotency-Key of the "+action+"; default: a new key from the keys file (send the same key to repeat it)")
	f.StringVar(&keysFile, "keys-file", "", "the keys file (client id and sequence); default: <user config dir>/oncectl/keys")
	return cmd
}

// ErrWatchTimeout: job watch's --timeout passed before every datacenter held
// the job.
var ErrWatchTimeout = errors.New("not every datacenter holds the job yet")

// jobView is what job watch prints: each datacenter's copy of the job (its
// status, "missing", or "unreachable").
type jobView struct {
	Time        string            `json:"time"`
	JobID       string            `json:"job_id"`
	Datacenters map[string]string `json:"datacenters"`
	Complete    bool              `json:"complete"`
}

func (v jobView) line() string {
	var parts []string
	for _, dc := range slices.Sorted(maps.Keys(v.Datacenters)) {
		parts = append(parts, dc+"="+v.Datacenters[dc])
	}
	return strings.Join(parts, " ")
}

func (g *globals) watchJob(ctx context.Context, c *client.Client, id string, dcs []string, interval time.Duration) error {
	last := ""
	var unansweredErr error // the last read the gates did not answer, before any was
	timedOut := func() error {
		switch {
		case last != "":
			return fmt.Errorf("%w (%s)", ErrWatchTimeout, last)
		case unansweredErr != nil:
			return fmt.Errorf("%w (no gate has answered a read of the job: %v)", ErrWatchTimeout, unansweredErr)
		}
		return fmt.Errorf("%w (no gate has answered a read of the job)", ErrWatchTimeout)
	}
	for {
		view, err := readJobView(ctx, c, id, dcs)
		switch {
		case err != nil && ctx.Err() != nil:
			return timedOut()
		case err != nil && !unanswered(err):
			return err // the job is not found anywhere, the token is refused…
		case err != nil:
			// The gates did not answer for now (down, 503 until the
			// client's attempts ran out): the job's copies may still
			// arrive; read again after the interval, as for a copy's
			// datacenter that is unreachable.
			unansweredErr = err
		default:
			if l := view.line(); l != last {
				last = l
				if err := g.printLine(view, view.Time+"  "+l); err != nil {
					return err
				}
			}
			if view.Complete {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return timedOut()
		case <-time.After(interval):
		}
	}
}

// unanswered reports whether a read's error says the gates did not answer
// for now (no connection, a 5xx, 408 or 429 until the attempts ran out)
// rather than answer for good (404 job_not_found, 401…).
func unanswered(err error) bool {
	var e *client.Error
	if !errors.As(err, &e) {
		return true
	}
	return e.Status >= 500 || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests
}

// readJobView reads the job wherever it is, then each datacenter's copy
// (dcs, or the datacenters its submission named: named_datacenters, or the
// copy's own datacenter for a job of one).
func readJobView(ctx context.Context, c *client.Client, id string, dcs []string) (jobView, error) {
	// GetJob runs without ctx's deadline, only ended with it: a client
	// that sees a deadline gives up before it when its next attempt would
	// start past it (a Retry-After longer than the time left), with an
	// error of its own while ctx has not ended, which watchJob would print
	// instead of ErrWatchTimeout. A copy's read keeps the deadline: its
	// early end is the datacenter's "unreachable".
	calls, stop := detach(ctx, context.Background())
	j, err := c.GetJob(calls, id)
	stop()
	if err != nil {
		return jobView{}, err
	}
	switch {
	case len(dcs) > 0:
	case len(j.NamedDatacenters) > 0: // a job of several datacenters
		dcs = j.NamedDatacenters
	default:
		dcs = slices.Collect(maps.Keys(j.Datacenters))
	}
	v := jobView{Time: time.Now().UTC().Format(time.RFC3339), JobID: j.JobID, Datacenters: map[string]string{}, Complete: true}
	for _, dc := range dcs {
		copyIn, err := c.GetJobIn(ctx, id, dc)
		switch {
		case errors.Is(err, client.ErrJobNotFound):
			v.Datacenters[dc], v.Complete = "missing", false
		case ctx.Err() != nil:
			return jobView{}, ctx.Err()
		case err != nil:
			// Down or cut off (503 after the client's retries, no answer):
			// the job may reach it later; keep watching.
			v.Datacenters[dc], v.Complete = "unreachable", false
		default:
			v.Datacenters[dc] = copyIn.Status
		}
	}
	return v, nil
}

func jobTable(w *tabwriter.Writer, jobs []api.Job) {
	fmt.Fprintln(w, "JOB ID\tTYPE\tSTATUS\tCREATED\tDATACENTERS\tKEY")
	for _, j := range jobs {
		var dcs []string
		for dc, st := range j.Datacenters {
			dcs = append(dcs, dc+":"+st.Status)
		}
		sort.Strings(dcs)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\n", j.JobID, j.Type, j.Status, j.CreatedAt, dcs, j.IdempotencyKey)
	}
}

func keyCmd(g *globals) *cobra.Command {
	key := &cobra.Command{Use: "key", Short: "Read idempotency keys"}
	return withSubcommands(key, &cobra.Command{
		Use:   "get KEY",
		Short: "Show the ledger's entry of an idempotency key",
		Args:  exactArgs(1, "one key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withGates(cmd, nil, func(ctx context.Context, c *client.Client) error {
				k, err := c.GetKey(ctx, args[0])
				if err != nil {
					return err
				}
				return g.print(k, func(w *tabwriter.Writer) {
					id := "-"
					if k.JobID != nil {
						id = *k.JobID
					}
					fmt.Fprintln(w, "KEY\tSTATE\tJOB ID\tEXPIRES AT")
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", k.Key, k.State, id, k.ExpiresAt)
				})
			})
		},
	})
}
