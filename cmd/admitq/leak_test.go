package main

import (
	"testing"

	"go.uber.org/goleak"
)

// Every command stops what it started: its clients, the worker, the metrics
// server, the embedded Redis.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
