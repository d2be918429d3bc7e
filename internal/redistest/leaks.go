package redistest

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// VerifyNoLeaks fails t if goroutines other than those ignore allows
// outlive the test. go-redis' dial prober sleeps a second between attempts
// and notices a client's Close only then, so goroutines get up to three
// seconds to end.
func VerifyNoLeaks(t testing.TB, ignore ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find(ignore...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines leaked: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
