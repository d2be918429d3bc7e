package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// slowQuotas answers like StaticQuotas, after a delay: the producer's own
// work before a decision reaches Redis, as a starved process does it.
type slowQuotas struct {
	admission.StaticQuotas
	delay time.Duration
}

func (s slowQuotas) Quota(ctx context.Context, tenant string) (admission.Quota, error) {
	time.Sleep(s.delay)
	return s.StaticQuotas.Quota(ctx, tenant)
}

// TestTimeBeforeRedisIsNotRedis: the gate's timeout is charged for time
// spent waiting on Redis, not for the producer's own work before the
// request goes out (here a quota source slower than the timeout; under
// CPU starvation, goroutines waiting 100-250 ms for a processor). Before,
// the timeout ran from when the decision began: every call failed with
// ErrUnavailable on a healthy Redis, and the breaker opened.
func TestTimeBeforeRedisIsNotRedis(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	q := admission.Quota{Limit: 100, Window: time.Minute}
	g := admission.New(srv.Client(t), slowQuotas{static(q), 2 * timeout}, admission.WithTimeout(timeout))
	defer g.Close()
	for i := range 5 {
		d, err := g.Admit(t.Context(), "slow")
		if err != nil || d.Local || d.Outcome != admission.Admitted {
			t.Fatalf("Admit %d with a quota lookup slower than the timeout = %+v, %v; want admitted by Redis", i, d, err)
		}
	}
}

// TestLocalAnswerWaitsForRepliesOut: a caller answered by the deny cache
// returns only once a request the gate has out is answered, so that
// callers looping on local answers take no processor from the goroutines
// that read Redis's replies (TestBusyProducerIsNoOutage). With nothing
// out, it returns at once.
func TestLocalAnswerWaitsForRepliesOut(t *testing.T) {
	_, hook, g := holdingGate(t)
	ctx := t.Context()
	if d, err := g.Admit(ctx, "full"); err != nil || d.Outcome != admission.Admitted {
		t.Fatalf("Admit = %+v, %v", d, err)
	}
	local := func() admission.Decision {
		t.Helper()
		d, err := g.Admit(ctx, "full")
		if err != nil || !d.Local || d.Outcome != admission.Rejected {
			t.Errorf("Admit of a tenant with a cached rejection = %+v, %v; want rejected locally", d, err)
		}
		return d
	}
	start := time.Now()
	local()
	if took := time.Since(start); took > time.Second {
		t.Errorf("a local answer with nothing out took %v", took)
	}

	hook.armed.Store(true)
	other := make(chan error, 1)
	go func() {
		_, err := g.Admit(ctx, "other")
		other <- err
	}()
	<-hook.held
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		local()
	}()
	select {
	case <-answered:
		t.Fatal("a local answer returned while a reply of the gate was out")
	case <-time.After(100 * time.Millisecond):
	}
	close(hook.release)
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("a local answer still waits after the reply out was read")
	}
	if err := <-other; err != nil {
		t.Error(err)
	}
}
