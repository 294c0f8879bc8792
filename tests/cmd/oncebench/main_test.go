package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSubcommands(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{nil, exitUsage, "usage: oncebench <subcommand>"},
		{[]string{"-cluster"}, exitUsage, `unknown subcommand "-cluster"`},
		{[]string{"bench"}, exitUsage, `unknown subcommand "bench"`},
		{[]string{"help"}, 0, "cluster"},
		{[]string{"cluster", "-h"}, 0, "usage: oncebench cluster"},
		{[]string{"load", "-h"}, 0, "usage: oncebench load"},
		{[]string{"cluster", "-duration", "0s"}, exitUsage, "must be positive"},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.inStderr) {
			t.Errorf("oncebench %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), tc.code, tc.inStderr)
		}
	}
}
