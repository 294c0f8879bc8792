// Package ctl is oncectl: the commands, their flags and their output. The
// command tree is github.com/spf13/cobra's (flags, help, shell completion);
// gates are reached with pkg/client, managers with rpc.Client (the gates'
// own client of the managers).
package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/config"
)

// Environment variables, used when the matching flag is not given.
const (
	EnvGates    = "ONCE_GATES"    // --gates
	EnvManagers = "ONCE_MANAGERS" // --managers
	EnvToken    = "ONCE_TOKEN"    // --token
	// EnvClusterSecretFile is --cluster-secret-file: the managers' cluster
	// secret, for managers that require one.
	EnvClusterSecretFile = "ONCE_CLUSTER_SECRET_FILE"
	// EnvOperatorSecretFile is --operator-secret-file: the managers'
	// operator secret (MANAGER_OPERATOR_SECRET_FILE), which the cluster,
	// raft, snapshot, gossip and outbox commands need (docs/security.md).
	EnvOperatorSecretFile = "ONCE_OPERATOR_SECRET_FILE"
	// EnvCACert, EnvCert and EnvKey are --cacert, --cert and --key: the
	// cluster CA and a client certificate it signed, for managers that serve
	// RPC over mutual TLS (as etcdctl's).
	EnvCACert = "ONCE_CACERT"
	EnvCert   = "ONCE_CERT"
	EnvKey    = "ONCE_KEY"
	// EnvInsecure is --insecure: talk to managers that run without a
	// credential (MANAGER_INSECURE=true), over plain HTTP.
	EnvInsecure = "ONCE_INSECURE"
)

// Exit codes: config's, so that every once program agrees.
const (
	ExitOK      = config.ExitOK      // done
	ExitFailure = config.ExitFailure // the cluster refused, failed or could not be reached
	ExitUsage   = config.ExitConfig  // a bad command line: nothing was sent
)

// errUsage marks an error of the command line.
var errUsage = errors.New("usage")

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// globals are the flags every command takes.
type globals struct {
	gates    []string
	managers []string
	token    string
	secret   string // --cluster-secret-file
	// operatorSecret is --operator-secret-file.
	operatorSecret string
	cacert         string // --cacert, --cert, --key
	cert           string
	key            string
	insecure       bool // --insecure
	output         string
	timeout        time.Duration
	// attempt bounds one attempt against one manager (default: timeout).
	attempt time.Duration
	stdout  io.Writer
}

// Main runs oncectl with args and returns its exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "oncectl:", err)
	if errors.Is(err, errUsage) {
		return ExitUsage
	}
	return ExitFailure
}

// exactArgs is cobra.ExactArgs with the error marked as a usage error. An
// empty argument (a job ID, key, server ID or file from an unset shell
// variable) is one too: sent, it would name another path ("no such path")
// or nothing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %s, got %d argument(s)", what, len(args))
		}
		if slices.Contains(args, "") {
			return usagef("want %s, got an empty argument", what)
		}
		return nil
	}
}

// withSubcommands adds subs to parent, a command that only groups them: run
// with arguments, it is a usage error that names subs; without, it prints its
// help. Cobra would print the help and exit 0 for either if parent had no
// RunE: a typo (raft remove-peeer) would look done to a script.
func withSubcommands(parent *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.Name()
	}
	list := names[0]
	if n := len(names); n > 1 {
		list = strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	parent.Args = exactArgs(0, "a subcommand: "+list)
	parent.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	parent.AddCommand(subs...)
	return parent
}

