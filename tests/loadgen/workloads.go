package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// ErrUnknownWorkload is returned by Workload for a name that is not defined.
var ErrUnknownWorkload = errors.New("unknown workload")

// DisruptKillLeader is the Disrupt value of the failover workload: the
// orchestrator kills the datacenter's manager leader at DisruptAt.
const DisruptKillLeader = "kill-leader"

// builtin holds the standard workloads. They carry no gates: the caller sets
// Spec.Gates (and, for failover, OnDisrupt).
var builtin = []Spec{
	{
		Name:        "unique",
		Description: "closed loop, every request a new key: admission throughput",
		Keys:        KeysUnique, Concurrency: 32, Duration: Duration(10 * time.Second),
	},
	{
		Name:        "duplicates",
		Description: "closed loop, 90% of requests repeat one of the worker's last 128 keys: replay path",
		Keys:        KeysDuplicates, DuplicateRatio: 0.9, RecentKeys: 128, Concurrency: 32, Duration: Duration(10 * time.Second),
	},
	{
		Name:        "storm",
		Description: "256 goroutines released together, one key: exactly one job may result",
		Keys:        KeysStorm, Concurrency: 256, Requests: 256, Warmup: true,
	},
	{
		Name:        "open-unique",
		Description: "open loop at 1000 req/s, new keys: latency without coordinated omission",
		Keys:        KeysUnique, Rate: 1000, Concurrency: 64, Duration: Duration(10 * time.Second),
	},
	{
		Name:        "payload-64k",
		Description: "closed loop, new keys, 64 KiB payloads: replication bandwidth",
		Keys:        KeysUnique, PayloadBytes: 64 << 10, Concurrency: 16, Duration: Duration(10 * time.Second),
	},
	{
		Name:        "failover",
		Description: "open loop at 500 req/s for 20s, the leader killed at 10s: availability gap",
		Keys:        KeysUnique, Rate: 500, Concurrency: 64, Duration: Duration(20 * time.Second),
		Timeline: true, Disrupt: DisruptKillLeader, DisruptAt: Duration(10 * time.Second),
	},
}

// Workloads returns copies of the built-in workloads, in order.
func Workloads() []Spec {
	out := make([]Spec, len(builtin))
	for i, s := range builtin {
		out[i] = clone(s)
	}
	return out
}

// Workload returns a copy of the built-in workload called name.
func Workload(name string) (Spec, error) {
	return lookup(builtin, name)
}

func lookup(list []Spec, name string) (Spec, error) {
	for _, s := range list {
		if s.Name == name {
			return clone(s), nil
		}
	}
	names := make([]string, len(list))
	for i, s := range list {
		names[i] = s.Name
	}
	return Spec{}, fmt.Errorf("%w %q (have %v)", ErrUnknownWorkload, name, names)
}

// ReadWorkloads decodes a JSON array of Specs (a workload file). Unknown fields
// are errors, so a typo does not silently fall back to a default.
func ReadWorkloads(r io.Reader) ([]Spec, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var list []Spec
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("workload file: %w", err)
	}
	for i, s := range list {
		if s.Name == "" {
			return nil, fmt.Errorf("workload file: entry %d has no name", i)
		}
	}
	return list, nil
}

func clone(s Spec) Spec {
	s.Gates = slices.Clone(s.Gates)
	s.Datacenters = slices.Clone(s.Datacenters)
	return s
}
