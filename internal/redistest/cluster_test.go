package redistest

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestClusterFailover: a cluster with replicas survives the SIGKILL of a
// master. Its replica takes its slots over, and keys written before the
// kill (and replicated) are still there.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	began := time.Now()
	c := StartCluster(t, WithReplicas(), WithNodeTimeout(time.Second))
	t.Logf("3 masters and 3 replicas up in %v", time.Since(began).Round(10*time.Millisecond))
	if got := len(c.Replicas()); got != 3 {
		t.Fatalf("%d replicas, want 3", got)
	}
	if err := c.Serving(ctx); err != nil {
		t.Fatalf("Serving before the kill: %v", err)
	}
	rdb := c.Client(t)
	victim, heir := c.Nodes()[0], c.Replicas()[0]
	key := "k0"
	for i := 1; masterFor(t, rdb, key) != victim.Addr(); i++ {
		key = "k" + strconv.Itoa(i)
	}
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The write reaches the replica before the kill.
	if err := victim.Client(t).Wait(ctx, 1, time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	victim.Kill()
	killed := time.Now()
	deadline := killed.Add(clusterTimeout)
	var err error
	for err = c.Serving(ctx); err != nil && time.Now().Before(deadline); err = c.Serving(ctx) {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("cluster not serving %v after a master's SIGKILL: %v", clusterTimeout, err)
	}
	t.Logf("cluster serving every slot again %v after the SIGKILL", time.Since(killed).Round(10*time.Millisecond))
	rdb.ReloadState(ctx)
	waitUntil(t, 5*time.Second, func() bool { return masterFor(t, rdb, key) == heir.Addr() })
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s after failover = %q, %v; want \"v\"", key, got, err)
	}
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v", d)
		}
	}
}
