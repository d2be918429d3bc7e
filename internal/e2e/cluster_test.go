package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestCluster runs the gate, RedisQuotas, enqueue and worker on one
// 3-master Redis Cluster, shared by its subtests, each with its own key
// prefix and asynq queue. TestFlattening/cluster runs the flattening
// scenario on a cluster of its own.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	t.Run("quotas", func(t *testing.T) {
		t.Parallel()
		clusterQuotas(t, cl)
	})
	t.Run("tenant", func(t *testing.T) {
		t.Parallel()
		reachHandler(t, buildStack(t, clusterBackend(cl), tenantConfig()))
	})
}

// clusterQuotas checks RedisQuotas Set, Get, List and Delete on a cluster,
// and that a running gate on the cluster picks up a quota changed by
// another process. Its tenants' logs are on all three masters; the quota
// hash is one key, on one of them.
func clusterQuotas(t *testing.T, cl *redistest.Cluster) {
	ctx := t.Context()
	const prefix = "quotas"
	rdb := cl.Client(t)
	rq := admission.NewRedisQuotas(rdb, admission.WithPrefix(prefix))
	one := admission.Quota{Limit: 1, Window: time.Minute}
	def := admission.Quota{Limit: 5, Window: time.Minute, MaxDelay: time.Minute}
	// Logs on masters 2, 1 and 0 (see handlerTenants).
	tenants := []string{"acme", "globex corp", "ünïcødé 租户"}
	for _, tenant := range tenants {
		if err := rq.Set(ctx, tenant, one); err != nil {
			t.Fatalf("Set(%q): %v", tenant, err)
		}
	}
	if err := rq.SetDefault(ctx, def); err != nil {
		t.Fatalf("SetDefault: %v", err)
	}
	for _, tenant := range tenants {
		if q, err := rq.Get(ctx, tenant); err != nil || q != one {
			t.Errorf("Get(%q) = %+v, %v; want %+v", tenant, q, err, one)
		}
	}
	if q, err := rq.GetDefault(ctx); err != nil || q != def {
		t.Errorf("GetDefault() = %+v, %v; want %+v", q, err, def)
	}
	if err := rq.Delete(ctx, "globex corp"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if q, err := rq.Get(ctx, "globex corp"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("Get after Delete = %+v, %v; want ErrNoQuota", q, err)
	}
	all, err := rq.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := admission.StaticQuotas{Default: &def, Tenants: map[string]admission.Quota{"acme": one, "ünïcødé 租户": one}}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("List mismatch (-want,+got):\n%s", diff)
	}

	gate := admission.New(rdb, rq, admission.WithPrefix(prefix))
	t.Cleanup(func() { _ = gate.Close() })
	for _, c := range []struct {
		tenant string
		want   []admission.Outcome
	}{
		{"acme", []admission.Outcome{admission.Admitted, admission.Rejected}},
		{"ünïcødé 租户", []admission.Outcome{admission.Admitted, admission.Rejected}},
		// Its own quota deleted: the default's, which defers.
		{"globex corp", []admission.Outcome{admission.Admitted, admission.Admitted, admission.Admitted, admission.Admitted, admission.Admitted, admission.Deferred}},
	} {
		for i, want := range c.want {
			// A rejection may come from the deny cache (Local), which holds
			// what Redis said when the window filled.
			d, err := gate.Admit(ctx, c.tenant)
			if err != nil || d.Outcome != want || (d.Local && want != admission.Rejected) {
				t.Fatalf("Admit(%q) #%d = %+v, %v; want %v from Redis", c.tenant, i, d, err, want)
			}
		}
		u, err := gate.Usage(ctx, c.tenant)
		if err != nil {
			t.Fatalf("Usage(%q): %v", c.tenant, err)
		}
		if got := u.InWindow + u.Reserved; got != len(c.want)-countOf(c.want, admission.Rejected) {
			t.Errorf("Usage(%q) = %+v, want one entry per admitted or deferred request", c.tenant, u)
		}
	}
	checkSpread(t, &stack{backend: clusterBackend(cl), rdb: rdb, prefix: prefix}, tenants, nil)

	// Another process raises acme's quota; the running gate picks it up
	// within about a second (DefaultRefresh), with no restart.
	other := admission.NewRedisQuotas(cl.Client(t), admission.WithPrefix(prefix))
	if err := other.Set(ctx, "acme", admission.Quota{Limit: 100, Window: time.Minute}); err != nil {
		t.Fatalf("Set from another store: %v", err)
	}
	changed := time.Now()
	for {
		d, err := gate.Admit(ctx, "acme")
		if err != nil {
			t.Fatalf("Admit(acme) after the change: %v", err)
		}
		if d.Outcome == admission.Admitted {
			break
		}
		if time.Since(changed) > 2*admission.DefaultRefresh+time.Second {
			t.Fatalf("Admit(acme) still %v %v after its quota was raised", d.Outcome, time.Since(changed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the raised quota applied after %v (refresh %v)", time.Since(changed).Round(time.Millisecond), admission.DefaultRefresh)
}

func countOf[T comparable](s []T, v T) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// checkSpread checks, on a stack on a cluster, that the logs of s's
// tenants are where CLUSTER KEYSLOT and the slot map put them, and that
// they spread over all three masters. Logs of busy tenants must exist;
// those of others may be missing (not written yet, or expired), but where
// one exists it must be on its master.
func checkSpread(t *testing.T, s *stack, busy, others []string) {
	t.Helper()
	ctx := t.Context()
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("checkSpread on a %T, want a cluster client", s.rdb)
	}
	owner := masterOf(t, cc)
	logKey := func(tenant string) string { return s.prefix + ":{" + tenant + "}:log" }

	// Where each tenant's log belongs.
	home := make(map[string]string) // tenant -> master
	perMaster := make(map[string][]string)
	for _, tenant := range slices.Concat(busy, others) {
		slot, err := cc.ClusterKeySlot(ctx, logKey(tenant)).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		home[tenant] = owner(slot)
		perMaster[home[tenant]] = append(perMaster[home[tenant]], tenant)
	}
	if len(perMaster) != len(s.backend.cluster.Addrs()) {
		t.Errorf("tenants' logs belong on %d masters, want all %d: %v", len(perMaster), len(s.backend.cluster.Addrs()), perMaster)
	}

	// Where the logs are.
	var mu sync.Mutex
	found := make(map[string]string) // tenant -> master
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, s.prefix+":{*}:log").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			tenant := strings.TrimSuffix(strings.TrimPrefix(k, s.prefix+":{"), "}:log")
			found[tenant] = m.Options().Addr
		}
		return nil
	})
	if err != nil {
		t.Fatalf("KEYS on each master: %v", err)
	}
	for tenant, at := range found {
		if want, ok := home[tenant]; !ok {
			t.Errorf("unexpected log %q on %s", logKey(tenant), at)
		} else if at != want {
			t.Errorf("the log of %q is on %s, want %s", tenant, at, want)
		}
	}
	busyOn := make(map[string]bool)
	for _, tenant := range busy {
		if _, ok := found[tenant]; !ok {
			t.Errorf("no log for busy tenant %q on any master", tenant)
		}
		busyOn[home[tenant]] = true
	}
	if len(busy) > 0 && len(busyOn) != len(s.backend.cluster.Addrs()) {
		t.Errorf("the busy tenants' logs are on %d masters, want all %d", len(busyOn), len(s.backend.cluster.Addrs()))
	}
	var b strings.Builder
	for _, m := range slices.Sorted(maps.Keys(perMaster)) {
		fmt.Fprintf(&b, " %s: %q;", m, perMaster[m])
	}
	if s.queue != "" {
		slot, _ := cc.ClusterKeySlot(ctx, "asynq:{"+s.queue+"}:pending").Result()
		fmt.Fprintf(&b, " asynq queue %q on %s;", s.queue, owner(slot))
	}
	t.Logf("tenant logs per master:%s %d of %d logs found in place", b.String(), len(found), len(home))
}

// masterOf returns a function that names the master owning a hash slot, by
// CLUSTER SHARDS.
func masterOf(t *testing.T, cc *redis.ClusterClient) func(slot int64) string {
	t.Helper()
	shards, err := cc.ClusterShards(t.Context()).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	return func(slot int64) string {
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						if n.Role == "master" {
							return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
						}
					}
				}
			}
		}
		t.Fatalf("no master owns slot %d: %+v", slot, shards)
		return ""
	}
}
