package admission_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// TestCluster runs the gate and the quota store end to end on a 3-master
// Redis Cluster. The subtests share one cluster, which takes a few seconds
// to form.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	t.Run("bound", func(t *testing.T) { testClusterBound(t, c) })
	t.Run("tenants on every master", func(t *testing.T) { testClusterSpread(t, c) })
	t.Run("quotas", func(t *testing.T) { testClusterQuotas(t, c) })
	t.Run("one script call per master", func(t *testing.T) { testClusterSharesCalls(t, c) })
	t.Run("batches: one script call per master", func(t *testing.T) { testClusterBatches(t, c) })
	t.Run("a log moved to another master", func(t *testing.T) { testClusterLogMoved(t, c) })
	t.Run("a slot halfway through a move", func(t *testing.T) { testClusterSlotMoving(t, c) })
	t.Run("script cache flushed", func(t *testing.T) { testClusterNoScript(t, c) })
	t.Run("check server", func(t *testing.T) { testClusterCheckServer(t, c) })
	t.Run("plain client on a node", func(t *testing.T) { testClusterPlainClientMoved(t, c) })
	t.Run("one master down", func(t *testing.T) { testClusterMasterDown(t, c) }) // last: it restarts a node
}

// masterOf maps each hash slot's tenants to the master that serves them.
type masterOf func(tenant string) string

func clusterMasters(t *testing.T, cc *redis.ClusterClient) ([]string, masterOf) {
	t.Helper()
	var mu sync.Mutex
	var masters []string
	err := cc.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, m.Options().Addr)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("cluster has masters %v, want 3", masters)
	}
	return masters, func(tenant string) string {
		m, err := cc.MasterForKey(context.Background(), "{"+tenant+"}")
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
}

// tenantsOnEveryMaster returns n tenants for each of the 3 masters, in turn.
func tenantsOnEveryMaster(t *testing.T, cc *redis.ClusterClient, n int) []string {
	t.Helper()
	masters, master := clusterMasters(t, cc)
	byMaster := map[string][]string{}
	for i := 0; len(byMaster) < 3 || slices.ContainsFunc(masters, func(m string) bool { return len(byMaster[m]) < n }); i++ {
		tenant := "c" + strconv.Itoa(i)
		if m := master(tenant); len(byMaster[m]) < n {
			byMaster[m] = append(byMaster[m], tenant)
		}
	}
	var tenants []string
	for i := range n {
		for _, m := range masters {
			tenants = append(tenants, byMaster[m][i])
		}
	}
	return tenants
}

// testClusterBound is TestBound on the cluster: 64 goroutines on four
// gates, each with its own cluster client, flood tenants that live on all
// three masters; every decision and every snapshot of the logs must keep
// at most L slots in any window W.
func testClusterBound(t *testing.T, c *redistest.Cluster) {
	q := admission.Quota{Limit: 20, Window: 200 * time.Millisecond, MaxDelay: 300 * time.Millisecond}
	tenants := tenantsOnEveryMaster(t, c.Client(t), 2)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			prefix := "cbound-" + v.name
			gs := make([]*admission.Gate, 4)
			for i := range gs {
				// A generous timeout: this is about the bound, and 64
				// goroutines under -race on a shared machine can stall a
				// call past the default.
				gs[i] = admission.New(c.Client(t), static(q), append([]admission.Option{
					admission.WithPrefix(prefix), admission.WithTimeout(2 * time.Second)}, v.opts...)...)
				t.Cleanup(func() { gs[i].Close() })
			}
			r := floodAndCheckBound(t, boundRun{q: q, gates: gs, tenants: tenants, prefix: prefix, logs: c.Client(t), d: time.Second})
			t.Logf("%d tenants on 3 masters: %d decisions (%d from the deny cache), %d took slots, all checked; %d log snapshots checked",
				len(tenants), r.total, r.local, r.admitted, r.snapshots)
		})
	}
}

