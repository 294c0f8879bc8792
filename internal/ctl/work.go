package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// exitPermanent is the exit status of a job command that failed for good
// (EX_DATAERR of sysexits.h): the job is failed without a retry.
const exitPermanent = 65

// maxCommandOutput bounds what is kept of a job command's stdout (its
// result) and stderr (its error).
const maxCommandOutput = 1 << 20

// workCmd is `oncectl job work -- COMMAND [ARGS]`: a worker that runs a
// command per job (docs/workers.md, docs/oncectl.md).
func workCmd(g *globals) *cobra.Command {
	var opts client.WorkerOptions
	cmd := &cobra.Command{
		Use:   "work [--types T,...] [--concurrency N] [--lease D] -- COMMAND [ARGS...]",
		Short: "Run a command for each job leased, until interrupted",
		Long: `Lease jobs of the caller's tenant and run COMMAND for each: the job's JSON
on its stdin, ONCE_JOB_ID, ONCE_JOB_TYPE and ONCE_JOB_ATTEMPT in its
environment. Exit 0 completes the job with the command's stdout as its result
(JSON as is; other text as a JSON string; nothing as null); exit 65
(EX_DATAERR) fails it without a retry; any other exit fails the attempt (the
job is retried after the leader's backoff, until its last attempt), with the
end of stderr as the error. The lease is heartbeated while the command runs;
a lost lease kills the command. Delivery is at least once: the command may
see a job again (use ONCE_JOB_ID to make it idempotent). Runs until SIGINT
or SIGTERM, then waits for the running commands.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("a command to run for each job, after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Concurrency < 1 || opts.Concurrency > 100 {
				return usagef("--concurrency %d: want 1 to 100", opts.Concurrency)
			}
			if opts.LeaseFor < time.Second || opts.LeaseFor > time.Hour {
				return usagef("--lease %v: want 1s to 1h", opts.LeaseFor)
			}
			// --types "" would lease every type, for a command meant for some.
			if err := noEmptyName(cmd, "types", "type name", opts.Types); err != nil {
				return err
			}
			// --worker "" would name the leases by the worker's address.
			if err := noEmptyValue(cmd, "worker", "worker name", opts.Worker); err != nil {
				return err
			}
			// A command that cannot be found would fail every job leased,
			// one attempt after the other, until each ended dead.
			if _, err := exec.LookPath(args[0]); err != nil {
				return usagef("COMMAND: %v", err)
			}
			c, err := g.client(nil)
			if err != nil {
				return err
			}
			opts.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			run := cmd.Context()
			return c.Run(run, opts, func(ctx context.Context, job api.Job, attempt int) (any, error) {
				// client.Run ends a handler's context both when its lease is
				// lost and when the worker stops (run, Main's context: SIGINT,
				// SIGTERM). Only the first kills the command: on a stop the
				// worker waits for the running commands, and reports their
				// outcomes, as documented; killing them would report each a
				// failed attempt (a job on its last one would end dead because
				// a worker stopped). A lease lost after the stop began no
				// longer kills the command: its outcome is then not reported
				// (client.Run), and delivery is at least once.
				cctx, cancel := detach(ctx, run)
				defer cancel()
				return runJobCommand(cctx, args, job, attempt)
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&opts.Types, "types", nil, "only jobs of these types (default: every type)")
	f.IntVar(&opts.Concurrency, "concurrency", 1, "commands run at once")
	f.DurationVar(&opts.LeaseFor, "lease", 30*time.Second, "how long a job is held between heartbeats")
	f.StringVar(&opts.Worker, "worker", "", "the worker's name in its leases (default: its address)")
	return cmd
}

// detach is ctx without its deadline, cancelled when ctx ends unless
// stopping has ended by then.
func detach(ctx, stopping context.Context) (context.Context, context.CancelFunc) {
	d, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if stopping.Err() == nil {
			cancel()
		}
	})
	return d, func() { stop(); cancel() }
}

// runJobCommand runs args for job and turns its outcome into a result or an
// error for client.Run.
func runJobCommand(ctx context.Context, args []string, job api.Job, attempt int) (any, error) {
	in, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the job: %v", client.ErrPermanent, err)
	}
	c := exec.CommandContext(ctx, args[0], args[1:]...)
	c.Stdin = bytes.NewReader(in)
	c.Env = append(os.Environ(), "ONCE_JOB_ID="+job.JobID, "ONCE_JOB_TYPE="+job.Type, "ONCE_JOB_ATTEMPT="+strconv.Itoa(attempt))
	var stdout, stderr capped
	c.Stdout, c.Stderr = &stdout, &stderr
	err = c.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		out := bytes.TrimSpace(stdout.b)
		switch {
		case len(out) == 0:
			return nil, nil
		case json.Valid(out):
			return json.RawMessage(out), nil
		}
		return string(out), nil
	case errors.As(err, &exit) && exit.ExitCode() == exitPermanent:
		return nil, fmt.Errorf("%w: %s", client.ErrPermanent, tail(stderr.b, err))
	}
	return nil, errors.New(tail(stderr.b, err))
}

// tail is the end of a command's stderr, or its exit error.
func tail(stderr []byte, err error) string {
	s := string(bytes.TrimSpace(stderr))
	if s == "" {
		return err.Error()
	}
	if len(s) > api.MaxJobErrorBytes {
		// Start at a character: the bytes of one cut in two would travel
		// as U+FFFD each.
		start := len(s) - api.MaxJobErrorBytes
		for start < len(s) && !utf8.RuneStart(s[start]) {
			start++
		}
		s = s[start:]
	}
	return s
}

// capped keeps the first maxCommandOutput bytes written to it.
type capped struct{ b []byte }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxCommandOutput - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}
