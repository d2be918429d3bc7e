package admission

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// TestCausesHookIsSharedPerClient checks that Gates and RedisQuotas on one
// client share one causes hook, which go-redis cannot remove, instead of
// adding one each; that another client gets its own; and that a client's
// entry goes when the client is collected.
func TestCausesHookIsSharedPerClient(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer a.Close()
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer b.Close()

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
	if gate(b) == first {
		t.Fatal("another client shares the first one's hook")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if once, again := watchCauses(cc), watchCauses(cc); once != again {
		t.Fatal("a cluster client got two hooks")
	}

	key := func() weak.Pointer[redis.Client] {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		watchCauses(c)
		c.Close()
		return weak.Make(c)
	}()
	if _, ok := watched.Load(key); !ok {
		t.Fatal("the client's hook is not recorded")
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		if _, ok := watched.Load(key); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a collected client's hook is still recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