// testClusterSpread: many tenants, spread over all three masters, decided
// concurrently: with batching on, the group commit sends one script call
// per tenant in per-node pipelines; off, one call each. Either way every
// tenant gets exactly its limit, and its log lives on its own master.
func testClusterSpread(t *testing.T, c *redistest.Cluster) {
	q := admission.Quota{Limit: 3, Window: time.Minute}
	const tenants, perTenant = 300, 5
	cc := c.Client(t)
	_, master := clusterMasters(t, cc)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			prefix := "spread-" + v.name
			g := admission.New(c.Client(t), static(q), append([]admission.Option{admission.WithPrefix(prefix)}, v.opts...)...)
			t.Cleanup(func() { g.Close() })
			var mu sync.Mutex
			admitted := map[string]int{}
			var wg sync.WaitGroup
			for w := range 32 {
				wg.Go(func() {
					for i := w; i < tenants*perTenant; i += 32 {
						tenant := "s" + strconv.Itoa(i%tenants)
						d, err := g.Admit(t.Context(), tenant)
						if err != nil {
							t.Errorf("Admit(%s): %v", tenant, err)
							return
						}
						if d.Outcome == admission.Admitted && !d.Local {
							mu.Lock()
							admitted[tenant]++
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			perMaster := map[string]int{}
			for i := range tenants {
				tenant := "s" + strconv.Itoa(i)
				if admitted[tenant] != q.Limit {
					t.Errorf("tenant %s: %d admitted, want %d", tenant, admitted[tenant], q.Limit)
				}
				perMaster[master(tenant)]++
			}
			// Each master holds exactly the logs of its own tenants.
			var mmu sync.Mutex
			keys := map[string]int64{}
			err := cc.ForEachMaster(t.Context(), func(ctx context.Context, node *redis.Client) error {
				ks, err := node.Keys(ctx, prefix+":*").Result()
				mmu.Lock()
				keys[node.Options().Addr] = int64(len(ks))
				mmu.Unlock()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{}
			for m, n := range perMaster {
				want[m] = int64(n)
			}
			if diff := cmp.Diff(want, keys); diff != "" {
				t.Fatalf("logs per master (-want,+got):\n%s", diff)
			}
			t.Logf("%d tenants: logs per master %v", tenants, keys)
		})
	}
}

// testClusterQuotas: RedisQuotas keeps its hash on one node of the cluster;
// a gate reads quotas from it, and Usage and Release work on any master.
func testClusterQuotas(t *testing.T, c *redistest.Cluster) {
	ctx := t.Context()
	cc := c.Client(t)
	store := admission.NewRedisQuotas(cc, admission.WithPrefix("cq"))
	def := admission.Quota{Limit: 2, Window: time.Minute}
	own := admission.Quota{Limit: 1, Window: time.Minute, MaxDelay: 2 * time.Minute}
	if err := store.SetDefault(ctx, def); err != nil {
		t.Fatal(err)
	}
	tenants := tenantsOnEveryMaster(t, cc, 1)
	for _, tenant := range tenants {
		if err := store.Set(ctx, tenant, own); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := store.Get(ctx, tenants[0]); err != nil || got != own {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, own)
	}
	all, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all.Default == nil || *all.Default != def || len(all.Tenants) != len(tenants) {
		t.Fatalf("List = %+v, want the default %v and %d tenants", all, def, len(tenants))
	}

	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			g := admission.New(cc, store, append([]admission.Option{admission.WithPrefix("cq-" + v.name)}, v.opts...)...)
			t.Cleanup(func() { g.Close() })
			for _, tenant := range tenants {
				a, err := g.Admit(ctx, tenant)
				if err != nil || a.Outcome != admission.Admitted {
					t.Fatalf("%s: first Admit = %+v, %v; want admitted", tenant, a, err)
				}
				b, err := g.Admit(ctx, tenant)
				if err != nil || b.Outcome != admission.Deferred || !b.At.Equal(a.At.Add(own.Window)) {
					t.Fatalf("%s: second Admit = %+v, %v; want deferred a window after the first", tenant, b, err)
				}
				u, err := g.Usage(ctx, tenant)
				if err != nil || u.InWindow != 1 || u.Reserved != 1 || u.Quota != own {
					t.Fatalf("%s: Usage = %+v, %v; want 1 in the window, 1 reserved, quota %v", tenant, u, err, own)
				}
				if err := g.Release(ctx, b); err != nil {
					t.Fatal(err)
				}
				if u, err := g.Usage(ctx, tenant); err != nil || u.Reserved != 0 {
					t.Fatalf("%s: Usage after Release = %+v, %v; want nothing reserved", tenant, u, err)
				}
			}
			// A tenant without a quota of its own gets the default.
			for i := range def.Limit + 1 {
				d, err := g.Admit(ctx, "nobody")
				if want := i < def.Limit; err != nil || (d.Outcome == admission.Admitted) != want {
					t.Fatalf("default quota, Admit %d = %+v, %v; admitted should be %v", i, d, err, want)
				}
			}
		})
	}
	if err := store.Delete(ctx, tenants[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, tenants[0]); !errors.Is(err, admission.ErrNoQuota) {
		t.Fatalf("Get after Delete: %v, want ErrNoQuota", err)
	}
}

// testClusterSharesCalls is TestGroupCommitSharesScriptCalls on the
// cluster: concurrent callers over tenants of every master share a script
// call per master's batch (about 0.13 calls a decision here, where a call
// per tenant cost 0.99), in Log mode and in Counter mode, and every tenant
// gets exactly its limit.
func testClusterSharesCalls(t *testing.T, c *redistest.Cluster) {
	cc := c.Client(t)
	tenants := tenantsOnEveryMaster(t, cc, 100)
	calls := func() int64 {
		var mu sync.Mutex
		var n int64
		if err := cc.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
			c := scriptCalls(t, m)
			mu.Lock()
			defer mu.Unlock()
			n += c
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, mode := range []admission.Mode{admission.Log, admission.Counter} {
		t.Run(mode.String(), func(t *testing.T) {
			q := admission.Quota{Limit: 20, Window: time.Minute, Mode: mode}
			g := admission.New(c.Client(t), static(q), admission.WithPrefix("cshare-"+mode.String()), admission.WithDenyCache(false))
			t.Cleanup(func() { g.Close() })
			before := calls()
			const workers, each = 64, 100
			admitted := admitAll(t, workers, each, func(w, i int) (*admission.Gate, string) {
				return g, tenants[(w*each+i)%len(tenants)]
			})
			for _, tenant := range tenants {
				if admitted[tenant] != q.Limit {
					t.Errorf("tenant %s: %d admitted, want %d", tenant, admitted[tenant], q.Limit)
				}
			}
			perDecision := float64(calls()-before) / (workers * each)
			t.Logf("%d decisions over %d tenants on 3 masters: %.3f script calls per decision", workers*each, len(tenants), perDecision)
			if perDecision > 0.4 {
				t.Errorf("%.3f script calls per decision: a master's tenants do not share calls", perDecision)
			}
		})
	}
}

// testClusterLogMoved moves one tenant's slot, its log and its Counter
// mode window, to another master behind the gate's client, which still
// sends it to the old one beside a tenant that stayed. A call that joins
// the two fails on the key that left before it writes anything, and each
// tenant is then decided alone, where it lives: both get exactly their
// limit, in both modes, each key on its own master.
func testClusterLogMoved(t *testing.T, c *redistest.Cluster) {
	ctx := t.Context()
	cc := c.Client(t)
	masters, master := clusterMasters(t, cc)
	var stays, moves string
	for _, tenant := range tenantsOnEveryMaster(t, cc, 2) {
		if master(tenant) == masters[0] {
			if stays == "" {
				stays = tenant
			} else {
				moves = tenant
			}
		}
	}
	type side struct {
		q        admission.Quota
		g        *admission.Gate
		suffix   string // of the tenant's key
		admitted map[string]int
	}
	var sides []*side
	for _, mode := range []admission.Mode{admission.Log, admission.Counter} {
		sd := &side{q: admission.Quota{Limit: 5, Window: time.Minute, Mode: mode}, suffix: "log", admitted: map[string]int{}}
		if mode == admission.Counter {
			sd.suffix = "cnt"
		}
		sd.g = admission.New(cc, static(sd.q), admission.WithPrefix("cmoved"), admission.WithDenyCache(false))
		t.Cleanup(func() { sd.g.Close() })
		for _, tenant := range []string{stays, moves} {
			if d, err := sd.g.Admit(ctx, tenant); err != nil || d.Outcome != admission.Admitted {
				t.Fatalf("%v: Admit(%s) = %+v, %v; want admitted", mode, tenant, d, err)
			}
			sd.admitted[tenant]++
		}
		sides = append(sides, sd)
	}
	key := func(tenant, suffix string) string { return "cmoved:{" + tenant + "}:" + suffix }
	from, to := nodeAt(t, c, masters[0]), nodeAt(t, c, masters[1])
	slot := int(cc.ClusterKeySlot(ctx, key(moves, "log")).Val())
	moveSlot(t, c, slot, from, to)
	t.Cleanup(func() { moveSlot(t, c, slot, to, from) })

	// Each script alone, on the old master, with both tenants' keys: it
	// fails at the key that left, and the other's is as it was.
	for _, sc := range []struct {
		script *redis.Script
		suffix string
		named  string
		ids    []any
	}{
		{lua.Admit(), "log", "logs", []any{"x"}},
		{lua.Counter(), "cnt", "windows", nil},
	} {
		k1, k2 := key(stays, sc.suffix), key(moves, sc.suffix)
		was := from.Dump(ctx, k1).Val()
		args := []any{sc.named, 2, k1, k2, 1, 5, time.Minute.Microseconds(), 0, 1}
		for range 2 {
			args = append(args, 1, 0, 1)
			args = append(args, sc.ids...)
		}
		err := sc.script.Run(ctx, from, []string{k1}, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "non local key") {
			t.Fatalf("%s over a key that left its node: %v, want the non-local key error", sc.named, err)
		}
		if now := from.Dump(ctx, k1).Val(); now != was {
			t.Fatalf("%s: the failed call changed %s", sc.named, k1)
		}
	}

	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 8 {
				tenant, sd := []string{stays, moves}[(w+i)%2], sides[(w+i/2)%2]
				d, err := sd.g.Admit(ctx, tenant)
				if err != nil {
					t.Errorf("%v: Admit(%s): %v", sd.q.Mode, tenant, err)
					return
				}
				if d.Outcome == admission.Admitted {
					mu.Lock()
					sd.admitted[tenant]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, sd := range sides {
		for _, tenant := range []string{stays, moves} {
			if sd.admitted[tenant] != sd.q.Limit {
				t.Errorf("%v: tenant %s: %d admitted, want %d", sd.q.Mode, tenant, sd.admitted[tenant], sd.q.Limit)
			}
		}
		for _, l := range []struct {
			node *redis.Client
			key  string
		}{{from, key(stays, sd.suffix)}, {to, key(moves, sd.suffix)}} {
			if n, err := l.node.Exists(ctx, l.key).Result(); err != nil || n != 1 {
				t.Errorf("EXISTS %s on %s = %d, %v; want 1", l.key, l.node.Options().Addr, n, err)
			}
		}
	}
}

// testClusterSlotMoving stops a slot's move halfway: two tenants share the
// slot, both at their limit, and only the first one's log has moved. A
// call that joins them goes to the old master, which answers ASK for the
// first log; had the call followed the redirect (ASKING), the new master
// would have reached the second tenant's log too, found none, and admitted
// it over its limit in a log of its own there. Each is decided alone
// instead, where its log is: nothing more is admitted, and the new master
// holds no second log.
func testClusterSlotMoving(t *testing.T, c *redistest.Cluster) {
	ctx := t.Context()
	cc := c.Client(t)
	masters, master := clusterMasters(t, cc)
	const prefix = "cmoving"
	first, second := sharingASlot(t, cc, prefix, master, masters[0])
	q := admission.Quota{Limit: 5, Window: time.Minute}
	g := admission.New(cc, static(q), admission.WithPrefix(prefix), admission.WithDenyCache(false))
	t.Cleanup(func() { g.Close() })
	for range q.Limit {
		for _, tenant := range []string{first, second} {
			if d, err := g.Admit(ctx, tenant); err != nil || d.Outcome != admission.Admitted {
				t.Fatalf("Admit(%s) = %+v, %v; want admitted", tenant, d, err)
			}
		}
	}
	// Counter mode windows: one in the slot that will move, one elsewhere
	// on the same master.
	other := ""
	for _, tenant := range tenantsOnEveryMaster(t, cc, 2) {
		if master(tenant) == masters[0] {
			other = tenant
		}
	}
	counter := admission.New(cc, static(admission.Quota{Limit: 5, Window: time.Minute, Mode: admission.Counter}), admission.WithPrefix(prefix))
	t.Cleanup(func() { counter.Close() })
	for _, tenant := range []string{other, second} {
		if d, err := counter.Admit(ctx, tenant); err != nil || d.Outcome != admission.Admitted {
			t.Fatalf("Counter mode: Admit(%s) = %+v, %v; want admitted", tenant, d, err)
		}
	}
	from, to := nodeAt(t, c, masters[0]), nodeAt(t, c, masters[1])
	log1, log2 := prefix+":{"+first+"}:log", prefix+":{"+second+"}:log"
	slot := int(cc.ClusterKeySlot(ctx, log1).Val())
	if other == "" || cc.ClusterKeySlot(ctx, "{"+other+"}").Val() == int64(slot) {
		t.Fatal("no tenant on the master outside the slot")
	}
	m := startMove(t, c, slot, from, to)
	t.Cleanup(func() {
		m.migrate() // what is left of the slot
		m.finish()
		moveSlot(t, c, slot, to, from)
	})
	m.migrate(log1)

	// counter.lua with a window of the moving slot that has not moved, and
	// no list: the node holds the window but would refuse the list a write
	// may touch, so the call fails before it writes anything.
	w1, w2 := prefix+":{"+other+"}:cnt", prefix+":{"+second+"}:cnt"
	was := []string{from.Dump(ctx, w1).Val(), from.Dump(ctx, w2).Val()}
	err := lua.Counter().Run(ctx, from, []string{w1}, "windows", 2, w1, w2, 1, 5, time.Minute.Microseconds(), 0, 1, 1, 0, 1, 1, 0, 1).Err()
	if err == nil || !strings.Contains(err.Error(), "non local key") {
		t.Errorf("counter.lua over a window whose slot is moving: %v, want the non-local key error", err)
	}
	for i, w := range []string{w1, w2} {
		if from.Dump(ctx, w).Val() != was[i] {
			t.Errorf("the failed call wrote %s", w)
		}
	}

	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 16 {
				tenant := []string{first, second}[(w+i)%2]
				d, err := g.Admit(ctx, tenant)
				if err != nil {
					t.Errorf("Admit(%s): %v", tenant, err)
					return
				}
				if d.Outcome == admission.Admitted {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n > 0 {
		t.Errorf("%d admitted past the limit of two tenants at it", n)
	}
	conn := to.Conn()
	defer conn.Close()
	m.must(conn.Do(ctx, "ASKING").Err())
	if n := conn.Exists(ctx, log2).Val(); n != 0 {
		t.Errorf("the new master holds a log of %s, which has not moved", second)
	}
}

// sharingASlot returns two tenants whose keys under prefix hash to one
// slot, served by master.
func sharingASlot(t *testing.T, cc *redis.ClusterClient, prefix string, master masterOf, addr string) (string, string) {
	t.Helper()
	ctx := t.Context()
	const names = 20000
	cmds := make([]*redis.IntCmd, names)
	pipe := cc.Pipeline()
	for i := range cmds {
		cmds[i] = pipe.ClusterKeySlot(ctx, prefix+":{s"+strconv.Itoa(i)+"}:log")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	for i, cmd := range cmds {
		tenant := "s" + strconv.Itoa(i)
		if other, ok := seen[cmd.Val()]; ok && master(tenant) == addr {
			return other, tenant
		}
		seen[cmd.Val()] = tenant
	}
	t.Fatalf("no two of %d tenants share a slot of %s", names, addr)
	return "", ""
}

// nodeAt returns a client of the cluster node at addr.
func nodeAt(t *testing.T, c *redistest.Cluster, addr string) *redis.Client {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Addr() == addr {
			return n.Client(t)
		}
	}
	t.Fatalf("no node at %s", addr)
	return nil
}

// slotMove is a slot on its way from one master to another, as
// redis-cli --cluster reshard moves it: begun (startMove), its keys
// migrated one by one (migrate), then given to the new master on every
// node (finish).
type slotMove struct {
	t        *testing.T
	c        *redistest.Cluster
	slot     int
	from, to *redis.Client
	toID     string
}

// startMove sets slot importing on to and migrating on from.
func startMove(t *testing.T, c *redistest.Cluster, slot int, from, to *redis.Client) *slotMove {
	t.Helper()
	m := &slotMove{t: t, c: c, slot: slot, from: from, to: to, toID: to.ClusterMyID(context.Background()).Val()}
	m.must(to.Do(context.Background(), "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ClusterMyID(context.Background()).Val()).Err())
	m.must(from.Do(context.Background(), "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err())
	return m
}

func (m *slotMove) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatalf("moving slot %d: %v", m.slot, err)
	}
}

// migrate moves keys (none: every key of the slot) to the new master.
func (m *slotMove) migrate(keys ...string) {
	m.t.Helper()
	ctx := context.Background()
	if len(keys) == 0 {
		var err error
		keys, err = m.from.ClusterGetKeysInSlot(ctx, m.slot, 1000).Result()
		m.must(err)
	}
	if len(keys) == 0 {
		return
	}
	host, port, _ := strings.Cut(m.to.Options().Addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	m.must(m.from.Do(ctx, args...).Err())
}

// finish gives the slot to the new master on every node.
func (m *slotMove) finish() {
	m.t.Helper()
	for _, n := range m.c.Nodes() {
		m.must(n.Client(m.t).Do(context.Background(), "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err())
	}
}

// moveSlot moves slot, with its keys, from one master to another.
func moveSlot(t *testing.T, c *redistest.Cluster, slot int, from, to *redis.Client) {
	t.Helper()
	m := startMove(t, c, slot, from, to)
	m.migrate()
	m.finish()
}

// testClusterNoScript: with the scripts flushed from every master, the
// gate goes on without an error, batched (commit.go retries the failed
// calls of a per-node pipeline with EVAL) and not.
func testClusterNoScript(t *testing.T, c *redistest.Cluster) {
	ctx := t.Context()
	cc := c.Client(t)
	tenants := tenantsOnEveryMaster(t, cc, 2)
	q := admission.Quota{Limit: 1000, Window: time.Minute}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			g := admission.New(cc, static(q), append([]admission.Option{admission.WithPrefix("cns-" + v.name)}, v.opts...)...)
			t.Cleanup(func() { g.Close() })
			admitAll := func(round string) {
				var wg sync.WaitGroup
				for _, tenant := range tenants {
					wg.Go(func() {
						if d, err := g.Admit(ctx, tenant); err != nil || d.Outcome != admission.Admitted {
							t.Errorf("%s: Admit(%s) = %+v, %v; want admitted", round, tenant, d, err)
						}
					})
				}
				wg.Wait()
			}
			admitAll("before the flush")
			if err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				return node.ScriptFlush(ctx).Err()
			}); err != nil {
				t.Fatal(err)
			}
			admitAll("after the flush")
			if _, err := g.Usage(ctx, tenants[0]); err != nil {
				t.Fatalf("Usage after the flush: %v", err)
			}
		})
	}
}

// testClusterMasterDown kills one of the three masters and floods tenants
// on all of them, before the other masters notice (cluster-node-timeout,
// 5s) and declare the cluster down. Tenants on the dead master fail as the
// policy says; tenants on the others must go on being decided by Redis,
// within the timeout. Then the master comes back empty, and every tenant
// is decided by Redis again: the scripts are loaded anew on it.
func testClusterMasterDown(t *testing.T, c *redistest.Cluster) {
	cc := c.Client(t)
	_, master := clusterMasters(t, cc)
	tenants := tenantsOnEveryMaster(t, cc, 3)
	node := c.Nodes()[0]
	onDead := map[string]bool{}
	for _, tenant := range tenants {
		onDead[tenant] = master(tenant) == node.Addr()
	}
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	type tally struct {
		healthyRemote, healthyLocal, healthyErr, healthySlow atomic.Int64
		deadErr, deadLocal, deadRemote                       atomic.Int64
		worst                                                atomic.Int64
	}
	type gate struct {
		name    string
		g       *admission.Gate
		batched bool
		policy  admission.FailurePolicy
		n       tally
	}
	var gates []*gate
	for _, v := range variants {
		for _, p := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
			g := admission.New(c.Client(t), static(q), append([]admission.Option{
				admission.WithPrefix("down-" + v.name), admission.WithFailurePolicy(p)}, v.opts...)...)
			t.Cleanup(func() { g.Close() })
			gates = append(gates, &gate{name: fmt.Sprintf("%s/%v", v.name, p), g: g, batched: v.name == "batched", policy: p})
		}
	}
	var down atomic.Bool
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, gt := range gates {
		for w := range 16 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					tenant := tenants[(w+i)%len(tenants)]
					after := down.Load() // count only calls begun with the master dead
					start := time.Now()
					d, err := gt.g.Admit(ctx, tenant)
					took := time.Since(start)
					if !after || ctx.Err() != nil {
						continue
					}
					n := &gt.n
					for old := n.worst.Load(); int64(took) > old && !n.worst.CompareAndSwap(old, int64(took)); old = n.worst.Load() {
					}
					switch {
					case onDead[tenant] && err != nil:
						n.deadErr.Add(1)
					case onDead[tenant] && d.Local:
						n.deadLocal.Add(1)
					case onDead[tenant]:
						n.deadRemote.Add(1)
					case err != nil:
						n.healthyErr.Add(1)
					case d.Local:
						n.healthyLocal.Add(1)
					default:
						n.healthyRemote.Add(1)
					}
					if !onDead[tenant] && took > admission.DefaultTimeout/2 {
						n.healthySlow.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	time.Sleep(100 * time.Millisecond) // the flood gets going
	node.Kill()
	down.Store(true)
	time.Sleep(time.Second) // well within cluster-node-timeout
	cancel()
	wg.Wait()

	for _, gt := range gates {
		n := &gt.n
		t.Logf("%s, a master down: tenants on it: %d errors, %d local; on the others: %d from Redis, %d local, %d errors, %d slower than %v; worst call %v",
			gt.name, n.deadErr.Load(), n.deadLocal.Load(), n.healthyRemote.Load(), n.healthyLocal.Load(), n.healthyErr.Load(),
			n.healthySlow.Load(), admission.DefaultTimeout/2, time.Duration(n.worst.Load()).Round(time.Millisecond))
		if worst := time.Duration(n.worst.Load()); worst > admission.DefaultTimeout+latencyMargin {
			t.Errorf("%s: a call took %v, more than the timeout %v + %v", gt.name, worst, admission.DefaultTimeout, latencyMargin)
		}
		if n.deadRemote.Load() != 0 {
			t.Errorf("%s: %d decisions from Redis for tenants of the dead master", gt.name, n.deadRemote.Load())
		}
		if gt.policy == admission.FailClosed && n.deadLocal.Load() != 0 || gt.policy == admission.FailOpen && n.deadErr.Load() != 0 {
			t.Errorf("%s: tenants of the dead master got %d errors and %d local decisions", gt.name, n.deadErr.Load(), n.deadLocal.Load())
		}
		// Isolated: the healthy masters' tenants are decided by Redis. A
		// few calls starved of CPU past the timeout on a loaded machine are
		// tolerated; without isolation most of them fail.
		remote, off := n.healthyRemote.Load(), n.healthyLocal.Load()+n.healthyErr.Load()
		if remote == 0 || off*20 > remote {
			t.Errorf("%s: tenants on healthy masters: %d decided by Redis, %d not (at most 5%% may miss)", gt.name, remote, off)
		}
	}

	// The master comes back empty: every tenant is decided by Redis again.
	node.Restart()
	c.WaitHealthy(t)
	for _, gt := range gates {
		for _, tenant := range tenants {
			var d admission.Decision
			var err error
			waitFor(t, 5*time.Second, gt.name+": a decision from Redis for "+tenant, func() bool {
				d, err = gt.g.Admit(t.Context(), tenant)
				return err == nil && !d.Local
			})
		}
	}
}
