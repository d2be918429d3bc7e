package demo

import (
	"testing"

	"go.uber.org/goleak"
)

// A run stops its worker, producers and reporter before it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
