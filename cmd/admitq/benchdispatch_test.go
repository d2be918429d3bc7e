package main

import (
	"strings"
	"testing"
)

// TestBenchDispatchUsage: bench --only dispatch, --runs, --tasks and --mix refuse what they
// cannot run, with one line and the usage exit code, before touching Redis.
func TestBenchDispatchUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		desc string
		args []string
		want string // in stderr
	}{
		{"dispatch beside contenders", []string{"bench", "--only", "dispatch,gate-batched"}, "the dispatcher scenario runs alone"},
		{"dispatch on a server and a cluster", []string{"bench", "--redis", "127.0.0.1:1", "--redis-cluster", "--only", "dispatch"}, "--redis and --redis-cluster: give one"},
		{"no runs", []string{"bench", "--only", "dispatch", "--runs", "0"}, "--runs 0: want at least 1"},
		{"runs without dispatch", []string{"bench", "--only", "gate-batched", "--runs", "2"}, "--runs: only --only dispatch takes it"},
		{"mix without dispatch", []string{"bench", "--only", "flow", "--mix"}, "--mix: only --only dispatch takes it"},
		{"tasks without dispatch", []string{"bench", "--only", "neighbour", "--tasks", "100"}, "--tasks: only --only dispatch takes it"},
		{"no tasks", []string{"bench", "--only", "dispatch", "--tasks", "0"}, "--tasks 0: want at least 1"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			res := admitq(t, c.args...)
			if res.code != exitUsage || !strings.Contains(res.stderr, c.want) {
				t.Errorf("%v\nwant exit %d and stderr holding %q", res, exitUsage, c.want)
			}
			oneLine(t, c.desc, res.stderr)
		})
	}
}
