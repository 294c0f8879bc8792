package config_test

import (
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/gate"
	"github.com/once-dev/once/internal/manager"
)

// docRow matches a row of docs/configuration.md's tables: the variable, then
// (in the gate's and the idempotency tables) its flag, then its default.
var docRow = regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]+)` \\| (?:`-[a-z0-9-]+` \\| )?([^|]*) \\|")

// documentedDefaults reads the rows of docs/configuration.md: variable →
// default cell.
func documentedDefaults(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := docRow.FindStringSubmatch(line); m != nil {
			rows[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return rows
}

// helpDefault matches a setting of a daemon's -h listing: its variable and
// its default.
var helpDefault = regexp.MustCompile(`(?m)^  -[a-z0-9-]+ / ([A-Z][A-Z0-9_]+) \(default "(.*)"\)$`)

// sameDefault reports whether the documented default cell names def, the
// default -h shows: its first code span is def, or the same duration. -h
// shows a default that depends on another setting as "" or "0", which the
// page describes in words ("`data/<node-id>`", one value per store); a
// node's name defaults to the host name.
func sameDefault(cell, def string) bool {
	if def == "" || def == "0" {
		return true
	}
	if host, err := os.Hostname(); err == nil && def == host && strings.Contains(cell, "host name") {
		return true
	}
	m := regexp.MustCompile("`([^`]*)`").FindStringSubmatch(cell)
	if m == nil {
		return false
	}
	if m[1] == def {
		return true
	}
	d1, err1 := time.ParseDuration(m[1])
	d2, err2 := time.ParseDuration(def)
	return err1 == nil && err2 == nil && d1 == d2
}

// Every setting of both daemons has its row in docs/configuration.md with
// the default their -h shows, and every GATE_*, MANAGER_* and IDEMPOTENCY_*
// row there is a setting of one of them.
func TestConfigurationPageListsEverySettingWithItsDefault(t *testing.T) {
	rows := documentedDefaults(t)
	read := map[string]bool{}
	noEnv := func(string) (string, bool) { return "", false }
	for _, d := range []struct {
		daemon string
		load   func(usage io.Writer) error
	}{
		{"gate", func(w io.Writer) error { _, err := gate.LoadConfig([]string{"-h"}, noEnv, w); return err }},
		{"manager", func(w io.Writer) error { _, err := manager.LoadConfig([]string{"-h"}, noEnv, w); return err }},
	} {
		var help strings.Builder
		if err := d.load(&help); !errors.Is(err, config.ErrHelp) {
			t.Fatalf("%s -h: %v, want config.ErrHelp", d.daemon, err)
		}
		settings := helpDefault.FindAllStringSubmatch(help.String(), -1)
		if len(settings) == 0 {
			t.Fatalf("%s -h lists no setting:\n%s", d.daemon, help.String())
		}
		for _, m := range settings {
			env, def := m[1], m[2]
			read[env] = true
			cell, ok := rows[env]
			switch {
			case !ok:
				t.Errorf("%s reads %s, which docs/configuration.md does not list", d.daemon, env)
			case !sameDefault(cell, def):
				t.Errorf("docs/configuration.md gives %s the default %q; the %s's -h shows %q", env, cell, d.daemon, def)
			}
		}
	}
	for env := range rows {
		daemonPrefix := strings.HasPrefix(env, "GATE_") || strings.HasPrefix(env, "MANAGER_") || strings.HasPrefix(env, "IDEMPOTENCY_")
		if daemonPrefix && !read[env] {
			t.Errorf("docs/configuration.md lists %s, which neither daemon reads", env)
		}
	}
}
