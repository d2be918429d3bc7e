// Package redistest starts throwaway redis-server processes for tests.
//
// Each server listens on a free 127.0.0.1 port, keeps its files in its own
// t.TempDir(), persists nothing and is killed when the test ends. Tests never
// share a database with anything else, so they may write, flush and kill at
// will, and run in parallel.
//
//	func TestAdmit(t *testing.T) {
//		t.Parallel()
//		srv := redistest.Start(t)
//		rdb := srv.Client(t) // closed when the test ends
//		...
//		srv.Kill()    // Redis dies
//		srv.Restart() // and comes back empty on the same port
//	}
//
// StartCluster does the same for a 3-master Redis Cluster; with
// WithReplicas each master gets a replica, for failover tests that SIGKILL
// a master (Nodes()[i].Kill()) and poll Serving until the replica has
// taken over.
//
// Where redis-server is not on PATH the tests are skipped, loudly, unless
// ADMITQ_REQUIRE_REDIS=1 (set by make test and CI), where they fail. On Debian
// or Ubuntu, install it with:
//
//	sudo apt-get install redis-server redis-tools
package redistest
