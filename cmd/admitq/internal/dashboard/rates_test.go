package dashboard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
)

// flakySource is a fakeSource whose reads fail while down.
type flakySource struct {
	fakeSource
	down bool
}

func (f *flakySource) Gather(ctx context.Context) ([]*dto.MetricFamily, error) {
	if f.down {
		return nil, errors.New("connection refused")
	}
	return f.fakeSource.Gather(ctx)
}

// TestRatesDivideByTheTimeBetweenReads: a steady 10 started/s (and 4
// parked/s) reads as such whether a read failed or came late, where
// dividing by the nominal interval gave 20 after a failed read and 15 or 5
// after a late or early one.
func TestRatesDivideByTheTimeBetweenReads(t *testing.T) {
	src := &flakySource{}
	r := newRates([]Source{src}, time.Second, time.Minute)
	now := time.UnixMilli(1_780_000_000_000)
	r.now = func() time.Time { return now }
	var started, parked float64
	at := func(d time.Duration, down bool) {
		now = now.Add(d)
		started += 10 * d.Seconds()
		parked += 4 * d.Seconds()
		src.down = down
		src.set(map[[2]string]float64{{"acme", "parked"}: parked}, map[string]float64{"acme": started}, nil)
		r.sample(context.Background())
	}
	at(0, false)                     // baseline
	at(time.Second, false)           // on time
	at(time.Second, true)            // the read fails
	at(time.Second, false)           // two seconds' increase
	at(1500*time.Millisecond, false) // late
	at(500*time.Millisecond, false)  // early
	v := r.view([]string{"acme"}, 0, false, nil)
	// The point whose read failed gets the rate of the read after it.
	if got, want := v.Series["acme"].Started, []float64{0, 10, 10, 10, 10, 10}; !cmp.Equal(got, want) {
		t.Errorf("started/s (-want,+got):\n%s", cmp.Diff(want, got))
	}
	if got, want := v.Series["acme"].Parked, []float64{0, 4, 4, 4, 4, 4}; !cmp.Equal(got, want) {
		t.Errorf("parked/s (-want,+got):\n%s", cmp.Diff(want, got))
	}
	if len(v.Errors) != 0 {
		t.Errorf("errors after the source came back: %v", v.Errors)
	}
}
