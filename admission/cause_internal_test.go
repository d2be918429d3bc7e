package admission

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// hooksOf counts the causes hooks in rdb's chain.
func hooksOf(rdb redis.UniversalClient) int {
	p := &causesProbe{all: true}
	probeCauses(rdb, p)
	return len(p.found)
}

// dialCount counts a client's dials.
type dialCount struct{ n atomic.Int64 }

func (d *dialCount) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (d *dialCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dialCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCausesHookIsSharedPerClient checks that Gates and RedisQuotas on one
// client share one causes hook, which go-redis cannot remove, instead of
// adding one each, on each of go-redis's client types; that another client
// gets its own; and that finding the hook does not dial Redis.
func TestCausesHookIsSharedPerClient(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer a.Close()
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer b.Close()
	dials := &dialCount{}
	a.AddHook(dials)

	gate := func(rdb redis.UniversalClient) *causes {
		g := New(rdb, StaticQuotas{})
		defer g.Close()
		return g.causes
	}
	first := gate(a)
	for range 100 {
		if gate(a) != first {
			t.Fatal("a second Gate on the same client added a hook of its own")
		}
	}
	if q := NewRedisQuotas(a); q.causes != first {
		t.Fatal("RedisQuotas on the gate's client added a hook of its own")
	}
	if n := hooksOf(a); n != 1 {
		t.Fatalf("%d causes hooks on a client after 101 Gates and a RedisQuotas, want 1", n)
	}
	if n := dials.n.Load(); n != 0 {
		t.Fatalf("finding the hook dialed Redis %d times, want never", n)
	}
	if gate(b) == first {
		t.Fatal("another client shares the first one's hook")
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if once, again := watchCauses(cc), watchCauses(cc); once != again || hooksOf(cc) != 1 {
		t.Fatalf("a cluster client got %d hooks", hooksOf(cc))
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if once, again := watchCauses(ring), watchCauses(ring); once != again || hooksOf(ring) != 1 {
		t.Fatalf("a ring got %d hooks", hooksOf(ring))
	}
	if hooksOf(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})) != 0 {
		t.Fatal("a new client has a causes hook")
	}
}