// maxArgs allows up to n arguments, none of them empty: an empty one
// (from an unset shell variable) is not the same as none given, as with
// transfer-leader, where none given hands leadership to any voter.
func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("want at most %s, got %d arguments", what, len(args))
		}
		if slices.Contains(args, "") {
			return usagef("want %s, got an empty argument", what)
		}
		return nil
	}
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "oncectl",
		Short: "Submit and read once jobs, and operate a once datacenter",
		Long: `oncectl talks to once's gates (submit, job, key, cluster view) and managers (cluster status
and members, raft, snapshot, gossip, outbox).

Endpoints come from --gates / --managers, or from ` + EnvGates + ` / ` + EnvManagers + `
(comma-separated); the bearer token from --token or ` + EnvToken + `.
Exit codes: 0 done, 1 the cluster refused or failed, 2 a bad command line.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.output != "table" && g.output != "json" {
				return usagef("-o %q: want json or table", g.output)
			}
			if g.timeout <= 0 {
				return usagef("--timeout %s: want a positive duration", g.timeout)
			}
			// The token is read from the environment here, not as the
			// flag's default, which --help would print.
			if !cmd.Flags().Changed("token") {
				g.token = os.Getenv(EnvToken)
			}
			// ONCE_INSECURE takes the booleans MANAGER_INSECURE takes
			// (true, 1, yes...); empty is unset, as for oncectl's other
			// variables; another value is refused rather than read as false.
			if v := os.Getenv(EnvInsecure); v != "" && !cmd.Flags().Changed("insecure") {
				insecure, err := config.ParseBool(v)
				if err != nil {
					return usagef("%s: %v", EnvInsecure, err)
				}
				g.insecure = insecure
			}
			// A control character (the trailing newline of a secret
			// file) cannot travel in a header: net/http would refuse
			// every attempt. The token is not echoed.
			if headerUnsafe(g.token) {
				return usagef("--token (or %s) holds a control character (a trailing newline?), which an HTTP header cannot carry", EnvToken)
			}
			return nil
		},
	}
	// Unknown commands and bad flags are usage errors (exit 2), as are the
	// commands' own argument checks (exactArgs).
	root.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q (oncectl --help lists them)", args[0])
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.gates, "gates", splitEnv(EnvGates, "http://127.0.0.1:8080"), "gate URLs (env "+EnvGates+")")
	pf.StringSliceVar(&g.managers, "managers", splitEnv(EnvManagers, "127.0.0.1:7101"), "manager RPC addresses host:port (env "+EnvManagers+")")
	pf.StringVar(&g.token, "token", "", "bearer token for the gates (env "+EnvToken+")")
	pf.StringVar(&g.secret, "cluster-secret-file", os.Getenv(EnvClusterSecretFile), "file holding the managers' cluster secret (env "+EnvClusterSecretFile+")")
	pf.StringVar(&g.operatorSecret, "operator-secret-file", os.Getenv(EnvOperatorSecretFile), "file holding the managers' operator secret, for cluster members, raft remove-peer and transfer-leader, snapshot, gossip keyring and outbox forget (env "+EnvOperatorSecretFile+")")
	pf.StringVar(&g.cacert, "cacert", os.Getenv(EnvCACert), "the cluster CA, for managers serving RPC over mutual TLS (env "+EnvCACert+")")
	pf.StringVar(&g.cert, "cert", os.Getenv(EnvCert), "a client certificate the cluster CA signed (env "+EnvCert+")")
	pf.StringVar(&g.key, "key", os.Getenv(EnvKey), "the private key of --cert (env "+EnvKey+")")
	pf.BoolVar(&g.insecure, "insecure", false, "talk to managers running without a credential (MANAGER_INSECURE=true) over plain HTTP; refused with --cluster-secret-file, --operator-secret-file or --cacert (env "+EnvInsecure+"=true)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound on the whole command")
	root.AddCommand(submitCmd(g), jobCmd(g), keyCmd(g), clusterCmd(g), raftCmd(g), snapshotCmd(g), gossipCmd(g), outboxCmd(g))
	return root
}

// protoJSON is how print writes a protobuf message: the field names of the
// .proto (snake_case), and the fields at their zero value too.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// headerUnsafe reports whether a token holds a control character an HTTP
// header cannot carry.
func headerUnsafe(token string) bool {
	return strings.ContainsFunc(token, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f })
}

func splitEnv(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return config.SplitList(v)
}

// print writes v as indented JSON (-o json) or calls table (-o table). A
// protobuf message (the Operator service's answers) is written as protojson
// with the .proto's field names, every field present (an empty list as []),
// indented as the rest.
func (g *globals) print(v any, table func(w *tabwriter.Writer)) error {
	if g.output == "json" {
		var b []byte
		var err error
		if m, ok := v.(proto.Message); ok {
			b, err = protoJSON.Marshal(m)
			if err == nil {
				var buf bytes.Buffer
				err = json.Indent(&buf, b, "", "  ") // protojson's own spacing is unstable by design
				b = buf.Bytes()
			}
		} else {
			b, err = json.MarshalIndent(v, "", "  ")
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(g.stdout, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// printLine writes one event of a command that follows something: v as one
// line of JSON (-o json), or text (-o table).
func (g *globals) printLine(v any, text string) error {
	if g.output == "json" {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		text = string(b)
	}
	_, err := fmt.Fprintln(g.stdout, text)
	return err
}

func (g *globals) context(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}
