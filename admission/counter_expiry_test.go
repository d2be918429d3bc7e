package admission_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestCounterKeysExpire: every key a Counter-mode gate writes carries an
// expiry from the call that creates it, so that tenants who go idle leave
// nothing behind. 1,000 tenants admitted once each and then idle (the
// calls batched across tenants, as the committer sends them on one Redis),
// one deferred, one released, and one whose window changed: on a real
// redis-server, every key under the prefix must have a TTL, and none
// longer than the window, the max delay and a margin.
func TestCounterKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	q := admission.Quota{Limit: 1, Window: 2 * time.Second, MaxDelay: 10 * time.Second, Mode: admission.Counter}
	g := admission.New(rdb, static(q), admission.WithPrefix("ttl"), admission.WithTimeout(5*time.Second))
	defer g.Close()

	errs := make(chan error, 1000)
	for i := range 1000 {
		go func() {
			d, err := g.Admit(ctx, fmt.Sprintf("t%d", i))
			if err == nil && d.Outcome != admission.Admitted {
				err = fmt.Errorf("tenant t%d: %v, want admitted", i, d.Outcome)
			}
			errs <- err
		}()
	}
	for range 1000 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if d, err := g.Admit(ctx, "t1"); err != nil || d.Outcome != admission.Deferred {
		t.Fatalf("a second Admit of t1 = %+v, %v; want deferred", d, err)
	}
	if d, err := g.Admit(ctx, "released"); err != nil {
		t.Fatal(err)
	} else if err := g.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	wide := q
	wide.Window = 4 * time.Second
	gw := admission.New(rdb, static(wide), admission.WithPrefix("ttl"), admission.WithTimeout(5*time.Second))
	defer gw.Close()
	if _, err := gw.Admit(ctx, "t2"); err != nil {
		t.Fatal(err)
	}

	keys, err := rdb.Keys(ctx, "ttl:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 1001 {
		t.Fatalf("%d keys under the prefix, want one for each of 1,001 tenants", len(keys))
	}
	longest := wide.Window + q.MaxDelay + 2*time.Second
	for _, key := range keys {
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > longest {
			t.Errorf("%s (%s) has TTL %v, want one of at most %v", key, rdb.Type(ctx, key).Val(), ttl, longest)
		}
	}
}
